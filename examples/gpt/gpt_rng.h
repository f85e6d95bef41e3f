/* The one random generator of the GPT example: SplitMix64 (Steele, Lea and Flood,
 * "Fast splittable pseudorandom number generators", 2014), chosen because it is a
 * few lines in any language, so tests/gpt_reference.py draws exactly the same
 * initial weights, batches and samples in Python:
 *
 *   state += 0x9E3779B97F4A7C15
 *   z = state; z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9; z = (z ^ z >> 27) * 0x94D049BB133111EB
 *   next = z ^ z >> 31                       (all mod 2^64)
 *   uniform = (next >> 11) * 2^-53           (a double in [0, 1), exact in both languages)
 */
#ifndef OPREG_EXAMPLE_GPT_RNG_H
#define OPREG_EXAMPLE_GPT_RNG_H

#include <stdint.h>

typedef struct gpt_rng {
    uint64_t state;
} gpt_rng;

/* A generator whose first draw follows `seed`. */
static inline gpt_rng gpt_rng_new(uint64_t seed)
{
    gpt_rng r = {seed};
    return r;
}

/* The next 64 random bits. */
static inline uint64_t gpt_rng_next(gpt_rng *r)
{
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A double uniform in [0, 1): the top 53 bits of the next draw. */
static inline double gpt_rng_uniform(gpt_rng *r)
{
    return (double)(gpt_rng_next(r) >> 11) * 0x1.0p-53;
}

#endif
