/* opreg_bench_gpu: the CUDA backend against raw cuBLAS, in one run.
 *
 *  1. linear forward + backward (input [8192, 4096], weight [4096, 4096], bias [4096],
 *     all requiring grad) through opreg, against the same three GEMMs (y = x W^T,
 *     dx = dy W, dW = dy^T x) issued straight to cuBLAS; f32 and bf16. Target: opreg
 *     within 10% of cuBLAS.
 *  2. per-op dispatch overhead on CUDA: add on two 8-element f32 tensors, launch
 *     included. Target: under 5 us per call.
 *
 * Needs a CUDA device; without one it says why and exits 0 (so a CPU-only build can
 * run `ninja bench`). Times are medians of repetitions, with device syncs around. */
#include <opreg/opreg.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPS 7

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static opr_tensor *filled(opr_ctx *ctx, opr_dtype dt, int ndim, const int64_t *shape, opr_device dev, float value)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    size_t es = opr_dtype_size(dt);
    unsigned char *buf = malloc((size_t)n * es);
    if (!buf) return NULL;
    for (int64_t i = 0; i < n; i++) {
        float v = value * (float)((i % 13) - 6) / 6.0f;
        if (dt == OPR_F32) memcpy(buf + i * 4, &v, 4);
        else { uint16_t h = opr_bf16_from_float(v); memcpy(buf + i * 2, &h, 2); }
    }
    opr_tensor *t = opr_tensor_from_data(ctx, dt, ndim, shape, buf, dev);
    free(buf);
    return t;
}

/* One opreg step: linear forward, backward with a given output gradient. */
static int opreg_linear_step(const opr_op *linear, opr_tensor *x, opr_tensor *w, opr_tensor *b, opr_tensor *dy)
{
    opr_value args[3] = {opr_v_tensor(x), opr_v_tensor(w), opr_v_tensor(b)};
    opr_tensor *y = NULL;
    int rc = opr_call(linear, args, 3, &y, 1);
    if (!rc) rc = opr_backward(y, dy, NULL);
    opr_tensor_release(y);
    opr_zero_grad(x);
    opr_zero_grad(w);
    opr_zero_grad(b);
    return rc;
}

static double bench_opreg_linear(opr_ctx *ctx, opr_device dev, opr_dtype dt, int64_t batch, int64_t in, int64_t out)
{
    const opr_op *linear = opr_op_find(ctx, "linear");
    int64_t xs[2] = {batch, in}, ws[2] = {out, in}, bs[1] = {out}, ys[2] = {batch, out};
    opr_tensor *x = filled(ctx, dt, 2, xs, dev, 1), *w = filled(ctx, dt, 2, ws, dev, 0.01f);
    opr_tensor *b = filled(ctx, dt, 1, bs, dev, 0.1f), *dy = filled(ctx, dt, 2, ys, dev, 1);
    double t[REPS], result = -1;
    if (!linear || !x || !w || !b || !dy) goto out;
    opr_set_requires_grad(x, true);
    opr_set_requires_grad(w, true);
    opr_set_requires_grad(b, true);
    if (opreg_linear_step(linear, x, w, b, dy)) goto out; /* warm up: caches, plans, cuBLAS */
    opr_device_sync(ctx, dev);
    for (int r = 0; r < REPS; r++) {
        double t0 = now();
        if (opreg_linear_step(linear, x, w, b, dy)) goto out;
        opr_device_sync(ctx, dev);
        t[r] = now() - t0;
    }
    result = median(t, REPS);
out:
    if (result < 0) fprintf(stderr, "opreg linear: %s\n", opr_last_error());
    opr_tensor_release(x);
    opr_tensor_release(w);
    opr_tensor_release(b);
    opr_tensor_release(dy);
    return result;
}

/* The same three GEMMs straight through cuBLAS (row-major data, so each call is the
 * column-major transpose of the row-major product). */
static double bench_cublas_linear(opr_dtype dt, int64_t batch, int64_t in, int64_t out)
{
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return -1;
    size_t es = dt == OPR_F32 ? 4 : 2;
    void *x, *w, *y, *dy, *dx, *dw;
    cudaMalloc(&x, (size_t)(batch * in) * es);
    cudaMalloc(&w, (size_t)(out * in) * es);
    cudaMalloc(&y, (size_t)(batch * out) * es);
    cudaMalloc(&dy, (size_t)(batch * out) * es);
    cudaMalloc(&dx, (size_t)(batch * in) * es);
    cudaMalloc(&dw, (size_t)(out * in) * es);
    cudaDataType ty = dt == OPR_F32 ? CUDA_R_32F : CUDA_R_16BF;
    cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
    const float one = 1, zero = 0;
    double t[REPS + 1];
    for (int r = 0; r <= REPS; r++) {
        cudaDeviceSynchronize();
        double t0 = now();
        /* y[batch,out] = x[batch,in] W^T  ->  col-major: y^T = W x^T */
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)batch, (int)in, &one, w, ty, (int)in, x, ty,
                     (int)in, &zero, y, ty, (int)out, ct, CUBLAS_GEMM_DEFAULT);
        /* dx[batch,in] = dy[batch,out] W[out,in]  ->  dx^T = W^T dy^T */
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)in, (int)batch, (int)out, &one, w, ty, (int)in, dy, ty,
                     (int)out, &zero, dx, ty, (int)in, ct, CUBLAS_GEMM_DEFAULT);
        /* dW[out,in] = dy^T[out,batch] x[batch,in]  ->  dW^T = x^T dy */
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, (int)in, (int)out, (int)batch, &one, x, ty, (int)in, dy, ty,
                     (int)out, &zero, dw, ty, (int)in, ct, CUBLAS_GEMM_DEFAULT);
        cudaDeviceSynchronize();
        t[r] = now() - t0;
    }
    cudaFree(x); cudaFree(w); cudaFree(y); cudaFree(dy); cudaFree(dx); cudaFree(dw);
    cublasDestroy(h);
    return median(t + 1, REPS); /* the first round warms cuBLAS up */
}

static double bench_dispatch(opr_ctx *ctx, opr_device dev)
{
    const opr_op *add = opr_op_find(ctx, "add");
    int64_t s[1] = {8};
    opr_tensor *a = filled(ctx, OPR_F32, 1, s, dev, 1), *b = filled(ctx, OPR_F32, 1, s, dev, 2);
    double t[REPS], result = -1;
    const int calls = 20000;
    if (!add || !a || !b) goto out;
    for (int r = 0; r < REPS; r++) {
        opr_device_sync(ctx, dev);
        double t0 = now();
        for (int i = 0; i < calls; i++) {
            opr_value args[2] = {opr_v_tensor(a), opr_v_tensor(b)};
            opr_tensor *c = NULL;
            if (opr_call(add, args, 2, &c, 1)) goto out;
            opr_tensor_release(c);
        }
        opr_device_sync(ctx, dev);
        t[r] = (now() - t0) / calls;
    }
    result = median(t, REPS);
out:
    if (result < 0) fprintf(stderr, "opreg add: %s\n", opr_last_error());
    opr_tensor_release(a);
    opr_tensor_release(b);
    return result;
}

int main(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: opreg_bench_gpu\n\nlinear forward+backward on CUDA (8192x4096 @ 4096x4096, f32 and bf16)\n"
               "against raw cuBLAS GEMMs, and the per-call overhead of add on CUDA.\n");
        return 0;
    }
    opr_ctx *ctx = opr_ctx_new(NULL);
    opr_device dev;
    if (!ctx || opr_device_parse(ctx, "cuda:0", &dev)) {
        printf("opreg_bench_gpu: skipped: %s\n", ctx ? opr_last_error() : "no context");
        opr_ctx_free(ctx);
        return 0;
    }
    const int64_t batch = 8192, in = 4096, out = 4096;
    printf("linear fwd+bwd, input [%lld, %lld], weight [%lld, %lld], median of %d\n", (long long)batch,
           (long long)in, (long long)out, (long long)in, REPS);
    printf("  %-6s %12s %12s %8s  %s\n", "dtype", "opreg ms", "cuBLAS ms", "ratio", "target <= 1.10");
    int status = 0;
    opr_dtype dts[2] = {OPR_F32, OPR_BF16};
    for (int i = 0; i < 2; i++) {
        double o = bench_opreg_linear(ctx, dev, dts[i], batch, in, out);
        double c = bench_cublas_linear(dts[i], batch, in, out);
        if (o < 0 || c < 0) { printf("  %-6s failed (see above)\n", opr_dtype_name(dts[i])); status = 1; continue; }
        printf("  %-6s %12.3f %12.3f %7.2fx  %s\n", opr_dtype_name(dts[i]), o * 1e3, c * 1e3, o / c,
               o / c <= 1.10 ? "PASS" : "MISS");
    }
    double d = bench_dispatch(ctx, dev);
    if (d < 0) status = 1;
    else printf("add f32[8] on cuda: %.2f us per call, launch included  (target < 5 us: %s)\n", d * 1e6,
                d < 5e-6 ? "PASS" : "MISS");
    opr_ctx_free(ctx);
    return status;
}
