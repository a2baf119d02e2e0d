// Extended Euclid with signed arithmetic: gcd(a, m) and the inverse of a modulo m (or -1).
extern "C" __global__ void mod_inverse(int n, const int* a, const int* m, int* gcd, int* inv)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n)
        return;
    int mod = m[t];
    int old_r = a[t], r = mod, old_s = 1, s = 0;
    while (r != 0) {
        int q = old_r / r;
        int tmp = old_r - q * r;
        old_r = r;
        r = tmp;
        tmp = old_s - q * s;
        old_s = s;
        s = tmp;
    }
    gcd[t] = old_r;
    inv[t] = (old_r == 1) ? ((old_s % mod) + mod) % mod : -1;
}
