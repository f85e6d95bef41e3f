/* The context's random generator: a SplitMix64 stream. Ops that draw randomness get one
 * 64-bit seed per call from it (registry/dispatch.c, the `random:` key) and their
 * kernels turn (seed, element index) into random numbers with a counter-based hash
 * (plugins/common/opc_rng.h), so the results do not depend on the backend, the thread
 * count or the order in which elements are computed. */
#include "core.h"

/* SplitMix64's increment (2^64 / golden ratio, odd) and finaliser (Steele et al.). */
#define RNG_GAMMA 0x9E3779B97F4A7C15ull

static uint64_t rng_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void opr_manual_seed(opr_ctx *ctx, uint64_t seed)
{
    if (ctx) atomic_store(&ctx->rng_state, seed);
}

uint64_t opr_rng_next_seed(opr_ctx *ctx)
{
    return rng_mix(atomic_fetch_add(&ctx->rng_state, RNG_GAMMA) + RNG_GAMMA);
}
