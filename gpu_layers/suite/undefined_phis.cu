// Legal CUDA whose PTX reads registers some threads have not written yet: loop phis become selp,
// mad and setp of an undefined value that the other arm throws away (poison that never shows).
extern "C" __global__ void last_positive(const int* x, int n, int* out) {
    int t = threadIdx.x;
    int last; bool has = false;
    for (int i = t; i < n; i += 7) { if (x[i] > 0) { last = x[i]; has = true; } }
    out[t] = has ? last : -1;
}
extern "C" __global__ void first_match(const int* x, int n, int key, int* out) {
    int t = threadIdx.x;
    int pos; bool found = false;
    for (int i = 0; i < n && !found; i++) { if (x[i] == key + t) { pos = i; found = true; } }
    if (found) out[t] = pos; else out[t] = -1;
}
extern "C" __global__ void prev_value(const int* x, int n, int* out) {
    int t = threadIdx.x;
    int prev;
    int acc = 0;
    for (int i = 0; i < n; i++) { int v = x[(i + t) % n]; if (i > 0) acc += v * prev; prev = v; }
    out[t] = acc;
}
extern "C" __global__ void min_index(const float* x, int n, int* out) {
    int t = threadIdx.x;
    float best; int bi = -1;
    for (int i = t; i < n; i += 3) { float v = x[i]; if (bi < 0 || v < best) { best = v; bi = i; } }
    out[t] = bi;
}
