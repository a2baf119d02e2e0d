// Words per text segment: count, longest word length and the start of the longest word.
extern "C" __global__ void word_stats(const unsigned char* text, const int* offsets, int nseg, int* stats)
{
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= nseg)
        return;
    int words = 0, best = 0, best_at = -1, cur = 0;
    for (int k = offsets[s]; k < offsets[s + 1]; ++k) {
        unsigned c = text[k];
        bool letter = (c | 32u) - 'a' < 26u;
        if (letter) {
            if (cur == 0)
                ++words;
            ++cur;
            if (cur > best) {
                best = cur;
                best_at = k - cur + 1;
            }
        } else {
            cur = 0;
        }
    }
    stats[3 * s + 0] = words;
    stats[3 * s + 1] = best;
    stats[3 * s + 2] = best_at;
}
