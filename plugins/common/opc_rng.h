/* plugins/common (prefix opc_, C11 and C++17, host and device code; see
 * opc_blas_layout.h): the counter-based random numbers of the ops that draw randomness
 * (dropout_seeded). Element i of a call seeded with `seed` uses the i-th output of a
 * SplitMix64 stream started at seed, a pure function of (seed, i): every backend, thread
 * count and launch order gives the same numbers, and a backward formula regenerates
 * them from the seed instead of saving them. The seed comes from the context's
 * generator (opr_manual_seed, core/rng.c, the same SplitMix64). */
#ifndef OPREG_OPC_RNG_H
#define OPREG_OPC_RNG_H

#include <stdbool.h>
#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define OPC_HOST_DEVICE __host__ __device__
#else
#define OPC_HOST_DEVICE
#endif

/* The i-th (from 0) output of SplitMix64 seeded with seed. */
OPC_HOST_DEVICE static inline uint64_t opc_rng_u64(uint64_t seed, uint64_t i)
{
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A uniform double in [0, 1) from the top 53 bits: exact on every backend. */
OPC_HOST_DEVICE static inline double opc_rng_uniform(uint64_t seed, uint64_t i)
{
    return (double)(opc_rng_u64(seed, i) >> 11) * (1.0 / 9007199254740992.0);
}

/* Whether dropout with probability p keeps element i: its uniform is >= p (never for
 * p = 1, always for p = 0). */
OPC_HOST_DEVICE static inline bool opc_dropout_keeps(uint64_t seed, uint64_t i, double p)
{
    return opc_rng_uniform(seed, i) >= p;
}

#endif /* OPREG_OPC_RNG_H */
