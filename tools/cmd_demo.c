/* opreg demo: trains an MLP (2 -> 64 -> 64 -> 3) with its middle layer frozen on a
 * generated three-spirals data set, on the backend with the best probe score, then
 * shows per op which derivative formulas the registry chose and what they saved next
 * to saving every input. */
#include "cli.h"

#include "gpt/gpt_demo.h"
#include "resnet/resnet_demo.h"
#include "saved_table.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_CLASSES 3
#define HIDDEN 64
#define LAYERS 3

typedef struct demo_ops {
    const opr_op *linear, *relu, *log_softmax, *gather, *mean, *neg, *sgd, *max_dim, *eq, *sum;
} demo_ops;

typedef struct model {
    opr_tensor *w[LAYERS], *b[LAYERS];
    bool trainable[LAYERS];
} model;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double uniform(void) /* xorshift64*: reproducible everywhere */
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
            double r = (double)(i + 1) / n_per_class;
            double th = c * 2.0 * M_PI / N_CLASSES + r * 3.5 + 0.15 * (uniform() - 0.5);
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

/* Calls op with one output; on failure prints why and returns NULL. */
static opr_tensor *call1(const opr_op *op, const opr_value *args, int nargs)
{
    opr_tensor *out = NULL;
    if (opr_call(op, args, nargs, &out, 1)) fprintf(stderr, "opreg demo: %s\n", opr_last_error());
    return out;
}

/* Forward pass to the mean negative log-likelihood. *logp_out keeps the log-probs. */
static opr_tensor *forward(const demo_ops *ops, const model *m, opr_tensor *x, opr_tensor *y, opr_tensor **logp_out)
{
    opr_tensor *h = opr_tensor_retain(x);
    for (int l = 0; l < LAYERS && h; l++) {
        opr_value la[3] = {opr_v_tensor(h), opr_v_tensor(m->w[l]), opr_v_tensor(m->b[l])};
        opr_tensor *z = call1(ops->linear, la, 3);
        opr_tensor_release(h);
        h = z;
        if (h && l < LAYERS - 1) {
            opr_value ra[1] = {opr_v_tensor(h)};
            z = call1(ops->relu, ra, 1);
            opr_tensor_release(h);
            h = z;
        }
    }
    opr_value lsa[2] = {opr_v_tensor(h), opr_v_int(1)};
    opr_tensor *logp = h ? call1(ops->log_softmax, lsa, 2) : NULL;
    opr_tensor_release(h);
    opr_value ga[3] = {opr_v_tensor(logp), opr_v_int(1), opr_v_tensor(y)};
    opr_tensor *picked = logp ? call1(ops->gather, ga, 3) : NULL;
    opr_value ma[1] = {opr_v_tensor(picked)};
    opr_tensor *mean = picked ? call1(ops->mean, ma, 1) : NULL;
    opr_tensor_release(picked);
    opr_value na[1] = {opr_v_tensor(mean)};
    opr_tensor *loss = mean ? call1(ops->neg, na, 1) : NULL;
    opr_tensor_release(mean);
    if (logp_out) *logp_out = logp;
    else opr_tensor_release(logp);
    return loss;
}

static double accuracy(const demo_ops *ops, opr_tensor *logp, opr_tensor *y)
{
    opr_tensor *pred[2] = {NULL, NULL};
    opr_value pa[3] = {opr_v_tensor(logp), opr_v_int(1), opr_v_bool(true)};
    if (opr_call(ops->max_dim, pa, 3, pred, 2)) return -1;
    opr_value ea[2] = {opr_v_tensor(pred[1]), opr_v_tensor(y)};
    opr_tensor *hit = call1(ops->eq, ea, 2);
    int64_t n = opr_tensor_numel(y), correct = 0;
    uint8_t *h = malloc((size_t)n);
    if (hit && h && !opr_tensor_copy_to_host(hit, h, (size_t)n))
        for (int64_t i = 0; i < n; i++) correct += h[i];
    free(h);
    opr_tensor_release(hit);
    opr_tensor_release(pred[0]);
    opr_tensor_release(pred[1]);
    return (double)correct / (double)n;
}

/* torch.optim.SGD's update (w -= lr * grad, no momentum) of every trainable tensor in
 * one _foreach_sgd_step (registry/ops/optim_foreach.yaml: sgd_step_ on each), with grad
 * mode off as in torch's step(); then their gradients are dropped. */
static int sgd_step(const demo_ops *ops, model *m, double lr)
{
    opr_tensor *ps[2 * LAYERS], *gs[2 * LAYERS], *out[2 * LAYERS];
    int n = 0;
    for (int l = 0; l < LAYERS; l++) {
        opr_tensor *t[2] = {m->w[l], m->b[l]};
        for (int k = 0; k < 2 && m->trainable[l]; k++)
            if (opr_grad(t[k])) { /* no gradient reached it: skipped, as PyTorch does */
                ps[n] = t[k];
                gs[n++] = opr_grad(t[k]);
            }
    }
    if (n == 0) return OPR_OK;
    opr_value sa[4] = {opr_v_tensors(ps, n), opr_v_tensors(gs, n), opr_v_tensors(NULL, 0), opr_v_double(lr)};
    bool prev = opr_grad_mode_set(false);
    int rc = opr_call(ops->sgd, sa, 4, out, n);
    opr_grad_mode_set(prev);
    if (rc) {
        fprintf(stderr, "opreg demo: %s\n", opr_last_error());
        return rc;
    }
    for (int i = 0; i < n; i++) {
        opr_tensor_release(out[i]); /* the parameters themselves */
        if (!rc) rc = opr_zero_grad(ps[i]);
    }
    return rc;
}

static opr_device best_device(opr_ctx *ctx, const demo_ops *ops)
{
    opr_device best = OPR_CPU;
    const opr_op *need[] = {ops->linear, ops->relu, ops->log_softmax, ops->gather, ops->mean, ops->neg, ops->sgd};
    for (int t = 1; t < opr_device_type_count(ctx); t++) {
        bool ok = true;
        for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) ok &= opr_op_has_kernel(need[i], t);
        if (ok) best = (opr_device){t, 0};
    }
    return best;
}

int cmd_demo(int argc, char **argv)
{
    const char *model_name = "mlp";
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--model")) model_name = argv[++i];
    if (cli_wants_help(argc, argv)) {
        printf("usage: opreg demo [--model mlp|gpt|resnet] [OPTIONS] [--plugin PATH]... [--yaml FILE]...\n\n"
               "--model mlp (the default): generates a three-spirals data set (N points per class,\n"
               "default 200) and trains an MLP 2 -> 64 -> 64 -> 3 whose middle layer is frozen, with\n"
               "full-batch SGD (default 600 steps, learning rate 0.5), on the best available backend.\n"
               "Prints the loss every 25 steps, the final training accuracy, and per op the\n"
               "derivative formulas the registry chose and the bytes they saved next to saving\n"
               "every input. Options:\n"
               "  --steps N         SGD steps (default 600)\n"
               "  --points N        points per class (default 200)\n"
               "  --lr X            learning rate (default 0.5)\n\n"
               "--model gpt: trains a character-level GPT (pre-LayerNorm transformer blocks, causal\n"
               "self-attention, GELU MLP) on Shakespeare's sonnets with AdamW on the CPU, printing the\n"
               "loss and tokens/s, then samples a few seeded lines (the code of examples/gpt.c).\n"
               "Options:\n");
        gpt_demo_options_help(stdout);
        printf("\n--model resnet: trains a ResNet of BasicBlocks (torchvision's layout: 7x7 stem, batch\n"
               "norm, max pool, four stages, average pool, linear head) on generated 32x32 images of\n"
               "four shapes with SGD on the CPU, printing the loss and images/s, what the first step\n"
               "saved per op, and the accuracy on held-out images (the code of examples/resnet.c).\n"
               "Options:\n");
        resnet_demo_options_help(stdout);
        return 0;
    }
    if (!strcmp(model_name, "gpt")) return cmd_demo_gpt(argc, argv);
    if (!strcmp(model_name, "resnet")) return cmd_demo_resnet(argc, argv);
    if (strcmp(model_name, "mlp")) {
        fprintf(stderr, "opreg demo: --model %s: mlp, gpt or resnet\n", model_name);
        return 2;
    }
    int per_class = 200, steps = 600;
    double lr = 0.5;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--points")) per_class = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--lr")) lr = atof(argv[++i]);
    }
    if (per_class < 1 || per_class > 100000 || steps < 1 || steps > 1000000 || !(lr > 0)) {
        fprintf(stderr, "opreg demo: --points 1..100000, --steps 1..1000000, --lr > 0\n");
        return 2;
    }
    opr_ctx *ctx = cli_ctx_new(argc, argv);
    if (!ctx) return 1;
    const char *names[] = {"linear", "relu", "log_softmax", "gather", "mean", "neg", "_foreach_sgd_step", "max.dim", "eq", "sum"};
    const opr_op *found[10];
    for (int i = 0; i < 10; i++)
        if (!(found[i] = opr_op_find(ctx, names[i]))) {
            fprintf(stderr, "opreg demo: %s\n", opr_last_error());
            opr_ctx_free(ctx);
            return 1;
        }
    demo_ops ops = {found[0], found[1], found[2], found[3], found[4], found[5], found[6], found[7], found[8], found[9]};
    opr_device dev = best_device(ctx, &ops);
    if (!opr_op_has_kernel(ops.linear, dev.type)) {
        fprintf(stderr, "opreg demo: no backend can run linear; is the CPU plugin installed? (try opreg info)\n");
        opr_ctx_free(ctx);
        return 1;
    }
    char devname[32];
    int n = N_CLASSES * per_class;
    printf("opreg demo: three spirals, %d points; MLP 2-%d-%d-3, middle layer frozen; %d SGD steps on %s\n", n,
           HIDDEN, HIDDEN, steps, opr_device_format(ctx, dev, devname, sizeof devname));

    int rc = 1;
    float *xs = malloc((size_t)n * 2 * sizeof *xs);
    int64_t *ys = malloc((size_t)n * sizeof *ys);
    model m = {.trainable = {true, false, true}};
    opr_tensor *x = NULL, *y = NULL;
    if (!xs || !ys) goto out;
    spirals(per_class, xs, ys);
    int64_t xshape[2] = {n, 2}, yshape[2] = {n, 1};
    x = opr_tensor_from_data(ctx, OPR_F32, 2, xshape, xs, dev);
    y = opr_tensor_from_data(ctx, OPR_I64, 2, yshape, ys, dev);
    const int64_t dims[LAYERS + 1] = {2, HIDDEN, HIDDEN, N_CLASSES};
    for (int l = 0; l < LAYERS; l++) {
        int64_t ws[2] = {dims[l + 1], dims[l]}, bs[1] = {dims[l + 1]};
        m.w[l] = random_tensor(ctx, 2, ws, sqrt(6.0 / (double)dims[l]), dev);
        m.b[l] = random_tensor(ctx, 1, bs, 0.1, dev);
        if (!x || !y || !m.w[l] || !m.b[l]) { fprintf(stderr, "opreg demo: %s\n", opr_last_error()); goto out; }
        opr_set_requires_grad(m.w[l], m.trainable[l]);
        opr_set_requires_grad(m.b[l], m.trainable[l]);
    }
    saved_table table = {.n = 0};
    for (int step = 1; step <= steps; step++) {
        opr_tensor *logp = NULL;
        opr_tensor *loss = forward(&ops, &m, x, y, step % 25 == 0 || step == 1 ? &logp : NULL);
        if (!loss) goto out;
        if (step == 1) opr_autograd_walk(loss, saved_table_collect, &table);
        if (opr_backward(loss, NULL, NULL)) { fprintf(stderr, "opreg demo: %s\n", opr_last_error()); opr_tensor_release(loss); goto out; }
        if (sgd_step(&ops, &m, lr)) { opr_tensor_release(loss); goto out; }
        if (logp) {
            float lv = 0;
            opr_tensor_copy_to_host(loss, &lv, sizeof lv);
            printf("  step %4d/%d  loss %.4f  accuracy %5.1f%%\n", step, steps, lv, 100 * accuracy(&ops, logp, y));
            fflush(stdout);
        }
        opr_tensor_release(logp);
        opr_tensor_release(loss);
    }
    bool prev = opr_grad_mode_set(false);
    opr_tensor *logp = NULL, *loss = forward(&ops, &m, x, y, &logp);
    opr_grad_mode_set(prev);
    float lv = 0;
    if (loss) opr_tensor_copy_to_host(loss, &lv, sizeof lv);
    double acc = logp ? accuracy(&ops, logp, y) : 0;
    printf("final: loss %.4f, training accuracy %.1f%%\n", lv, 100 * acc);
    opr_tensor_release(logp);
    opr_tensor_release(loss);
    saved_table_print(&table, "per op, one training step (the registry's choice vs saving every input):");
    rc = acc > 0.9 ? 0 : 1;
    if (rc) fprintf(stderr, "opreg demo: accuracy stayed at or below 90%%\n");
out:
    for (int l = 0; l < LAYERS; l++) { opr_tensor_release(m.w[l]); opr_tensor_release(m.b[l]); }
    opr_tensor_release(x);
    opr_tensor_release(y);
    free(xs);
    free(ys);
    opr_ctx_free(ctx);
    return rc;
}
