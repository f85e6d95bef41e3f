/* Data-parallel training (opr_ddp_*) under mpirun (tests/dist/dist_check.sh):
 *
 *   test_ddp SIZE    a two-layer MLP trained 20 SGD steps, each rank on its share of
 *                    the batch through opr_ddp_backward, against the same steps in
 *                    this process on the whole batch: losses within 1e-5 (f32) and
 *                    1e-12 (f64), parameters within 1e-5 / 1e-12; with one bucket
 *                    per parameter, the first bucket's reduction starts before the
 *                    backward is over (the overlap), every bucket is waited for
 *                    with a parameter only rank 0's loss reaches and one no loss
 *                    reaches (5 steps, f64): every rank's parameters equal one
 *                    process's that averages every rank's gradients (zeros for the
 *                    unused one), as PyTorch's DDP with find_unused_parameters
 *   ... --torch F    also those parameters against PyTorch DDP's in file F
 *                    (tests/dist/ddp_unused_torch.py), within 1e-12
 *   ... --device D   the data-parallel run's parameters and batch on device D (cuda:
 *                    device buckets reduced by the all_reduce op there, NCCL); the
 *                    reference stays on the CPU
 *
 * Each rank prints "rank R/N: all K checks passed" or the failures. */
#include "dist_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 12 /* divisible by 2 and 3 ranks */
#define IN 4
#define HID 8
#define OUT 3
#define STEPS 20
#define NPARAMS 4

static opr_device dev = OPR_CPU; /* of the data-parallel run (--device) */


static opr_tensor *call(const char *op, opr_value *a, int n)
{
    opr_tensor *out = NULL;
    if (opr_call(opr_op_find(ctx, op), a, n, &out, 1)) {
        printf("rank %d/%d: FAIL %s: %s\n", world.rank, world.size, op, opr_last_error());
        failures++;
    }
    return out;
}

static opr_tensor *bin(const char *op, opr_tensor *a, opr_tensor *b)
{
    return call(op, (opr_value[]){opr_v_tensor(a), opr_v_tensor(b)}, 2);
}

/* Rows [first, first + rows) of the batch: inputs and targets, in dt. */
static opr_tensor *rows_of(bool target, int first, int rows, opr_dtype dt)
{
    const int w = target ? OUT : IN;
    double v[BATCH * IN];
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < w; c++)
            v[r * w + c] = target ? cos(0.7 * (first + r) + 1.3 * c) : sin(0.9 * (first + r) - 0.4 * c + 0.2);
    opr_tensor *d = opr_tensor_from_data(ctx, OPR_F64, 2, (int64_t[]){rows, w}, v, OPR_CPU);
    if (dt == OPR_F64) return d;
    opr_tensor *f = call("to", (opr_value[]){opr_v_tensor(d), opr_v_string("f32")}, 2);
    opr_tensor_release(d);
    return f;
}

static const int64_t shapes[NPARAMS][2] = {{IN, HID}, {HID, 1}, {HID, OUT}, {OUT, 1}};

/* The same initial parameters everywhere except on rank 0 in the data-parallel run
 * (offset): the helper's broadcast from rank 0 must fix the others'. */
static void make_params(opr_tensor **p, opr_dtype dt, double offset)
{
    for (int k = 0; k < NPARAMS; k++) {
        int ndim = shapes[k][1] == 1 ? 1 : 2;
        int64_t n = shapes[k][0] * shapes[k][1];
        double v[IN * HID + HID * OUT];
        for (int64_t i = 0; i < n; i++) v[i] = 0.5 * sin(1.0 + 3.1 * k + 0.77 * (double)i) + offset;
        opr_tensor *d = opr_tensor_from_data(ctx, OPR_F64, ndim, shapes[k], v, OPR_CPU);
        p[k] = dt == OPR_F64 ? d : call("to", (opr_value[]){opr_v_tensor(d), opr_v_string("f32")}, 2);
        if (dt != OPR_F64) opr_tensor_release(d);
        opr_set_requires_grad(p[k], true);
    }
}

/* mean((tanh(x W1 + b1) W2 + b2 - y)^2) */
static opr_tensor *loss_of(opr_tensor *const *p, opr_tensor *x, opr_tensor *y)
{
    opr_tensor *a = bin("mm", x, p[0]), *h0 = bin("add", a, p[1]);
    opr_tensor *h = call("tanh", (opr_value[]){opr_v_tensor(h0)}, 1);
    opr_tensor *o0 = bin("mm", h, p[2]), *o = bin("add", o0, p[3]), *d = bin("sub", o, y), *d2 = bin("mul", d, d);
    opr_tensor *l = call("mean", (opr_value[]){opr_v_tensor(d2)}, 1);
    opr_tensor *tmp[] = {a, h0, h, o0, o, d, d2};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) opr_tensor_release(tmp[i]);
    return l;
}

static double scalar(opr_tensor *t)
{
    double v = NAN;
    opr_tensor_copy_to_host_f64(t, &v, 1);
    return v;
}

/* p -= lr * grad, then the gradients zeroed. */
static void sgd(opr_tensor **p, opr_dtype dt)
{
    for (int k = 0; k < NPARAMS; k++) {
        int64_t n = opr_tensor_numel(p[k]);
        double v[IN * HID + HID * OUT], g[IN * HID + HID * OUT];
        opr_tensor_copy_to_host_f64(p[k], v, n);
        opr_tensor_copy_to_host_f64(opr_grad(p[k]), g, n);
        for (int64_t i = 0; i < n; i++) v[i] -= 0.1 * g[i];
        if (dt == OPR_F64) opr_tensor_copy_from_host(p[k], v, (size_t)n * sizeof *v);
        else {
            float f[IN * HID + HID * OUT];
            for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
            opr_tensor_copy_from_host(p[k], f, (size_t)n * sizeof *f);
        }
        opr_zero_grad(p[k]);
    }
}

/* t moved to dev (consumed); a parameter again when grad. */
static opr_tensor *on_dev(opr_tensor *t, bool grad)
{
    if (dev.type == OPR_CPU.type) return t;
    opr_tensor *m = opr_tensor_to(t, dev);
    CHECK(m != NULL, "to %d: %s", dev.type, opr_last_error());
    opr_tensor_release(t);
    if (m && grad) opr_set_requires_grad(m, true);
    return m;
}

static void train(opr_dtype dt, double bucket_mib)
{
    const double tol = dt == OPR_F64 ? 1e-12 : 1e-5;
    const char *dn = dt == OPR_F64 ? "f64" : "f32";
    opr_tensor *ref[NPARAMS], *par[NPARAMS];
    make_params(ref, dt, 0);
    make_params(par, dt, world.rank ? 0.25 : 0); /* fixed by the broadcast */
    for (int k = 0; k < NPARAMS; k++) par[k] = on_dev(par[k], true);
    opr_ddp *ddp = NULL;
    opr_ddp_opts o = {.struct_size = sizeof o, .bucket_mib = bucket_mib};
    int rc = opr_ddp_new(ctx, &world, par, NPARAMS, &o, &ddp);
    CHECK(rc == OPR_OK, "opr_ddp_new: %s", opr_last_error());
    if (rc) return;
    const int share = BATCH / world.size;
    opr_tensor *xall = rows_of(false, 0, BATCH, dt), *yall = rows_of(true, 0, BATCH, dt);
    opr_tensor *x = on_dev(rows_of(false, world.rank * share, share, dt), false);
    opr_tensor *y = on_dev(rows_of(true, world.rank * share, share, dt), false);
    double worst_loss = 0;
    for (int step = 0; step < STEPS; step++) {
        opr_tensor *lr = loss_of(ref, xall, yall); /* one process, the whole batch */
        opr_backward(lr, NULL, NULL);
        double want = scalar(lr);
        opr_tensor *l = loss_of(par, x, y); /* this rank's share */
        rc = opr_ddp_backward(ddp, l, NULL);
        CHECK(rc == OPR_OK, "opr_ddp_backward: %s", opr_last_error());
        opr_tensor *lmean = call("all_reduce", (opr_value[]){opr_v_tensor(l), opr_v_string("mean"), opr_v_int(0)}, 3);
        double got = scalar(lmean);
        worst_loss = fmax(worst_loss, fabs(got - want) / fmax(1, fabs(want)));
        if (step == 0 && bucket_mib > 0 && bucket_mib < 1e-3) { /* one bucket per parameter */
            int n;
            const opr_ddp_event *ev = opr_ddp_events(ddp, &n);
            int first_start = -1, done = -1, waited = 0;
            for (int i = 0; i < n; i++) {
                if (ev[i].kind == OPR_DDP_BUCKET_STARTED && first_start < 0) first_start = i;
                if (ev[i].kind == OPR_DDP_BACKWARD_DONE) done = i;
                if (ev[i].kind == OPR_DDP_BUCKET_DONE) waited++;
            }
            CHECK(opr_ddp_bucket_count(ddp) == NPARAMS, "%d buckets, want one per parameter", opr_ddp_bucket_count(ddp));
            CHECK(first_start >= 0 && first_start < done, "the first reduction started at event %d, the backward "
                  "ended at %d: no overlap", first_start, done);
            CHECK(waited == NPARAMS, "%d buckets waited for", waited);
            /* the last layer's gradients are ready first: its bucket is the first to start */
            int first = first_start >= 0 ? ev[first_start].index : -1;
            CHECK(first >= 0 && (first == opr_ddp_bucket_of(ddp, 3) || first == opr_ddp_bucket_of(ddp, 2)),
                  "the first bucket started is %d, not the last layer's", first);
        }
        if (step == 0 && bucket_mib == 0) CHECK(opr_ddp_bucket_count(ddp) == 1, "%d buckets at 25 MiB", opr_ddp_bucket_count(ddp));
        sgd(ref, dt);
        sgd(par, dt);
        opr_tensor_release(lmean);
        opr_tensor_release(l);
        opr_tensor_release(lr);
    }
    CHECK(worst_loss <= tol, "%s: losses differ from one process on the whole batch by %g", dn, worst_loss);
    double worst = 0;
    for (int k = 0; k < NPARAMS; k++) {
        int64_t n = opr_tensor_numel(par[k]);
        double a[IN * HID + HID * OUT], b[IN * HID + HID * OUT];
        opr_tensor_copy_to_host_f64(par[k], a, n);
        opr_tensor_copy_to_host_f64(ref[k], b, n);
        for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b[i]));
    }
    CHECK(worst <= tol, "%s: parameters after %d steps differ by %g", dn, STEPS, worst);
    opr_ddp_free(ddp);
    opr_tensor *all[] = {xall, yall, x, y};
    for (int i = 0; i < 4; i++) opr_tensor_release(all[i]);
    for (int k = 0; k < NPARAMS; k++) { opr_tensor_release(ref[k]); opr_tensor_release(par[k]); }
}

/* p -= lr * grad over n parameters (any size up to the MLP's), gradients zeroed. */
static void sgd_n(opr_tensor **p, int n, double lr)
{
    for (int k = 0; k < n; k++) {
        int64_t m = opr_tensor_numel(p[k]);
        double v[IN * HID + HID * OUT], g[IN * HID + HID * OUT] = {0};
        opr_tensor_copy_to_host_f64(p[k], v, m);
        if (opr_grad(p[k])) opr_tensor_copy_to_host_f64(opr_grad(p[k]), g, m);
        for (int64_t i = 0; i < m; i++) v[i] -= lr * g[i];
        opr_tensor_copy_from_host(p[k], v, (size_t)m * sizeof *v);
        opr_zero_grad(p[k]);
    }
}

/* With --torch FILE: PyTorch DDP's parameters after train_unused's steps
 * (tests/dist/ddp_unused_torch.py), one line per parameter. */
static double torch_ref[NPARAMS + 2][IN * HID + HID * OUT];
static bool have_torch_ref;

static bool read_torch_ref(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return false;
    static const int64_t counts[NPARAMS + 2] = {IN * HID, HID, HID * OUT, OUT, OUT, 2};
    bool ok = true;
    for (int k = 0; k < NPARAMS + 2 && ok; k++)
        for (int64_t i = 0; i < counts[k] && ok; i++) ok = fscanf(f, "%lf", &torch_ref[k][i]) == 1;
    fclose(f);
    return ok;
}

/* A parameter q only rank 0's loss reaches (+ sum(q * q)) and one, z, no loss reaches:
 * every rank must get q's mean gradient (rank 0's over the size) and zeros for z, so that
 * the replicas stay identical, as PyTorch's DDP with find_unused_parameters. The
 * reference: one process summing every rank's loss's gradients, divided by the size.
 * f64, 5 steps, with a bucket per parameter (q's bucket fills after the backward on the
 * ranks other than 0: the buckets must still reduce in the same order everywhere) and
 * with one bucket. */
static void train_unused(double bucket_mib)
{
    enum { NU = NPARAMS + 2 };
    opr_tensor *ref[NU], *par[NU];
    make_params(ref, OPR_F64, 0);
    make_params(par, OPR_F64, world.rank ? 0.25 : 0);
    const double qv[OUT] = {0.3, -0.2, 0.1}, zv[2] = {1, 2};
    ref[NPARAMS] = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){OUT}, qv, OPR_CPU);
    par[NPARAMS] = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){OUT}, qv, OPR_CPU);
    ref[NPARAMS + 1] = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){2}, zv, OPR_CPU);
    par[NPARAMS + 1] = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){2}, zv, OPR_CPU);
    for (int k = NPARAMS; k < NU; k++) {
        opr_set_requires_grad(ref[k], true);
        opr_set_requires_grad(par[k], true);
    }
    opr_ddp *ddp = NULL;
    opr_ddp_opts o = {.struct_size = sizeof o, .bucket_mib = bucket_mib};
    int rc = opr_ddp_new(ctx, &world, par, NU, &o, &ddp);
    CHECK(rc == OPR_OK, "opr_ddp_new (unused): %s", opr_last_error());
    if (rc) return;
    const int share = BATCH / world.size;
    for (int step = 0; step < 5; step++) {
        for (int r = 0; r < world.size; r++) { /* the reference: every rank's share in turn */
            opr_tensor *x = rows_of(false, r * share, share, OPR_F64), *y = rows_of(true, r * share, share, OPR_F64);
            opr_tensor *l = loss_of(ref, x, y), *q2 = NULL, *sq = NULL, *t = NULL;
            if (r == 0) {
                q2 = bin("mul", ref[NPARAMS], ref[NPARAMS]);
                sq = call("sum", (opr_value[]){opr_v_tensor(q2)}, 1);
                t = bin("add", l, sq);
            }
            opr_backward(t ? t : l, NULL, NULL);
            opr_tensor *tmp[] = {x, y, l, q2, sq, t};
            for (int i = 0; i < 6; i++) opr_tensor_release(tmp[i]);
        }
        sgd_n(ref, NU, 0.1 / world.size);
        opr_tensor *x = rows_of(false, world.rank * share, share, OPR_F64);
        opr_tensor *y = rows_of(true, world.rank * share, share, OPR_F64);
        opr_tensor *l = loss_of(par, x, y), *q2 = NULL, *sq = NULL, *t = NULL;
        if (world.rank == 0) {
            q2 = bin("mul", par[NPARAMS], par[NPARAMS]);
            sq = call("sum", (opr_value[]){opr_v_tensor(q2)}, 1);
            t = bin("add", l, sq);
        }
        rc = opr_ddp_backward(ddp, t ? t : l, NULL);
        CHECK(rc == OPR_OK, "opr_ddp_backward (unused, step %d): %s", step, opr_last_error());
        double zg[2] = {NAN, NAN};
        CHECK(!rc && opr_grad(par[NPARAMS + 1]) && !opr_tensor_copy_to_host_f64(opr_grad(par[NPARAMS + 1]), zg, 2) &&
                  zg[0] == 0 && zg[1] == 0, "the parameter no rank used has gradient %g %g, want zeros", zg[0], zg[1]);
        CHECK(!rc && opr_grad(par[NPARAMS]), "the parameter rank 0 alone used has no gradient on rank %d", world.rank);
        sgd_n(par, NU, 0.1);
        opr_tensor *tmp[] = {x, y, l, q2, sq, t};
        for (int i = 0; i < 6; i++) opr_tensor_release(tmp[i]);
    }
    double worst = 0;
    for (int k = 0; k < NU; k++) {
        int64_t n = opr_tensor_numel(par[k]);
        double a[IN * HID + HID * OUT], b[IN * HID + HID * OUT];
        opr_tensor_copy_to_host_f64(par[k], a, n);
        opr_tensor_copy_to_host_f64(ref[k], b, n);
        for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b[i]));
    }
    CHECK(worst <= 1e-12, "with unused parameters (bucket_mib %g), the parameters after 5 steps differ from one "
          "process's by %g on rank %d", bucket_mib, worst, world.rank);
    if (have_torch_ref) {
        double off = 0;
        for (int k = 0; k < NU; k++) {
            int64_t n = opr_tensor_numel(par[k]);
            double a[IN * HID + HID * OUT];
            opr_tensor_copy_to_host_f64(par[k], a, n);
            for (int64_t i = 0; i < n; i++) off = fmax(off, fabs(a[i] - torch_ref[k][i]));
        }
        CHECK(off <= 1e-12, "with unused parameters (bucket_mib %g), the parameters after 5 steps differ from "
              "PyTorch DDP's (find_unused_parameters) by %g on rank %d", bucket_mib, off, world.rank);
        printf("rank %d/%d: bucket_mib %g: the parameters are PyTorch DDP's within %.1e\n", world.rank, world.size,
               bucket_mib, off);
    }
    opr_ddp_free(ddp);
    for (int k = 0; k < NU; k++) { opr_tensor_release(ref[k]); opr_tensor_release(par[k]); }
}

/* opr_ddp_new refuses bad arguments with a message, before any collective (every rank
 * refuses alike). */
static void bad_arguments(void)
{
    opr_tensor *p[NPARAMS];
    make_params(p, OPR_F64, 0);
    opr_ddp *ddp = NULL;
    static const struct { const char *needle; int case_; } cases[] = {
        {"no parameters (0)", 0}, {"parameter 1 is NULL", 1}, {"bucket_mib -1 is negative", 2},
        {"parameter 2 is parameter 0 again", 3}, {"must be an f32 or f64 tensor that requires grad", 4},
        {"parameter 1 is not on parameter 0's device", 5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].case_ == 5 && dev.type == OPR_CPU.type) continue;
        opr_tensor *q[NPARAMS] = {p[0], p[1], p[2], p[3]};
        opr_ddp_opts o = {.struct_size = sizeof o};
        int n = NPARAMS;
        opr_tensor *frozen = NULL;
        switch (cases[i].case_) {
        case 0: n = 0; break;
        case 1: q[1] = NULL; break;
        case 2: o.bucket_mib = -1; break;
        case 3: q[2] = p[0]; break;
        case 4: frozen = opr_tensor_new(ctx, OPR_F64, 1, (int64_t[]){3}, OPR_CPU); q[3] = frozen; break;
        case 5: frozen = on_dev(opr_tensor_retain(p[0]), true); q[0] = frozen; break;
        }
        int rc = opr_ddp_new(ctx, &world, q, n, &o, &ddp);
        CHECK(rc == OPR_ERR_INVALID && !ddp && strstr(opr_last_error(), cases[i].needle),
              "opr_ddp_new, case %d: rc %d, %s", cases[i].case_, rc, opr_last_error());
        opr_tensor_release(frozen);
    }
    for (int k = 0; k < NPARAMS; k++) opr_tensor_release(p[k]);
}

int main(int argc, char **argv)
{
    int want = argc > 1 ? atoi(argv[1]) : 0;
    const char *device = argc > 3 && !strcmp(argv[2], "--device") ? argv[3] : NULL;
    const char *torch_file = argc > 3 && !strcmp(argv[2], "--torch") ? argv[3] : NULL;
    if (dist_test_start(device, &dev)) return 1;
    CHECK(want == 0 || world.size == want, "the world has %d ranks, want %d", world.size, want);
    if (torch_file) {
        have_torch_ref = read_torch_ref(torch_file);
        CHECK(have_torch_ref, "cannot read PyTorch's parameters from %s", torch_file);
    }
    bad_arguments();
    train(OPR_F64, 1e-6); /* a bucket per parameter */
    train(OPR_F64, 0);    /* the default: one bucket */
    train(OPR_F32, 0);
    if (dev.type == OPR_CPU.type) {
        train_unused(1e-6);
        train_unused(0);
    }
    int status = report();
    opr_ctx_free(ctx); /* the last context finalises MPI */
    return status;
}
