/* opreg_bench_cpu_speed: the CPU backend's elementwise math, reductions and cdist side by
 * side with PyTorch (bench/cpu_speed_torch.py, run as a subprocess with the first
 * python3 that has torch) and with what the hardware allows: a plain copy, a plain
 * read loop, or the raw sgemm the work needs. f32, --threads N (default 1) everywhere.
 * Every figure is the median over --reps repetitions of a calibrated loop
 * (bench_timing.h); PyTorch's side is timed the same way in Python, whose per-call
 * overhead (a few us) is small next to these sizes. Both run with the allocator policy of
 * bench_malloc.h (freed memory kept; tensors above 32 MiB still mapped afresh).
 *
 * Targets (issue "CPU backend at the hardware limit"): opreg/torch <= 1.0 on every row;
 * cdist forward within 1.5x of the sgemm; elementwise and reductions near the copy or
 * read limit at 16M; the per-op cost of a graph of 10^4 ops within 1.2x of that of 100.
 *
 *   opreg_bench_cpu_speed [--threads N] [--reps N] [--no-torch] [--only a,b] */
#include "bench_config.h"
#include "bench_malloc.h"
#include "bench_tensor.h"
#include "bench_timing.h"

#include <opreg/opreg.h>

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static opr_ctx *ctx;

/* What bounds a row from below: the raw GEMM of its products, a copy of its bytes
 * (elementwise: read n, write n), or one read of its input (reductions). */
typedef enum { LIM_SGEMM, LIM_COPY, LIM_READ, LIM_NONE } limit_kind;
static const char *const limit_names[] = {"sgemm", "copy", "read", "-"};

typedef struct bcase {
    const char *name;  /* also the PyTorch side's name */
    const char *label; /* as the table says it */
    const char *op;
    int nin, ndim;
    int64_t shape[2];
    double lo, hi;
    int nextra;
    opr_value extra[4];
    bool backward; /* time the backward of op (forward untimed, graph retained) */
    limit_kind limit;
    int chain;     /* > 0: a graph of `chain` ops (op on 8 elements) recorded and run
                      backward, figures per op */
} bcase;

typedef struct run_state {
    const bcase *c;
    const opr_op *op;
    opr_value args[5];
    int nargs;
    opr_tensor *y; /* backward: the output, its graph retained */
    opr_tensor *x[2];
} run_state;

static int body_forward(void *sv, long iters)
{
    run_state *s = sv;
    for (long i = 0; i < iters; i++) {
        opr_tensor *y = NULL;
        if (opr_call(s->op, s->args, s->nargs, &y, 1)) return 1;
        opr_tensor_release(y);
    }
    return 0;
}

static int body_backward(void *sv, long iters)
{
    run_state *s = sv;
    opr_backward_opts o = {.struct_size = sizeof o, .retain_graph = true};
    for (long i = 0; i < iters; i++) {
        opr_tensor *g = NULL;
        if (opr_autograd_grad(&s->y, NULL, 1, s->x, s->c->nin, &g, &o)) return 1;
        opr_tensor_release(g);
    }
    return 0;
}

/* A chain x = op(x, c) of c->chain ops from a leaf, summed, then its backward: the
 * per-node cost of recording and running a graph, which should not grow with its size. */
static int body_chain(void *sv, long iters)
{
    run_state *s = sv;
    const opr_op *sum = opr_op_find(ctx, "sum");
    for (long it = 0; it < iters; it++) {
        opr_tensor *x = opr_tensor_retain(s->x[0]);
        for (int i = 0; i < s->c->chain && x; i++) {
            opr_value a[2] = {opr_v_tensor(x), opr_v_tensor(s->x[1])};
            opr_tensor *y = NULL;
            if (opr_call(s->op, a, 2, &y, 1)) y = NULL;
            opr_tensor_release(x);
            x = y;
        }
        opr_tensor *loss = NULL, *g = NULL;
        opr_value a = opr_v_tensor(x);
        const int rc = !x || opr_call(sum, &a, 1, &loss, 1) ||
                       opr_autograd_grad(&loss, NULL, 1, s->x, 1, &g, NULL);
        opr_tensor_release(x);
        opr_tensor_release(loss);
        opr_tensor_release(g);
        if (rc) return 1;
    }
    return 0;
}

/* The limits, on buffers of the row's size. */
typedef struct limit_state {
    limit_kind kind;
    int64_t n, rows, cols; /* elements; sgemm: rows x rows over cols */
    float *a, *b, *c;
    volatile float sink;
} limit_state;

static int body_limit(void *sv, long iters)
{
    limit_state *s = sv;
    for (long it = 0; it < iters; it++) {
        if (s->kind == LIM_SGEMM) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)s->rows, (int)s->rows, (int)s->cols, 1.0f,
                        s->a, (int)s->cols, s->b, (int)s->cols, 0.0f, s->c, (int)s->rows);
            continue;
        }
        /* copy and read on as many threads as opreg gets, each on its own slice */
        float total = 0;
#pragma omp parallel reduction(+ : total)
        {
            const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
            const int64_t lo = s->n * t / nt, hi = s->n * (t + 1) / nt;
            if (s->kind == LIM_COPY) {
                memcpy(s->c + lo, s->a + lo, (size_t)(hi - lo) * sizeof(float));
            } else {
                float acc[16] = {0};
                int64_t i = lo;
                for (; i + 16 <= hi; i += 16)
                    for (int k = 0; k < 16; k++) acc[k] += s->a[i + k];
                for (int k = 0; k < 16; k++) total += acc[k];
            }
        }
        s->sink = total;
    }
    return 0;
}

static double limit_ns(const bcase *c, const bench_opts *bo)
{
    if (c->limit == LIM_NONE) return -1;
    limit_state s = {.kind = c->limit, .n = 1};
    for (int d = 0; d < c->ndim; d++) s.n *= c->shape[d];
    s.rows = c->shape[0];
    s.cols = c->ndim > 1 ? c->shape[1] : 1;
    const size_t out = c->limit == LIM_SGEMM ? (size_t)(s.rows * s.rows) : (size_t)s.n;
    s.a = calloc((size_t)s.n, sizeof(float));
    s.b = calloc((size_t)s.n, sizeof(float));
    s.c = calloc(out, sizeof(float));
    double ns = -1;
    if (s.a && s.b && s.c) ns = bench_measure(body_limit, &s, bo).ns;
    free(s.a);
    free(s.b);
    free(s.c);
    return ns;
}

static double opreg_ns(const bcase *c, const bench_opts *bo)
{
    run_state s = {.c = c, .op = opr_op_find(ctx, c->op)};
    if (!s.op) { fprintf(stderr, "%s: no op %s\n", c->name, c->op); return -1; }
    for (int k = 0; k < c->nin; k++) {
        if (!(s.x[k] = bench_rand_f32(ctx, c->ndim, c->shape, c->lo, c->hi, 11 + (unsigned)k))) return -1;
        if (c->backward || (c->chain && k == 0)) opr_set_requires_grad(s.x[k], true);
        s.args[s.nargs++] = opr_v_tensor(s.x[k]);
    }
    for (int k = 0; k < c->nextra; k++) s.args[s.nargs++] = c->extra[k];
    double ns = -1;
    if (c->chain) {
        ns = bench_measure(body_chain, &s, bo).ns / c->chain;
    } else if (c->backward) {
        if (!opr_call(s.op, s.args, s.nargs, &s.y, 1)) ns = bench_measure(body_backward, &s, bo).ns;
    } else {
        ns = bench_measure(body_forward, &s, bo).ns;
    }
    if (ns < 0) fprintf(stderr, "%s: %s\n", c->name, opr_last_error());
    opr_tensor_release(s.y);
    for (int k = 0; k < c->nin; k++) opr_tensor_release(s.x[k]);
    return ns;
}

/* PyTorch's figures for the cases in `names`; -1 where none came. */
static bool torch_figures(int threads, int reps, const char *only, const char *names[], double *ns, int n)
{
    const char *pys[] = {getenv("OPREG_BENCH_PYTHON"), "python3", "/usr/bin/python3"};
    for (int p = 0; p < 3; p++) {
        if (!pys[p]) continue;
        char cmd[2048];
        snprintf(cmd, sizeof cmd,
                 "'%s' -c 'import torch' 2>/dev/null && '%s' '%s/cpu_speed_torch.py' %d %d %s 2>/dev/null", pys[p],
                 pys[p], OPREG_BENCH_SOURCE_DIR, threads, reps, only ? only : "");
        FILE *f = popen(cmd, "r");
        if (!f) continue;
        char name[128];
        double v;
        int got = 0;
        while (fscanf(f, "%127s %lf", name, &v) == 2)
            for (int i = 0; i < n; i++)
                if (!strcmp(name, names[i])) { ns[i] = v; got++; }
        if (pclose(f) == 0 && got > 0) return true;
    }
    return false;
}

static bool selected(const char *only, const char *name)
{
    if (!only) return true;
    const size_t len = strlen(name);
    for (const char *p = only; (p = strstr(p, name)); p += len)
        if ((p == only || p[-1] == ',') && (p[len] == ',' || p[len] == 0)) return true;
    return false;
}

static void cell(char *buf, size_t size, double ns)
{
    if (ns > 0) snprintf(buf, size, "%.1f", ns / 1e3);
    else snprintf(buf, size, "-");
}

static void ratio(char *buf, size_t size, double a, double b)
{
    if (a > 0 && b > 0) snprintf(buf, size, "%.2fx", a / b);
    else snprintf(buf, size, "-");
}

int main(int argc, char **argv)
{
    int threads = 1, reps = 7;
    bool torch = true;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--no-torch")) torch = false;
        else {
            printf("usage: opreg_bench_cpu_speed [--threads N] [--reps N] [--no-torch] [--only a,b]\n\n"
                   "The CPU backend against PyTorch and the hardware limit (copy, read, sgemm), f32,\n"
                   "N threads (default 1), median of --reps repetitions (default 7).\n");
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    if (threads < 1) threads = 1;
    if (bench_keep_freed_memory()) {
        fprintf(stderr, "opreg_bench_cpu_speed: could not set the allocator policy\n");
        return 1;
    }
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    ctx = opr_ctx_new(NULL);
    if (!ctx) { fprintf(stderr, "opr_ctx_new: %s\n", opr_last_error()); return 1; }

    static const int64_t dim0[] = {0}, dim1[] = {1};
    /* advanced indexing: 4096 random rows (repeats included) of a 4096 x 256 matrix,
     * gathered (x[i]) and accumulated into (x.index_put_([i], v, accumulate=True)) */
    static const int64_t rows_shape[] = {4096, 256}, nrows = 4096;
    int64_t *rows = malloc((size_t)nrows * sizeof *rows);
    if (!rows) return 1;
    for (int64_t i = 0; i < nrows; i++) rows[i] = (int64_t)((uint64_t)(i * 2654435761u + 12345u) % (uint64_t)nrows);
    opr_tensor *row_index = opr_tensor_from_data(ctx, OPR_I64, 1, &nrows, rows, OPR_CPU);
    opr_tensor *row_values = bench_rand_f32(ctx, 2, rows_shape, -1, 1, 29);
    /* scatter_reduce along dim 0: the same rows, each index row one row number repeated
     * (index[i][j] = rows[i]: x.scatter_reduce(0, i[:, None].expand(-1, 256), v, "sum"),
     * made contiguous) */
    int64_t *rows2 = malloc((size_t)(nrows * rows_shape[1]) * sizeof *rows2);
    if (!rows2) return 1;
    for (int64_t i = 0; i < nrows * rows_shape[1]; i++) rows2[i] = rows[i / rows_shape[1]];
    opr_tensor *scatter_index = opr_tensor_from_data(ctx, OPR_I64, 2, rows_shape, rows2, OPR_CPU);
    free(rows);
    free(rows2);
    if (!row_index || !row_values || !scatter_index) { fprintf(stderr, "index rows: %s\n", opr_last_error()); return 1; }
    const bcase cases[] = {
        {"cdist_fwd", "cdist 2048x64 vs 2048x64 fwd", "cdist", 2, 2, {2048, 64}, -1, 1, 0, {{0}}, false, LIM_SGEMM, 0},
        {"norm_bwd_1M", "norm backward 1M", "norm", 1, 1, {1 << 20}, -1, 1, 0, {{0}}, true, LIM_COPY, 0},
        {"exp_1M", "exp 1M", "exp", 1, 1, {1 << 20}, -1, 1, 0, {{0}}, false, LIM_COPY, 0},
        {"sigmoid_1M", "sigmoid 1M", "sigmoid", 1, 1, {1 << 20}, -8, 8, 0, {{0}}, false, LIM_COPY, 0},
        {"softmax_4096sq", "softmax 4096^2 (dim 1)", "softmax", 1, 2, {4096, 4096}, -4, 4, 1, {opr_v_int(1)},
         false, LIM_COPY, 0},
        {"log_softmax_4096sq", "log_softmax 4096^2 (dim 1)", "log_softmax", 1, 2, {4096, 4096}, -4, 4, 1,
         {opr_v_int(1)}, false, LIM_COPY, 0},
        {"sum_dim0_4096sq", "sum dim 0 of 4096^2", "sum", 1, 2, {4096, 4096}, -1, 1, 1, {opr_v_ints(dim0, 1)},
         false, LIM_READ, 0},
        {"sum_dim1_4096sq", "sum dim 1 of 4096^2", "sum", 1, 2, {4096, 4096}, -1, 1, 1, {opr_v_ints(dim1, 1)},
         false, LIM_READ, 0},
        {"sum_all_4096sq", "sum all of 4096^2", "sum", 1, 2, {4096, 4096}, -1, 1, 0, {{0}}, false, LIM_READ, 0},
        {"norm_fwd_16M", "norm forward 16M", "norm", 1, 1, {1 << 24}, -1, 1, 0, {{0}}, false, LIM_READ, 0},
        {"relu_1M", "relu 1M", "relu", 1, 1, {1 << 20}, -1, 1, 0, {{0}}, false, LIM_COPY, 0},
        /* pointwise.yaml: libm in a shared loop, two inputs, NaN-aware compare, fmod */
        {"sin_1M", "sin 1M", "sin", 1, 1, {1 << 20}, -4, 4, 0, {{0}}, false, LIM_COPY, 0},
        {"atan2_1M", "atan2 1M", "atan2", 2, 1, {1 << 20}, -1, 1, 0, {{0}}, false, LIM_COPY, 0},
        {"maximum_1M", "maximum 1M", "maximum", 2, 1, {1 << 20}, -1, 1, 0, {{0}}, false, LIM_COPY, 0},
        {"minimum_1M", "minimum 1M", "minimum", 2, 1, {1 << 20}, -1, 1, 0, {{0}}, false, LIM_COPY, 0},
        {"fmod_1M", "fmod 1M", "fmod", 2, 1, {1 << 20}, 0.5, 2, 0, {{0}}, false, LIM_COPY, 0},
        {"cos_1M", "cos 1M", "cos", 1, 1, {1 << 20}, -4, 4, 0, {{0}}, false, LIM_COPY, 0},
        {"asin_1M", "asin 1M", "asin", 1, 1, {1 << 20}, -1, 1, 0, {{0}}, false, LIM_COPY, 0},
        {"atanh_1M", "atanh 1M", "atanh", 1, 1, {1 << 20}, -0.9, 0.9, 0, {{0}}, false, LIM_COPY, 0},
        {"expm1_1M", "expm1 1M", "expm1", 1, 1, {1 << 20}, -1, 1, 0, {{0}}, false, LIM_COPY, 0},
        {"log1p_1M", "log1p 1M", "log1p", 1, 1, {1 << 20}, 0, 4, 0, {{0}}, false, LIM_COPY, 0},
        {"log2_1M", "log2 1M", "log2", 1, 1, {1 << 20}, 0.1, 4, 0, {{0}}, false, LIM_COPY, 0},
        {"erf_1M", "erf 1M", "erf", 1, 1, {1 << 20}, -2, 2, 0, {{0}}, false, LIM_COPY, 0},
        /* reduction.yaml / shape.yaml */
        {"cumsum_4096sq", "cumsum dim 1 of 4096^2", "cumsum", 1, 2, {4096, 4096}, -1, 1, 1, {opr_v_int(1)},
         false, LIM_COPY, 0},
        {"cumsum_dim0_4096sq", "cumsum dim 0 of 4096^2", "cumsum", 1, 2, {4096, 4096}, -1, 1, 1, {opr_v_int(0)},
         false, LIM_COPY, 0},
        {"amax_dim1_4096sq", "amax dim 1 of 4096^2", "amax", 1, 2, {4096, 4096}, -1, 1, 1, {opr_v_ints(dim1, 1)},
         false, LIM_READ, 0},
        {"amax_dim0_4096sq", "amax dim 0 of 4096^2", "amax", 1, 2, {4096, 4096}, -1, 1, 1, {opr_v_ints(dim0, 1)},
         false, LIM_READ, 0},
        {"amin_dim1_4096sq", "amin dim 1 of 4096^2", "amin", 1, 2, {4096, 4096}, -1, 1, 1, {opr_v_ints(dim1, 1)},
         false, LIM_READ, 0},
        /* out of cache: the bandwidth target for elementwise work */
        {"exp_16M", "exp 16M", "exp", 1, 1, {1 << 24}, -1, 1, 0, {{0}}, false, LIM_COPY, 0},
        {"sigmoid_16M", "sigmoid 16M", "sigmoid", 1, 1, {1 << 24}, -8, 8, 0, {{0}}, false, LIM_COPY, 0},
        {"relu_16M", "relu 16M", "relu", 1, 1, {1 << 24}, -1, 1, 0, {{0}}, false, LIM_COPY, 0},
        {"sin_16M", "sin 16M", "sin", 1, 1, {1 << 24}, -4, 4, 0, {{0}}, false, LIM_COPY, 0},
        {"log1p_16M", "log1p 16M", "log1p", 1, 1, {1 << 24}, 0, 4, 0, {{0}}, false, LIM_COPY, 0},
        /* indexing.yaml: x[i] and index_put with accumulate (repeated rows summed) */
        {"index_rows_1M", "index 4096 rows of 4096x256", "index.Tensor", 1, 2, {4096, 256}, -1, 1, 1,
         {opr_v_tensors(&row_index, 1)}, false, LIM_COPY, 0},
        {"index_put_acc_1M", "index_put accumulate 4096 rows", "index_put", 1, 2, {4096, 256}, -1, 1, 3,
         {opr_v_tensors(&row_index, 1), opr_v_tensor(row_values), opr_v_bool(true)}, false, LIM_COPY, 0},
        {"scatter_reduce_sum_1M", "scatter_reduce sum 4096 rows", "scatter_reduce", 1, 2, {4096, 256}, -1, 1, 4,
         {opr_v_int(0), opr_v_tensor(scatter_index), opr_v_tensor(row_values), opr_v_string("sum")}, false, LIM_COPY,
         0},
        {"chain_100", "graph of 100 adds, per op", "add", 2, 1, {8}, -1, 1, 0, {{0}}, false, LIM_NONE, 100},
        {"chain_10k", "graph of 10^4 adds, per op", "add", 2, 1, {8}, -1, 1, 0, {{0}}, false, LIM_NONE, 10000},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    const char *names[N];
    double tns[N];
    for (int i = 0; i < N; i++) { names[i] = cases[i].name; tns[i] = -1; }
    const bool have_torch = torch && torch_figures(threads, reps, only, names, tns, N);
    const bench_opts bo = {.cell_s = 0.3, .reps = reps};

    printf("opreg CPU backend, f32, %d thread%s, median of %d; torch = PyTorch (python3)%s;\nC allocator: %s; "
           "OpenBLAS kernels: %s (OPENBLAS_CORETYPE picks others, for every side)\n\n",
           threads, threads == 1 ? "" : "s", reps, have_torch ? "" : ": not found, or --no-torch", BENCH_MALLOC_POLICY,
           openblas_get_corename());
    printf("%-30s %11s %11s %11s %-6s %12s %12s\n", "work", "opreg us", "torch us", "limit us", "limit",
           "opreg/torch", "opreg/limit");
    int status = 0;
    double chain_ns[2] = {-1, -1}; /* per op, graphs of 100 and of 10^4 */
    for (int i = 0; i < N; i++) {
        const bcase *c = &cases[i];
        if (!selected(only, c->name)) continue;
        const double o = opreg_ns(c, &bo), l = limit_ns(c, &bo);
        if (o < 0) status = 1;
        if (c->chain) chain_ns[c->chain > 100] = o;
        char co[32], ct[32], cl[32], rt[32], rl[32];
        cell(co, sizeof co, o);
        cell(ct, sizeof ct, tns[i]);
        cell(cl, sizeof cl, l);
        ratio(rt, sizeof rt, o, tns[i]);
        ratio(rl, sizeof rl, o, l);
        printf("%-30s %11s %11s %11s %-6s %12s %12s\n", c->label, co, ct, cl, limit_names[c->limit], rt, rl);
        fflush(stdout);
    }
    if (chain_ns[0] > 0 && chain_ns[1] > 0)
        printf("\ngraph growth: per op at 10^4 ops / at 100: %.2fx (opreg %.3f / %.3f us, target <= 1.2x)\n",
               chain_ns[1] / chain_ns[0], chain_ns[1] / 1e3, chain_ns[0] / 1e3);
    printf("\nopreg/torch > 1: opreg is slower. limit: sgemm = one raw x1 x2^T; copy = memcpy of the\n"
           "input; read = one plain pass over the input (16 float partial sums); copy and read\n"
           "split over the same threads as opreg. PyTorch's elementwise and softmax rows write into\n"
           "a preallocated output (out=): its allocator would map and page-fault each large output\n"
           "afresh, opreg's keeps its blocks. graph: forward\n"
           "(recording) and backward of a chain of adds on 8 floats, divided by its length.\n");
    opr_tensor_release(row_index);
    opr_tensor_release(row_values);
    opr_tensor_release(scatter_index);
    opr_ctx_free(ctx);
    return status;
}
