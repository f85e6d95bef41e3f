/* The collectives PyTorch users port from, under mpirun (tests/dist/dist_check.sh):
 *
 *   test_dist_ports SIZE    on every rank, against a single-process reference (each
 *                           rank can make every rank's input), in f32, f64, i64, i32
 *                           and bool: all_reduce and reduce_to with every reduction that
 *                           makes sense for the dtype (prod, band, bor, bxor too);
 *                           all_gather and broadcast_from in i64, i32 and bool; gather_to,
 *                           scatter_from (dst / src: world ranks, also on a sub-group,
 *                           where they differ from the group's), all_to_all_single
 *                           with uneven splits, send / recv around a ring with tags;
 *                           opr_dist_barrier; the gradients of the new ones across
 *                           ranks against finite differences (f64); bad arguments
 *                           failing every rank alike
 *   test_dist_ports SIZE --torch F
 *                           also every world-group result of f32, f64, i64 and i32 against
 *                           torch.distributed's (gloo) in file F
 *                           (tests/dist/ports_torch.py; gloo has no bool)
 *   ... --device D          the same on device D's tensors (cuda: the NCCL kernels),
 *                           the CPU fallback off but for the reductions NCCL lacks
 *
 * Each rank prints "rank R/N: all K checks passed" or the failures. */
#include "dist_test.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 6 /* divisible by 2 and 3 members */
#define COLS 2
#define N (ROWS * COLS)

static opr_device dev = OPR_CPU;
static const opr_dtype dtypes[] = {OPR_F32, OPR_F64, OPR_I64, OPR_I32, OPR_BOOL};

static bool is_float(opr_dtype dt) { return dt == OPR_F32 || dt == OPR_F64; }
static bool is_int(opr_dtype dt) { return dt == OPR_I64 || dt == OPR_I32; }

/* Rank r's element i in dtype dt: floats distinct everywhere (no ties for max); i64
 * and i32 small, of both signs, with set and clear bits; bool a mix that differs by
 * rank. */
static double input(int r, int i, opr_dtype dt)
{
    if (is_int(dt)) return (double)((r * 7 + i * 3) % 11 - 4);
    if (dt == OPR_BOOL) return (double)((r + i) % 3 == 0 || i % 5 == 0);
    return sin(1.0 + 7.3 * r + 0.37 * i) + 0.01 * r + 1.5; /* away from 0: prod's gradient divides */
}

static opr_tensor *on_dev(opr_tensor *t) { return dist_test_to(t, dev); }

/* n values as a tensor of dtype dt and shape [n / COLS, COLS] (or [n] when ndim 1). */
static opr_tensor *make(const double *v, int64_t n, opr_dtype dt)
{
    int64_t shape[2] = {n / COLS, COLS};
    if (is_int(dt) || dt == OPR_BOOL) {
        int64_t *iv = calloc((size_t)n + 1, sizeof *iv);
        int32_t *i32 = calloc((size_t)n + 1, sizeof *i32);
        uint8_t *bv = calloc((size_t)n + 1, 1);
        for (int64_t i = 0; i < n; i++) { iv[i] = (int64_t)v[i]; i32[i] = (int32_t)v[i]; bv[i] = v[i] != 0; }
        opr_tensor *t = opr_tensor_from_data(ctx, dt, 2, shape,
                                             dt == OPR_I64 ? (void *)iv : dt == OPR_I32 ? (void *)i32 : (void *)bv, OPR_CPU);
        free(iv);
        free(i32);
        free(bv);
        return on_dev(t);
    }
    opr_tensor *d = on_dev(opr_tensor_from_data(ctx, OPR_F64, 2, shape, v, OPR_CPU));
    if (dt == OPR_F64) return d;
    opr_value a[2] = {opr_v_tensor(d), opr_v_string("f32")};
    opr_tensor *f = NULL;
    opr_call(opr_op_find(ctx, "to"), a, 2, &f, 1);
    opr_tensor_release(d);
    return f;
}

/* Rank r's [ROWS, COLS] input, with perturb added at element `at`. */
static opr_tensor *make_input(int r, opr_dtype dt, int at, double perturb)
{
    double v[N];
    for (int i = 0; i < N; i++) v[i] = input(r, i, dt) + (i == at ? perturb : 0);
    return make(v, N, dt);
}

static int call(const char *op, const opr_value *a, int n, opr_tensor **y)
{
    *y = NULL;
    return opr_call(opr_op_find(ctx, op), a, n, y, 1);
}

/* t's values (any dtype) as doubles, *n of them; malloc'd. */
static double *values(opr_tensor *t, int64_t *n)
{
    *n = opr_tensor_numel(t);
    double *v = calloc((size_t)*n + 1, sizeof *v);
    opr_tensor_copy_to_host_f64(t, v, *n);
    return v;
}

#include "ports_torch_ref.h" /* after values(): it reads results with it */

/* Checks y against want (n values); what names the case. */
static void expect(opr_tensor *y, const double *want, int64_t n, opr_dtype dt, const char *what)
{
    int64_t got_n;
    double *got = values(y, &got_n), worst = 0;
    CHECK(got_n == n, "%s: %lld elements, want %lld", what, (long long)got_n, (long long)n);
    CHECK(opr_tensor_dtype(y) == dt, "%s: dtype %s", what, opr_dtype_name(opr_tensor_dtype(y)));
    for (int64_t i = 0; i < n && got_n == n; i++) worst = fmax(worst, fabs(got[i] - want[i]) / (1 + fabs(want[i])));
    CHECK(worst <= (dt == OPR_F32 ? 1e-5 : 1e-12), "%s: max relative error %g", what, worst);
    free(got);
}

static const char *const all_ops[] = {"sum", "mean", "prod", "max", "min", "band", "bor", "bxor"};

/* Whether reduction op applies to dt (the schema's checks). */
static bool op_fits(const char *op, opr_dtype dt)
{
    if (!strcmp(op, "mean")) return is_float(dt);
    if (op[0] == 'b') return !is_float(dt);
    return true;
}

/* Whether NCCL lacks op on dt (bitwise on i64 and i32, bxor on bool; PyTorch's NCCL
 * backend refuses them too): on the device the kernel refuses it, and with the CPU
 * fallback on it runs on MPI, on host copies. */
static bool nccl_lacks(const char *op, opr_dtype dt)
{
    return dev.type != OPR_CPU.type && ((is_int(dt) && op[0] == 'b') || (dt == OPR_BOOL && !strcmp(op, "bxor")));
}

/* Runs op; where NCCL lacks the reduction, checks the refusal first, then runs it with
 * the CPU fallback on. */
static int call_reduction(const char *name, const char *op, opr_dtype dt, const opr_value *a, int n, opr_tensor **y)
{
    if (!nccl_lacks(op, dt)) return call(name, a, n, y);
    int rc = call(name, a, n, y);
    CHECK(rc == OPR_ERR_UNSUPPORTED && strstr(opr_last_error(), "NCCL has no"), "%s %s %s on the device: %d %s", name,
          op, opr_dtype_name(dt), rc, opr_last_error());
    opr_cpu_fallback_set(ctx, true);
    rc = call(name, a, n, y);
    opr_cpu_fallback_set(ctx, false);
    return rc;
}

/* The reduction of element i over the members (world ranks) as a single process
 * computes it. */
static double reduce_ref(const char *op, opr_dtype dt, const int *members, int size, int i)
{
    double acc = input(members[0], i, dt);
    int64_t iacc = (int64_t)acc;
    for (int s = 1; s < size; s++) {
        double v = input(members[s], i, dt);
        int64_t iv = (int64_t)v;
        if (!strcmp(op, "sum") || !strcmp(op, "mean")) acc += v;
        else if (!strcmp(op, "prod")) acc *= v;
        else if (!strcmp(op, "max")) acc = fmax(acc, v);
        else if (!strcmp(op, "min")) acc = fmin(acc, v);
        iacc = !strcmp(op, "band") ? (iacc & iv) : !strcmp(op, "bor") ? (iacc | iv) : (iacc ^ iv);
        if (op[0] == 'b') acc = (double)iacc;
    }
    if (!strcmp(op, "mean")) acc /= size;
    if (dt == OPR_BOOL) acc = acc != 0; /* sum: any; prod: all */
    return acc;
}

/* all_reduce and reduce_to with every reduction and dtype; all_gather and
 * broadcast_from in every dtype. */
static void check_reductions(const opr_group *g, const int *members)
{
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        const opr_dtype dt = dtypes[d];
        opr_tensor *x = make_input(members[g->rank], dt, -1, 0), *y;
        for (size_t k = 0; k < sizeof all_ops / sizeof all_ops[0]; k++) {
            const char *op = all_ops[k];
            if (!op_fits(op, dt)) continue;
            double want[N];
            for (int i = 0; i < N; i++) want[i] = reduce_ref(op, dt, members, g->size, i);
            char what[96];
            snprintf(what, sizeof what, "all_reduce %s %s group %lld", op, opr_dtype_name(dt), (long long)g->id);
            opr_value a[3] = {opr_v_tensor(x), opr_v_string(op), opr_v_int(g->id)};
            int rc = call_reduction("all_reduce", op, dt, a, 3, &y);
            CHECK(rc == OPR_OK, "%s: %s", what, opr_last_error());
            if (!rc) expect(y, want, N, dt, what);
            snprintf(what, sizeof what, "all_reduce:%s:%s", op, opr_dtype_name(dt));
            if (!rc && g->id == 0) torch_compare(what, y, dt);
            opr_tensor_release(y);
            if (!strcmp(op, "mean")) continue;
            const int root = g->size - 1; /* a group rank: not rank 0 alone */
            for (int i = 0; i < N; i++) want[i] = g->rank == root ? want[i] : 0;
            snprintf(what, sizeof what, "reduce_to %s %s group %lld", op, opr_dtype_name(dt), (long long)g->id);
            opr_value r[4] = {opr_v_tensor(x), opr_v_int(root), opr_v_string(op), opr_v_int(g->id)};
            rc = call_reduction("reduce_to", op, dt, r, 4, &y);
            CHECK(rc == OPR_OK, "%s: %s", what, opr_last_error());
            if (!rc) expect(y, want, N, dt, what);
            snprintf(what, sizeof what, "reduce_to:%s:%s", op, opr_dtype_name(dt));
            if (!rc && g->id == 0 && g->rank == root) torch_compare(what, y, dt);
            opr_tensor_release(y);
        }
        double want[3 * N];
        char key[64];
        for (int s = 0; s < g->size; s++)
            for (int i = 0; i < N; i++) want[s * N + i] = input(members[s], i, dt);
        opr_value a[2] = {opr_v_tensor(x), opr_v_int(g->id)};
        int rc = call("all_gather", a, 2, &y);
        CHECK(rc == OPR_OK, "all_gather %s: %s", opr_dtype_name(dt), opr_last_error());
        if (!rc) expect(y, want, (int64_t)g->size * N, dt, "all_gather");
        snprintf(key, sizeof key, "all_gather:%s", opr_dtype_name(dt));
        if (!rc && g->id == 0) torch_compare(key, y, dt);
        opr_tensor_release(y);
        opr_value b[3] = {opr_v_tensor(x), opr_v_int(g->size - 1), opr_v_int(g->id)};
        rc = call("broadcast_from", b, 3, &y);
        CHECK(rc == OPR_OK, "broadcast_from %s: %s", opr_dtype_name(dt), opr_last_error());
        if (!rc) expect(y, want + (g->size - 1) * N, N, dt, "broadcast_from");
        snprintf(key, sizeof key, "broadcast_from:%s", opr_dtype_name(dt));
        if (!rc && g->id == 0) torch_compare(key, y, dt);
        opr_tensor_release(y);
        opr_tensor_release(x);
    }
}

/* Rank r's all_to_all rows for rank s: 1 + (r + 2 s) % 3, so that every pair differs. */
static int64_t a2a_rows(int r, int s) { return 1 + (r + 2 * s) % 3; }

/* Rank r's all_to_all input: its rows for each member in turn, row j of the part for s
 * holding 100 r + 10 s + j (and that plus 0.5 in the second column). */
static void a2a_input(int r, int size, opr_dtype dt, double *v, int64_t *rows)
{
    int64_t n = 0;
    for (int s = 0; s < size; s++)
        for (int64_t j = 0; j < a2a_rows(r, s); j++, n++) {
            double base = dt == OPR_BOOL ? (double)((r + s + j) % 2) : 100.0 * r + 10 * s + (double)j;
            v[n * COLS] = base;
            v[n * COLS + 1] = dt == OPR_BOOL ? 1 - base : base + (is_int(dt) ? 1 : 0.5);
        }
    *rows = n;
}

/* gather_to, scatter_from (world ranks: the group's last member, as the world numbers
 * it) and all_to_all_single in every dtype. */
static void check_rooted(const opr_group *g, const int *members)
{
    const int last = members[g->size - 1]; /* a world rank */
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        const opr_dtype dt = dtypes[d];
        char what[96];
        double want[3 * N * 3];
        opr_tensor *x = make_input(members[g->rank], dt, -1, 0), *y;
        for (int s = 0; s < g->size; s++)
            for (int i = 0; i < N; i++) want[s * N + i] = world.rank == last ? input(members[s], i, dt) : 0;
        snprintf(what, sizeof what, "gather_to %s group %lld", opr_dtype_name(dt), (long long)g->id);
        opr_value a[3] = {opr_v_tensor(x), opr_v_int(last), opr_v_int(g->id)};
        int rc = call("gather_to", a, 3, &y);
        CHECK(rc == OPR_OK, "%s: %s", what, opr_last_error());
        if (!rc) expect(y, want, (int64_t)g->size * N, dt, what);
        snprintf(what, sizeof what, "gather_to:%s", opr_dtype_name(dt));
        if (!rc && g->id == 0 && world.rank == last) torch_compare(what, y, dt);
        opr_tensor_release(y);
        opr_tensor_release(x);

        /* scatter: src's [size * ROWS, COLS], made of the members' inputs in turn */
        double full[3 * N];
        for (int s = 0; s < g->size; s++)
            for (int i = 0; i < N; i++) full[s * N + i] = input(world.rank == last ? members[s] : 99, i, dt);
        x = make(full, (int64_t)g->size * N, dt);
        for (int i = 0; i < N; i++) want[i] = input(members[g->rank], i, dt);
        snprintf(what, sizeof what, "scatter_from %s group %lld", opr_dtype_name(dt), (long long)g->id);
        opr_value b[3] = {opr_v_tensor(x), opr_v_int(last), opr_v_int(g->id)};
        rc = call("scatter_from", b, 3, &y);
        CHECK(rc == OPR_OK, "%s: %s", what, opr_last_error());
        if (!rc) expect(y, want, N, dt, what);
        snprintf(what, sizeof what, "scatter_from:%s", opr_dtype_name(dt));
        if (!rc && g->id == 0) torch_compare(what, y, dt);
        opr_tensor_release(y);
        opr_tensor_release(x);

        /* all_to_all_single, uneven: member r sends a2a_rows(r, s) rows to s */
        double in[3 * 3 * COLS * 3], v[3 * 3 * COLS * 3];
        int64_t rows, in_split[3], out_split[3], n = 0;
        a2a_input(g->rank, g->size, dt, in, &rows);
        for (int s = 0; s < g->size; s++) {
            in_split[s] = a2a_rows(g->rank, s);
            out_split[s] = a2a_rows(s, g->rank);
            double theirs[3 * 3 * COLS * 3];
            int64_t their_rows, off = 0;
            a2a_input(s, g->size, dt, theirs, &their_rows);
            for (int q = 0; q < g->rank; q++) off += a2a_rows(s, q);
            for (int64_t j = 0; j < out_split[s]; j++, n++)
                for (int c = 0; c < COLS; c++) want[n * COLS + c] = theirs[(off + j) * COLS + c];
        }
        memcpy(v, in, sizeof(double) * (size_t)(rows * COLS));
        x = make(v, rows * COLS, dt);
        snprintf(what, sizeof what, "all_to_all_single %s group %lld", opr_dtype_name(dt), (long long)g->id);
        opr_value c[4] = {opr_v_tensor(x), opr_v_ints(out_split, g->size), opr_v_ints(in_split, g->size),
                          opr_v_int(g->id)};
        rc = call("all_to_all_single", c, 4, &y);
        CHECK(rc == OPR_OK, "%s: %s", what, opr_last_error());
        if (!rc) expect(y, want, n * COLS, dt, what);
        snprintf(what, sizeof what, "all_to_all_single:%s", opr_dtype_name(dt));
        if (!rc && g->id == 0) torch_compare(what, y, dt);
        opr_tensor_release(y);
        opr_tensor_release(x);
    }
}

/* send / recv around the ring of the world: every rank sends to the next (tag 5 + the
 * dtype) and receives from the one before; even ranks send first, odd ones receive
 * first, so that a message larger than MPI's eager limit could not deadlock either. */
static void check_p2p(void)
{
    if (world.size < 2) return;
    const int next = (world.rank + 1) % world.size, prev = (world.rank + world.size - 1) % world.size;
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        const opr_dtype dt = dtypes[d];
        const int tag = 5 + (int)d;
        opr_tensor *x = make_input(world.rank, dt, -1, 0), *t = make_input(0, dt, -1, 0), *s = NULL, *r = NULL;
        opr_value sa[4] = {opr_v_tensor(x), opr_v_int(next), opr_v_int(tag), opr_v_int(0)};
        opr_value ra[4] = {opr_v_tensor(t), opr_v_int(prev), opr_v_int(tag), opr_v_int(0)};
        int rs, rr;
        if (world.rank % 2 == 0) { rs = call("send", sa, 4, &s); rr = call("recv", ra, 4, &r); }
        else { rr = call("recv", ra, 4, &r); rs = call("send", sa, 4, &s); }
        CHECK(rs == OPR_OK && rr == OPR_OK, "send / recv %s: %s", opr_dtype_name(dt), opr_last_error());
        double want[N], zeros[N] = {0};
        for (int i = 0; i < N; i++) want[i] = input(prev, i, dt);
        if (!rr) expect(r, want, N, dt, "recv");
        char key[32];
        snprintf(key, sizeof key, "recv:%s", opr_dtype_name(dt));
        if (!rr) torch_compare(key, r, dt);
        if (!rs) expect(s, zeros, N, dt, "send's result");
        opr_tensor_release(s);
        opr_tensor_release(r);
        opr_tensor_release(t);
        opr_tensor_release(x);
    }
}

/* sum over ranks of <w_rank, y_rank>, on every rank. */
static double global_loss(opr_tensor *y, const double *w)
{
    int64_t n;
    double *v = values(y, &n), l = 0;
    for (int64_t i = 0; i < n; i++) l += w[i] * v[i];
    free(v);
    opr_tensor *lt = on_dev(opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){1}, &l, OPR_CPU)), *sum = NULL;
    opr_value a[3] = {opr_v_tensor(lt), opr_v_string("sum"), opr_v_int(0)};
    if (call("all_reduce", a, 3, &sum)) { opr_tensor_release(lt); return NAN; }
    opr_tensor_copy_to_host_f64(sum, &l, 1);
    opr_tensor_release(sum);
    opr_tensor_release(lt);
    return l;
}

/* The differentiable cases: what each rank computes from its input x. */
enum grad_case { G_PROD, G_REDUCE_SUM, G_REDUCE_PROD, G_REDUCE_MAX, G_GATHER, G_SCATTER, G_A2A, G_RING, G_COUNT };
static const char *const grad_names[] = {"all_reduce prod", "reduce_to sum", "reduce_to prod", "reduce_to max",
                                         "gather_to", "scatter_from", "all_to_all_single", "send / recv"};

static int forward(int k, opr_tensor *x, opr_tensor **y)
{
    const int last = world.size - 1;
    int64_t in_split[3], out_split[3];
    for (int s = 0; s < world.size; s++) in_split[s] = out_split[s] = 0;
    switch (k) {
    case G_PROD: return call("all_reduce", (opr_value[]){opr_v_tensor(x), opr_v_string("prod"), opr_v_int(0)}, 3, y);
    case G_REDUCE_SUM:
    case G_REDUCE_PROD:
    case G_REDUCE_MAX: {
        const char *op = k == G_REDUCE_SUM ? "sum" : k == G_REDUCE_PROD ? "prod" : "max";
        return call("reduce_to", (opr_value[]){opr_v_tensor(x), opr_v_int(last), opr_v_string(op), opr_v_int(0)}, 4, y);
    }
    case G_GATHER: return call("gather_to", (opr_value[]){opr_v_tensor(x), opr_v_int(last), opr_v_int(0)}, 3, y);
    case G_SCATTER: return call("scatter_from", (opr_value[]){opr_v_tensor(x), opr_v_int(0), opr_v_int(0)}, 3, y);
    case G_A2A: {
        /* rank r sends rows to s in a pattern adding up to ROWS; each learns what it gets
         * from the others' patterns */
        for (int s = 0; s < world.size; s++) {
            int64_t left = ROWS;
            for (int q = 0; q < world.size; q++) {
                int64_t rows = q == world.size - 1 ? left : 1 + (s + q) % 2;
                left -= rows;
                if (q == world.rank) out_split[s] = rows;
                if (s == world.rank) in_split[q] = rows;
            }
        }
        return call("all_to_all_single", (opr_value[]){opr_v_tensor(x), opr_v_ints(out_split, world.size),
                                                       opr_v_ints(in_split, world.size), opr_v_int(0)}, 4, y);
    }
    default: { /* the ring: s = send(x to next), zeros; y = recv(from prev) with s as its
                * template, so that backward runs recv's formula (a send) before send's (a
                * recv) on every rank: no rank waits for a gradient before sending its own */
        const int next = (world.rank + 1) % world.size, prev = (world.rank + world.size - 1) % world.size;
        opr_tensor *s = NULL;
        opr_value sa[4] = {opr_v_tensor(x), opr_v_int(next), opr_v_int(9), opr_v_int(0)};
        int rc = call("send", sa, 4, &s);
        opr_value ra[4] = {opr_v_tensor(s), opr_v_int(prev), opr_v_int(9), opr_v_int(0)};
        if (!rc) rc = call("recv", ra, 4, y);
        opr_tensor_release(s);
        return rc;
    }
    }
}

/* Gradients of L = sum_r <w_r, y_r> by autograd (the formulas, collectives again)
 * against central differences in which one rank at a time perturbs one element. */
static void check_gradients(void)
{
    for (int k = 0; k < G_COUNT; k++) {
        if (k == G_RING && world.size < 2) continue;
        opr_tensor *x = make_input(world.rank, OPR_F64, -1, 0), *y = NULL;
        if (k == G_SCATTER) { /* rank 0's [size * ROWS, COLS]; the others' only shape it */
            double v[3 * N];
            for (int i = 0; i < world.size * N; i++) v[i] = input(world.rank, i, OPR_F64);
            opr_tensor_release(x);
            x = make(v, (int64_t)world.size * N, OPR_F64);
        }
        const int64_t nx = opr_tensor_numel(x);
        opr_set_requires_grad(x, true);
        int rc = forward(k, x, &y);
        CHECK(rc == OPR_OK, "%s forward: %s", grad_names[k], opr_last_error());
        if (rc) { opr_tensor_release(x); continue; }
        int64_t ny = opr_tensor_numel(y);
        double *w = calloc((size_t)ny, sizeof *w), g[3 * N] = {0};
        for (int64_t i = 0; i < ny; i++) w[i] = cos(0.3 + 1.7 * world.rank + 0.61 * (double)i);
        opr_tensor *wt = on_dev(opr_tensor_from_data(ctx, OPR_F64, opr_tensor_ndim(y), opr_tensor_shape(y), w, OPR_CPU));
        rc = opr_backward(y, wt, NULL);
        CHECK(rc == OPR_OK, "%s backward: %s", grad_names[k], opr_last_error());
        if (!rc && opr_grad(x)) opr_tensor_copy_to_host_f64(opr_grad(x), g, nx);
        const double h = 1e-6;
        /* on a device (the emulation is slow), every fifth element: each rank's rows
         * and both columns are still met */
        const int step = dev.type == OPR_CPU.type ? 1 : 5;
        for (int p = 0; p < world.size; p++)
            for (int i = 0; i < nx; i += step) {
                double l[2];
                for (int side = 0; side < 2; side++) {
                    double v[3 * N];
                    for (int j = 0; j < nx; j++)
                        v[j] = input(world.rank, j, OPR_F64) + (world.rank == p && j == i ? (side ? -h : h) : 0);
                    opr_tensor *xp = make(v, nx, OPR_F64), *yp = NULL;
                    l[side] = forward(k, xp, &yp) ? NAN : global_loss(yp, w);
                    opr_tensor_release(yp);
                    opr_tensor_release(xp);
                }
                const double numeric = (l[0] - l[1]) / (2 * h);
                if (world.rank == p)
                    CHECK(fabs(numeric - g[i]) <= 1e-6 * (1 + fabs(numeric)),
                          "%s: d/dx[%d] on rank %d: analytic %.10g, numeric %.10g", grad_names[k], i, p, g[i], numeric);
            }
        free(w);
        opr_tensor_release(wt);
        opr_tensor_release(y);
        opr_tensor_release(x);
    }
}

/* Bad arguments fail with a message on every rank (each makes the same bad call, or
 * the check that the members agree fails them all), and the group stays usable. */
static void check_errors(void)
{
    opr_tensor *f = make_input(world.rank, OPR_F64, -1, 0), *i = make_input(world.rank, OPR_I64, -1, 0), *y = NULL;
    CHECK(call("all_reduce", (opr_value[]){opr_v_tensor(f), opr_v_string("band"), opr_v_int(0)}, 3, &y) ==
              OPR_ERR_INVALID, "band of f64 was accepted");
    CHECK(call("all_reduce", (opr_value[]){opr_v_tensor(i), opr_v_string("mean"), opr_v_int(0)}, 3, &y) ==
              OPR_ERR_INVALID, "mean of i64 was accepted");
    CHECK(call("gather_to", (opr_value[]){opr_v_tensor(f), opr_v_int(world.size), opr_v_int(0)}, 3, &y) ==
                  OPR_ERR_INVALID && strstr(opr_last_error(), "is not a member of group 0"),
          "gather_to a rank past the world: %s", opr_last_error());
    CHECK(call("send", (opr_value[]){opr_v_tensor(f), opr_v_int(world.rank), opr_v_int(0), opr_v_int(0)}, 4, &y) ==
                  OPR_ERR_INVALID && strstr(opr_last_error(), "is this rank"),
          "send to itself: %s", opr_last_error());
    CHECK(call("send", (opr_value[]){opr_v_tensor(f), opr_v_int(0), opr_v_int(40000), opr_v_int(0)}, 4, &y) ==
              OPR_ERR_INVALID, "tag 40000 was accepted");
    if (world.size > 1) {
        /* rank 0 sends a row more to rank 1 than rank 1 expects: every member fails,
         * naming them */
        int64_t in_split[3], out_split[3];
        for (int s = 0; s < world.size; s++) in_split[s] = out_split[s] = ROWS / world.size;
        if (world.rank == 0) { in_split[1] += 1; in_split[0] -= 1; }
        int rc = call("all_to_all_single", (opr_value[]){opr_v_tensor(f), opr_v_ints(out_split, world.size),
                                                          opr_v_ints(in_split, world.size), opr_v_int(0)}, 4, &y);
        CHECK(rc == OPR_ERR_INVALID && strstr(opr_last_error(), "rank 0 sends") &&
                  strstr(opr_last_error(), "which expects"),
              "all_to_all_single with splits that do not match: %d %s", rc, opr_last_error());
        /* a negative size on rank 1: it says why, the others name it */
        if (world.rank == 1) { in_split[0] = -1; in_split[1] = ROWS / world.size * 2 + 1; }
        rc = call("all_to_all_single", (opr_value[]){opr_v_tensor(f), opr_v_ints(out_split, world.size),
                                                      opr_v_ints(in_split, world.size), opr_v_int(0)}, 4, &y);
        CHECK(rc == OPR_ERR_INVALID && strstr(opr_last_error(), world.rank == 1 ? "input_split_sizes[0] = -1 is not"
                                                                                : "rank 1's split sizes are not valid"),
              "all_to_all_single with a negative size: %d %s", rc, opr_last_error());
        /* a recv whose self is not what was sent */
        double v[3] = {1, 2, 3};
        opr_tensor *small = on_dev(opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){3}, v, OPR_CPU));
        if (world.rank == 0)
            rc = call("send", (opr_value[]){opr_v_tensor(f), opr_v_int(1), opr_v_int(3), opr_v_int(0)}, 4, &y);
        else if (world.rank == 1)
            rc = call("recv", (opr_value[]){opr_v_tensor(small), opr_v_int(0), opr_v_int(3), opr_v_int(0)}, 4, &y);
        if (world.rank == 0) CHECK(rc == OPR_OK, "send: %s", opr_last_error());
        if (world.rank == 1)
            CHECK(rc == OPR_ERR_INVALID && strstr(opr_last_error(), "rank 0 sent f64 [6, 2]") &&
                      strstr(opr_last_error(), "this recv expects f64 [3]"),
                  "recv of another shape: %d %s", rc, opr_last_error());
        opr_tensor_release(y);
        y = NULL;
        opr_tensor_release(small);
    }
    CHECK(opr_dist_barrier(ctx, &world) == OPR_OK, "barrier: %s", opr_last_error());
    int rc = call("all_reduce", (opr_value[]){opr_v_tensor(i), opr_v_string("prod"), opr_v_int(0)}, 3, &y);
    CHECK(rc == OPR_OK, "all_reduce after the errors: %s", opr_last_error());
    opr_tensor_release(y);
    opr_tensor_release(i);
    opr_tensor_release(f);
}

int main(int argc, char **argv)
{
    int want = argc > 1 ? atoi(argv[1]) : 0;
    const char *device = NULL, *torch_file = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--torch") && i + 1 < argc) torch_file = argv[++i];
    }
    if (dist_test_start(device, &dev)) return 1;
    CHECK(want == 0 || world.size == want, "the world has %d ranks, want %d", world.size, want);
    CHECK(world.size <= 3, "at most 3 ranks (the references' buffers)");
    if (torch_file) CHECK(read_torch_ref(torch_file), "cannot read PyTorch's results from %s", torch_file);
    if (failures) return report();
    check_errors();
    int members[3];
    for (int r = 0; r < world.size; r++) members[r] = r;
    check_reductions(&world, members);
    check_rooted(&world, members);
    check_p2p();
    /* the odd ranks (1, or 1 alone) and the even ones: world ranks differ from group ranks */
    opr_group sub;
    int rc = opr_dist_split(ctx, &world, world.rank % 2, world.rank, &sub);
    CHECK(rc == OPR_OK, "split: %s", opr_last_error());
    if (!rc) {
        int n = 0;
        for (int r = world.rank % 2; r < world.size; r += 2) members[n++] = r;
        check_reductions(&sub, members);
        check_rooted(&sub, members);
        CHECK(opr_dist_barrier(ctx, &sub) == OPR_OK, "barrier on the sub-group: %s", opr_last_error());
        opr_dist_group_free(ctx, &sub);
    }
    check_gradients();
    if (torch_ref) {
        CHECK(torch_compared > 0, "nothing was compared with PyTorch");
        if (!failures)
            printf("rank %d/%d: the collectives are PyTorch's (gloo) within %g (%d results)\n", world.rank, world.size,
                   torch_worst, torch_compared);
        free(torch_ref);
    }
    int status = report();
    opr_ctx_free(ctx);
    return status;
}
