// Tickets from atomicAdd (a permutation), atomicOr of ticket bits, atomicInc/atomicDec wrap, atomicSub.
extern "C" __global__ void ticket_atomics(unsigned* counter, unsigned* seen, unsigned* wrap, int* down,
                                          unsigned* ticket_sum)
{
    unsigned ticket = atomicAdd(counter, 1u);
    atomicOr(&seen[ticket >> 5], 1u << (ticket & 31u));
    atomicAdd(ticket_sum, ticket);
    atomicInc(&wrap[0], 9u);
    atomicDec(&wrap[1], 6u);
    atomicSub(down, 3);
}
