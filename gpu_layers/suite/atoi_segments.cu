// Parse a signed decimal integer from each text segment with a small switch-based state machine.
extern "C" __global__ void atoi_segments(const char* text, const int* offsets, int nseg, int* value, int* used)
{
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= nseg)
        return;
    int k = offsets[s], end = offsets[s + 1];
    int state = 0, sign = 1, v = 0;  // 0 blanks, 1 after sign, 2 digits, 3 done
    while (k < end && state != 3) {
        char c = text[k];
        switch (state) {
        case 0:
            if (c == ' ' || c == '\t') {
                ++k;
            } else if (c == '-' || c == '+') {
                sign = (c == '-') ? -1 : 1;
                state = 1;
                ++k;
            } else {
                state = 1;
            }
            break;
        default:
            if (c >= '0' && c <= '9') {
                v = v * 10 + (c - '0');
                state = 2;
                ++k;
            } else {
                state = 3;
            }
            break;
        }
    }
    value[s] = sign * v;
    used[s] = (k - offsets[s]) | (state << 8);
}
