// Reverse-Polish evaluation with a per-thread local-array stack (dynamic indexing).
// Tokens >= 0 push themselves; -1 add, -2 sub, -3 mul, -4 max, -5 dup, -6 end. Arithmetic wraps.
extern "C" __global__ void rpn_eval(const int* tokens, const int* start, int* result, int* depth)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int stack[16];
    int sp = 0, max_sp = 0;
    for (int k = start[t];; ++k) {
        int tok = tokens[k];
        if (tok == -6)
            break;
        if (tok >= 0) {
            stack[sp++] = tok;
        } else if (tok == -5) {
            stack[sp] = stack[sp - 1];
            ++sp;
        } else {
            unsigned b = (unsigned)stack[--sp];
            unsigned a = (unsigned)stack[--sp];
            unsigned r;
            switch (tok) {
            case -1: r = a + b; break;
            case -2: r = a - b; break;
            case -3: r = a * b; break;
            default: r = (int)a > (int)b ? a : b; break;
            }
            stack[sp++] = (int)r;
        }
        if (sp > max_sp)
            max_sp = sp;
    }
    result[t] = sp > 0 ? stack[sp - 1] : 0;
    depth[t] = max_sp * 100 + sp;
}
