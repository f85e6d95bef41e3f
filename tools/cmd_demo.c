/* opreg demo: a small MLP (2 -> 64 -> 64 -> 3) evaluated on a generated three-spirals
 * data set, on the backend with the best probe score. Forward only for now: the
 * weights are random, so the accuracy is near chance (1/3); training comes with the
 * autograd engine. */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_CLASSES 3

typedef struct demo_ops {
    const opr_op *linear, *relu, *log_softmax, *max_dim, *mean, *gather, *neg, *eq;
} demo_ops;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double uniform(void) /* xorshift64*: reproducible across platforms */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static void spirals(int n_per_class, float *x, int64_t *y)
{
    for (int c = 0; c < N_CLASSES; c++)
        for (int i = 0; i < n_per_class; i++) {
            double r = (double)i / n_per_class;
            double th = c * 2.0 * M_PI / N_CLASSES + r * 4.0 + 0.2 * (uniform() - 0.5);
            int k = c * n_per_class + i;
            x[2 * k] = (float)(r * cos(th));
            x[2 * k + 1] = (float)(r * sin(th));
            y[k] = c;
        }
}

static opr_tensor *random_tensor(opr_ctx *ctx, int ndim, const int64_t *shape, double scale, opr_device dev)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    float *buf = malloc((size_t)n * sizeof *buf);
    if (!buf) return NULL;
    for (int64_t i = 0; i < n; i++) buf[i] = (float)((uniform() * 2 - 1) * scale);
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_F32, ndim, shape, buf, dev);
    free(buf);
    return t;
}

static opr_tensor *call1(const opr_op *op, const opr_value *args, int nargs)
{
    opr_tensor *out = NULL;
    if (opr_call(op, args, nargs, &out, 1)) fprintf(stderr, "opreg demo: %s\n", opr_last_error());
    return out;
}

/* The device type with the best-scored loaded plugin that can run every demo op. */
static opr_device best_device(opr_ctx *ctx, const demo_ops *ops)
{
    opr_device best = OPR_CPU;
    for (int t = 1; t < opr_device_type_count(ctx); t++) {
        const opr_op *need[] = {ops->linear, ops->relu, ops->log_softmax, ops->max_dim, ops->mean, ops->gather};
        bool ok = true;
        for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) ok &= opr_op_has_kernel(need[i], t);
        if (ok) best = (opr_device){t, 0};
    }
    return best;
}

int cmd_demo(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        printf("usage: opreg demo [--points N] [--plugin PATH]...\n\n"
               "Generates a three-spirals data set (N points per class, default 200), builds an MLP\n"
               "2 -> 64 -> 64 -> 3 with random weights and runs its forward pass (linear, relu,\n"
               "log_softmax, NLL loss, accuracy) in batches on the best available backend.\n");
        return 0;
    }
    int per_class = 200;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--points")) per_class = atoi(argv[++i]);
    if (per_class < 1 || per_class > 1000000) { fprintf(stderr, "opreg demo: --points must be 1..1000000\n"); return 2; }
    opr_ctx *ctx = cli_ctx_new(argc, argv);
    if (!ctx) return 1;
    demo_ops ops = {opr_op_find(ctx, "linear"), opr_op_find(ctx, "relu"), opr_op_find(ctx, "log_softmax"),
                    opr_op_find(ctx, "max_dim"), opr_op_find(ctx, "mean"), opr_op_find(ctx, "gather"),
                    opr_op_find(ctx, "neg"), opr_op_find(ctx, "eq")};
    if (!ops.linear || !ops.relu || !ops.log_softmax || !ops.max_dim || !ops.mean || !ops.gather || !ops.neg || !ops.eq) {
        fprintf(stderr, "opreg demo: %s\n", opr_last_error());
        opr_ctx_free(ctx);
        return 1;
    }
    opr_device dev = best_device(ctx, &ops);
    if (!opr_op_has_kernel(ops.linear, dev.type)) {
        fprintf(stderr, "opreg demo: no backend can run linear; is the CPU plugin installed? (try opreg info)\n");
        opr_ctx_free(ctx);
        return 1;
    }
    char devname[32];
    printf("opreg demo: three spirals, %d points, MLP 2-64-64-3 on %s\n", N_CLASSES * per_class,
           opr_device_format(ctx, dev, devname, sizeof devname));

    int n = N_CLASSES * per_class;
    float *x = malloc((size_t)n * 2 * sizeof *x);
    int64_t *y = malloc((size_t)n * sizeof *y);
    int rc = 1;
    opr_tensor *w[3] = {0}, *b[3] = {0};
    if (!x || !y) goto out;
    spirals(per_class, x, y);
    const int64_t dims[4] = {2, 64, 64, N_CLASSES};
    for (int l = 0; l < 3; l++) {
        int64_t ws[2] = {dims[l + 1], dims[l]}, bs[1] = {dims[l + 1]};
        w[l] = random_tensor(ctx, 2, ws, sqrt(6.0 / (double)dims[l]), dev);
        b[l] = random_tensor(ctx, 1, bs, 0.1, dev);
        if (!w[l] || !b[l]) { fprintf(stderr, "opreg demo: %s\n", opr_last_error()); goto out; }
    }
    const int batch = 100;
    double loss_sum = 0;
    int64_t correct = 0;
    for (int start = 0; start < n; start += batch) {
        int64_t m = n - start < batch ? n - start : batch;
        int64_t xs[2] = {m, 2}, ys[2] = {m, 1};
        opr_tensor *xb = opr_tensor_from_data(ctx, OPR_F32, 2, xs, x + 2 * start, dev);
        opr_tensor *yb = opr_tensor_from_data(ctx, OPR_I64, 2, ys, y + start, dev);
        opr_tensor *h = opr_tensor_retain(xb);
        for (int l = 0; l < 3 && h; l++) {
            opr_value la[3] = {opr_v_tensor(h), opr_v_tensor(w[l]), opr_v_tensor(b[l])};
            opr_tensor *z = call1(ops.linear, la, 3);
            opr_tensor_release(h);
            h = z;
            if (h && l < 2) {
                opr_value ra[1] = {opr_v_tensor(h)};
                z = call1(ops.relu, ra, 1);
                opr_tensor_release(h);
                h = z;
            }
        }
        opr_value lsa[2] = {opr_v_tensor(h), opr_v_int(1)};
        opr_tensor *logp = h ? call1(ops.log_softmax, lsa, 2) : NULL;
        opr_value ga[3] = {opr_v_tensor(logp), opr_v_int(1), opr_v_tensor(yb)};
        opr_tensor *picked = logp ? call1(ops.gather, ga, 3) : NULL;
        opr_value ma[1] = {opr_v_tensor(picked)};
        opr_tensor *mean = picked ? call1(ops.mean, ma, 1) : NULL;
        opr_tensor *pred[2] = {NULL, NULL};
        opr_value pa[3] = {opr_v_tensor(logp), opr_v_int(1), opr_v_bool(true)};
        if (mean && opr_call(ops.max_dim, pa, 3, pred, 2)) fprintf(stderr, "opreg demo: %s\n", opr_last_error());
        opr_value ea[2] = {opr_v_tensor(pred[1]), opr_v_tensor(yb)};
        opr_tensor *hit = pred[1] ? call1(ops.eq, ea, 2) : NULL;
        bool ok = hit != NULL;
        if (ok) {
            float mean_logp;
            uint8_t hits[128];
            ok = !opr_tensor_copy_to_host(mean, &mean_logp, sizeof mean_logp) &&
                 !opr_tensor_copy_to_host(hit, hits, sizeof hits);
            loss_sum += -mean_logp * (double)m;
            for (int64_t i = 0; i < m; i++) correct += hits[i];
            printf("  batch %3d/%d  loss %.4f\n", start / batch + 1, (n + batch - 1) / batch, -mean_logp);
        }
        opr_tensor *all[] = {xb, yb, h, logp, picked, mean, pred[0], pred[1], hit};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
        if (!ok) goto out;
    }
    printf("mean NLL loss %.4f, accuracy %.1f%% (untrained weights: chance is 33.3%%)\n", loss_sum / n,
           100.0 * (double)correct / n);
    rc = 0;
out:
    for (int l = 0; l < 3; l++) { opr_tensor_release(w[l]); opr_tensor_release(b[l]); }
    free(x);
    free(y);
    opr_ctx_free(ctx);
    return rc;
}
