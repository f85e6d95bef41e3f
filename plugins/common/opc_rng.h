/* plugins/common (prefix opc_, C11 and C++17, host and device code; see
 * opc_blas_layout.h): the counter-based random numbers of the ops that draw randomness
 * (dropout_seeded, rand, randn, randperm: docs/random.md). Element i of a call seeded
 * with `seed` uses the i-th output of a SplitMix64 stream started at seed, a pure function of (seed, i): every backend, thread
 * count and launch order gives the same numbers, and a backward formula regenerates
 * them from the seed instead of saving them. The seed comes from the context's
 * generator (opr_manual_seed, core/rng.c, the same SplitMix64). */
#ifndef OPREG_OPC_RNG_H
#define OPREG_OPC_RNG_H

#include <math.h>
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

/* rand's f32 number: the top 24 bits of the i-th output, exactly representable in
 * float and in [0, 1) (rounding the 53-bit double could give 1.0f). It is the f64
 * number (opc_rng_uniform) truncated to 24 bits. */
OPC_HOST_DEVICE static inline float opc_rng_uniform_f32(uint64_t seed, uint64_t i)
{
    return (float)(opc_rng_u64(seed, i) >> 40) * (1.0f / 16777216.0f);
}

/* randn's element i: Box-Muller (the cosine branch only, so that each element is a pure
 * function of (seed, i)) from outputs 2i and 2i + 1 of the stream: u1 in (0, 1] (the top
 * 53 bits plus one, so log never sees 0), u2 in [0, 1),
 * z = sqrt(-2 log u1) cos(2 pi u2). Computed in double on every backend; the f32
 * result is this double rounded once. log, sqrt and cos are the C library's (the CUDA
 * math library's on a device: there the last bit of an f64 result may differ). */
OPC_HOST_DEVICE static inline double opc_rng_normal(uint64_t seed, uint64_t i)
{
    const double u1 = (double)((opc_rng_u64(seed, 2 * i) >> 11) + 1) * (1.0 / 9007199254740992.0);
    const double u2 = (double)(opc_rng_u64(seed, 2 * i + 1) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* randperm: a Fisher-Yates shuffle of 0..n-1 on the host, from the stream of seed:
 * for i = n - 1 down to 1, swap perm[i] with perm[j], j = (output i) mod (i + 1) (the
 * modulo bias, at most (i + 1) / 2^64, is far below anything measurable). Sequential
 * and integer-only, so every backend gets the same permutation (a device computes it on
 * the host and copies it over). */
static inline void opc_randperm(uint64_t seed, int64_t n, int64_t *perm)
{
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        const int64_t j = (int64_t)(opc_rng_u64(seed, (uint64_t)i) % (uint64_t)(i + 1));
        const int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

#endif /* OPREG_OPC_RNG_H */
