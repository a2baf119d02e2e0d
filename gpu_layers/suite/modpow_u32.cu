// Modular exponentiation base^exp mod m with 64-bit intermediate products.
extern "C" __global__ void modpow_u32(const unsigned* base, const unsigned* exps, const unsigned* mods, unsigned* out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long m = mods[t];
    unsigned long long r = 1ull % m, b = base[t] % m;
    unsigned e = exps[t];
    while (e != 0u) {
        if (e & 1u)
            r = r * b % m;
        b = b * b % m;
        e >>= 1;
    }
    out[t] = (unsigned)r;
}
