/* The libtorch side of the autograd benchmark (autograd_torch.cpp), called from the C
 * driver (autograd.c), which times these loops interleaved with opreg's and PyTorch's.
 * Compiled in only when CMake found libtorch (OPREG_BENCH_HAVE_TORCH). No function
 * throws: C++ exceptions become a nonzero return value (or NULL) and a message in err. */
#ifndef OPREG_BENCH_AUTOGRAD_TORCH_H
#define OPREG_BENCH_AUTOGRAD_TORCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sets libtorch's intra-op thread count (at::set_num_threads) and describes the build
 * into info. Returns 0 or < 0. */
int bat_init(int threads, char *info, size_t info_len, char *err, size_t err_len);

/* Case a: one step is  s = (x * y).sum(); s.backward(); x.grad = None (set to none);
 * drop s.  x and y hold n floats; x requires grad. grad_out (n floats, may be NULL)
 * receives x.grad of one step, for the correctness check. */
typedef struct bat_mulsum bat_mulsum;
bat_mulsum *bat_mulsum_new(const float *x, const float *y, int n, float *grad_out, char *err, size_t err_len);
/* Runs `iters` steps. */
int bat_mulsum_run(bat_mulsum *s, long iters, char *err, size_t err_len);
void bat_mulsum_free(bat_mulsum *s);

/* Case b: an MLP of `nlayers` linear layers with ReLU between, input x [batch, widths[0]],
 * layer l: weight [widths[l+1], widths[l]], bias [widths[l+1]], copied from the given
 * host arrays; trainable[l] marks the layers whose weight and bias require grad.
 * A step is forward, loss = sum(output), backward, grads set to none. */
typedef struct bat_mlp bat_mlp;
bat_mlp *bat_mlp_new(int nlayers, const int64_t *widths, int64_t batch, const float *x, const float *const *w,
                     const float *const *b, const bool *trainable, char *err, size_t err_len);
/* Runs one step, for the check: the loss in *loss and, for each of the n layers in
 * `layers`, its weight gradient (widths[l+1] x widths[l] floats) in dw[i]. */
int bat_mlp_step_grads(bat_mlp *m, int n, const int *layers, float *const *dw, double *loss, char *err, size_t err_len);
/* Runs `iters` whole steps (forward + backward + grads set to none). */
int bat_mlp_run(bat_mlp *m, long iters, char *err, size_t err_len);
void bat_mlp_free(bat_mlp *m);

#ifdef __cplusplus
}
#endif
#endif /* OPREG_BENCH_AUTOGRAD_TORCH_H */
