/* The libtorch side of the dispatch benchmark (dispatch_torch.cpp), called from the C
 * driver (dispatch.c). Compiled in only when CMake found libtorch
 * (OPREG_BENCH_HAVE_TORCH). No function throws: C++ exceptions become a negative
 * return value and a message in `err`. */
#ifndef OPREG_BENCH_TORCH_H
#define OPREG_BENCH_TORCH_H

#include <stddef.h>

#include "bench_timing.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How libtorch runs add / mm. */
typedef enum bt_mode {
    BT_PLAIN = 0,     /* default grad mode; inputs do not require grad */
    BT_NO_GRAD = 1,   /* torch::NoGradGuard */
    BT_INFERENCE = 2, /* c10::InferenceMode (inputs created inside it too) */
    BT_MODE_COUNT
} bt_mode;

/* Sets libtorch's intra-op thread count (torch::set_num_threads) and describes the
 * build into info: version, parallel backend, thread counts. Returns 0 or < 0. */
int bt_init(int threads, char *info, size_t info_len, char *err, size_t err_len);

/* out = a + b (n floats), once, for the correctness check. */
int bt_add_once(const float *a, const float *b, int n, float *out, char *err, size_t err_len);
/* out = a @ b (n x n floats, row-major), once. */
int bt_mm_once(const float *a, const float *b, int n, float *out, char *err, size_t err_len);

/* Times at::add on two n-float tensors (a fresh output each call, dropped at once). */
int bt_time_add(const float *a, const float *b, int n, bt_mode mode, const bench_opts *o,
                bench_result *res, char *err, size_t err_len);
/* Times at::mm on two n x n float tensors. */
int bt_time_mm(const float *a, const float *b, int n, bt_mode mode, const bench_opts *o,
               bench_result *res, char *err, size_t err_len);

const char *bt_mode_name(bt_mode mode);

#ifdef __cplusplus
}
#endif
#endif /* OPREG_BENCH_TORCH_H */
