// Primality by trial division with early exit: smallest factor (or the number itself), prime flag.
extern "C" __global__ void prime_trial(const unsigned* in, unsigned* factor, int* is_prime)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned n = in[t];
    factor[t] = n;
    is_prime[t] = 0;
    if (n < 2u)
        return;
    if ((n & 1u) == 0u) {
        factor[t] = 2u;
        is_prime[t] = (n == 2u);
        return;
    }
    for (unsigned d = 3u; d <= n / d; d += 2u) {
        if (n % d == 0u) {
            factor[t] = d;
            return;
        }
    }
    is_prime[t] = 1;
}
