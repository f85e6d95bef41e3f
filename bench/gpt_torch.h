/* The libtorch side of opreg_bench_gpt (gpt_torch.cpp): the demo GPT's training steps
 * in C++ with ATen, called from the C driver (gpt.c). Compiled in only when CMake found
 * libtorch (OPREG_BENCH_HAVE_TORCH). No function throws: C++ exceptions become a
 * negative return value and a message in `err`. */
#ifndef OPREG_BENCH_GPT_TORCH_H
#define OPREG_BENCH_GPT_TORCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The model's shape and training run. */
typedef struct bgt_config {
    int layers, heads, embd, context, batch, vocab;
    int threads;          /* at::set_num_threads */
    int warmup, steps;
    uint64_t seed;        /* weights: SplitMix64(seed), as examples/gpt/gpt_model.h; batches: seed + 1 */
} bgt_config;

/* Trains warmup + steps AdamW steps on tokens (n of them) in f32 and gives the rate of
 * the last `steps` in tokens/s. Returns 0 or < 0 with err. */
int bgt_train(const bgt_config *c, const int64_t *tokens, int64_t n, double *tokens_per_s, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
