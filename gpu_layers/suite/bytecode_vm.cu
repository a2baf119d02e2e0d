// A tiny accumulator machine: each thread interprets a shared program from its own entry point.
// Word = op | arg << 8. Ops: 0 halt, 1 addi, 2 muli, 3 xori, 4 shri, 5 loop (--cnt, jump if != 0),
// 6 setcnt, 7 swap acc/b, 8 add b, 9 jump if acc < 0.
extern "C" __global__ void bytecode_vm(const int* prog, const int* entry, const int* input, int* result, int* steps)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int pc = entry[t], acc = input[t], b = 0, cnt = 0, k = 0;
    bool running = true;
    while (running && k < 200) {
        int w = prog[pc];
        int op = w & 0xff;
        int arg = w >> 8;
        ++pc;
        ++k;
        switch (op) {
        case 0: running = false; break;
        case 1: acc = (int)((unsigned)acc + (unsigned)arg); break;
        case 2: acc = (int)((unsigned)acc * (unsigned)arg); break;
        case 3: acc ^= arg; break;
        case 4: acc = (int)((unsigned)acc >> (arg & 31)); break;
        case 5: if (--cnt != 0) pc = arg; break;
        case 6: cnt = arg; break;
        case 7: { int tmp = acc; acc = b; b = tmp; } break;
        case 8: acc = (int)((unsigned)acc + (unsigned)b); break;
        case 9: if (acc < 0) pc = arg; break;
        default: running = false; break;
        }
    }
    result[t] = acc ^ b;
    steps[t] = k * 1000 + pc;
}
