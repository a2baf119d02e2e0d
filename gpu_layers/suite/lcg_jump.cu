// Jump a 64-bit LCG (MMIX constants) ahead by k[t] steps with O(log k) map compositions.
extern "C" __global__ void lcg_jump(const unsigned long long* state, const unsigned* k, unsigned long long* out)
{
    int t = threadIdx.x;
    unsigned long long a = 6364136223846793005ull, c = 1442695040888963407ull;
    unsigned long long A = 1ull, C = 0ull;
    unsigned n = k[t];
    while (n != 0u) {
        if (n & 1u) {
            A = A * a;
            C = C * a + c;
        }
        c = (a + 1ull) * c;
        a = a * a;
        n >>= 1;
    }
    out[t] = A * state[t] + C;
}
