/* Cost model, selection and the plan cache.
 *
 * A candidate's cost is estimated on metadata: every op its formula calls contributes
 * flops / flop-rate + bytes / bandwidth + one launch on the backend's description
 * (views are free); a kernel entry contributes its own flops expression, its bytes and
 * one launch. Where the kernel that would run has a cost_ns (ABI 2.2), its estimate
 * replaces that figure; a fused kernel whose supports refuses the call is not a
 * candidate. Selection tries every set of candidates that covers the requested inputs
 * exactly once and takes the cheapest; within TIE_FRACTION, fewer saved bytes win,
 * then fewer launches, then the set with more fused kernels. Plans are cached per
 * (mask, device, argument metadata). */
#include "composite.h"
#include "deriv.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIE_FRACTION 0.03
#define CACHE_SLOTS 64
#define MAX_FAKES 96

/* ------------------------------------------------------------------ binding */

int deriv_bind(const opr_op *callee, const expr *call, int *pos)
{
    for (int i = 0; i < callee->nargs; i++) pos[i] = -1;
    int next = 0;
    for (int i = 0; i < call->nargs; i++) {
        const char *kw = call->kwnames ? call->kwnames[i] : NULL;
        int p = -1;
        if (!kw) p = next++;
        else for (int k = 0; k < callee->nargs; k++) if (!strcmp(callee->args[k].name, kw)) p = k;
        if (p < 0 || p >= callee->nargs)
            return opr_fail(OPR_ERR_INVALID, "%s:%d:%d: %s() has no argument %s%s", callee->file, call->line, call->col,
                            callee->name, kw ? kw : "at this position", "");
        pos[p] = i;
    }
    return OPR_OK;
}

/* ------------------------------------------------------------------ cost on metadata */

typedef struct cost_ctx {
    const opr_device_desc *dev;
    opr_device device;
    double flops, bytes;
    int launches;
    double plugin_ns;     /* the estimates of kernels' cost_ns, */
    int plugin_launches;  /* for this many of the launches */
    char plugin_note[160];/* "mm (plugin P)", the kernels whose estimate was used */
    opr_tensor fakes[MAX_FAKES]; /* metadata holders for intermediate results */
    int nfakes;
} cost_ctx;

static void note_plugin_cost(cost_ctx *cc, const char *kernel, const char *plugin, double ns)
{
    cc->plugin_ns += ns;
    cc->plugin_launches++;
    size_t used = strlen(cc->plugin_note);
    if (strstr(cc->plugin_note, kernel)) return; /* named once */
    snprintf(cc->plugin_note + used, sizeof cc->plugin_note - used, "%s%s (plugin %s)", used ? ", " : "", kernel, plugin);
}

/* The estimate of the kernel op would run on cc's device, when it has a cost_ns. */
static bool plugin_forward_cost(cost_ctx *cc, const opr_op *op, const mval *slots, opr_dtype dt, const opr_meta *res)
{
    const dtype_kernel *k = kernel_for(atomic_load(&((opr_op *)op)->kernels[cc->device.type]), dt);
    if (!k || !k->cost_ns || op->nout > OPR_MAX_OUTS) return false;
    const opr_meta *outs[OPR_MAX_OUTS];
    for (int o = 0; o < op->nout; o++) outs[o] = res; /* costed on output 0's shape, as below */
    kquery q;
    double ns;
    if (!kquery_forward(&q, op, slots, outs, cc->device, k) || !kquery_cost(k, &q.call, &ns)) return false;
    note_plugin_cost(cc, op->name, k->plugin, ns);
    return true;
}

static opr_tensor *fake_new(cost_ctx *cc, opr_dtype dt, int ndim, const int64_t *shape)
{
    if (cc->nfakes == MAX_FAKES) return NULL;
    opr_tensor *t = &cc->fakes[cc->nfakes++];
    memset(t, 0, sizeof *t);
    t->m.dtype = dt;
    t->m.ndim = ndim;
    if (ndim) memcpy(t->m.shape, shape, (size_t)ndim * sizeof *shape);
    t->m.numel = opr_meta_numel(shape, ndim);
    opr_contiguous_strides(shape, ndim, t->m.strides); /* as a new result is laid out */
    return t;
}

/* Adds one call of op (arguments bound into slots[0..nargs), the rest free for its
 * outputs) to cc; out gets its result's metadata. */
static int cost_op(cost_ctx *cc, const opr_op *op, mval *slots, mval *out)
{
    int rc;
    opr_dtype dt = OPR_F32;
    bool have_dt = false;
    double bytes = 0;
    for (int i = 0; i < op->nargs; i++) {
        if (op->args[i].type == ARG_TENSOR && (slots[i].k == MV_INT || slots[i].k == MV_FLOAT)) {
            opr_tensor *s = fake_new(cc, OPR_F32, 0, NULL); /* a number where a tensor goes: 0-d */
            if (!s) return opr_fail(OPR_ERR_NOMEM, "formula too large to cost");
            slots[i].k = MV_TENSOR;
            slots[i].u.t = &s->m;
        }
        if (slots[i].k == MV_TENSOR) {
            if (!have_dt && op->args[i].fixed_dtype < 0) { dt = slots[i].u.t->dtype; have_dt = true; }
            bytes += (double)slots[i].u.t->numel;
        }
    }
    mval shape;
    if (op->dynamic_shape || !op->shapes[0]) {
        shape.k = MV_LIST;
        shape.n = 1;
        shape.u.l[0] = slots[0].k == MV_TENSOR ? slots[0].u.t->numel : 1;
    } else if ((rc = expr_eval(op->shapes[0], slots, &shape))) {
        return opr_fail_wrap(rc, "costing %s", op->name);
    }
    /* a user op's shape expression may give anything: checked as dispatch checks it */
    if (shape.k != MV_LIST) return opr_fail(OPR_ERR_INVALID, "costing %s: shape expression did not give a list", op->name);
    if ((rc = opr_shape_check(shape.u.l, shape.n, NULL, op->name))) return opr_fail_wrap(rc, "costing %s", op->name);
    if (op->out_dtype[0] >= 0) dt = (opr_dtype)op->out_dtype[0];
    opr_tensor *res = fake_new(cc, dt, shape.n, shape.u.l);
    if (!res) return opr_fail(OPR_ERR_NOMEM, "formula too large to cost");
    for (int k = 0; k < op->nout; k++) { slots[op->nargs + k].k = MV_TENSOR; slots[op->nargs + k].u.t = &res->m; }
    slots[op->nargs + op->nout] = slots[op->nargs];
    mval same;
    bool identity = op->identity_if && !expr_eval(op->identity_if, slots, &same) && same.k == MV_BOOL && same.u.b;
    if (!op->view && !identity && plugin_forward_cost(cc, op, slots, dt, &res->m)) {
        cc->launches++;
    } else if (!op->view && !identity) {
        mval f;
        double flops = (double)res->m.numel;
        if (op->flops && !expr_eval(op->flops, slots, &f)) flops = f.k == MV_INT ? (double)f.u.i : f.u.d;
        cc->flops += flops;
        cc->bytes += (bytes + (double)res->m.numel) * (double)opr_dtype_size(dt);
        cc->launches++;
    }
    out->k = MV_TENSOR;
    out->u.t = &res->m;
    return OPR_OK;
}

static int cost_call(void *ud, const expr *call, const mval *args, int n, mval *out)
{
    (void)n;
    const opr_op *op = call->callee;
    int pos[OPR_MAX_ARGS];
    int rc = deriv_bind(op, call, pos);
    if (rc) return rc;
    mval slots[OPR_MAX_ARGS + OPR_MAX_OUTS + 1];
    for (int i = 0; i < op->nargs; i++) {
        if (pos[i] < 0) mval_of_kernel_arg(&op->args[i].def, &slots[i]);
        else slots[i] = args[pos[i]];
    }
    return cost_op(ud, op, slots, out);
}

static double cost_ns(const cost_ctx *cc)
{
    const opr_device_desc *d = cc->dev;
    return cc->flops / d->flops_per_s * 1e9 + cc->bytes / d->bytes_per_s * 1e9 +
           (cc->launches - cc->plugin_launches) * d->launch_ns + cc->plugin_ns;
}

int plan_forward_cost(const opr_op *op, const mval *args, opr_device dev, double kernel_rate, double *ns)
{
    cost_ctx *cc = calloc(1, sizeof *cc);
    if (!cc) return opr_fail(OPR_ERR_NOMEM, "out of memory costing %s", op->name);
    cc->dev = &op->ctx->devices[dev.type].desc;
    cc->device = dev;
    mval vals[OPR_MAX_ARGS + OPR_MAX_OUTS + 1 + COMPOSITE_MAX_LETS], out;
    memcpy(vals, args, (size_t)op->nargs * sizeof *vals);
    int rc = OPR_OK;
    if (op->composite) {
        const composite_def *cd = op->composite;
        expr_hooks h = {cc, cost_call};
        if (!(rc = composite_link(op))) {
            for (int k = 0; k < cd->nlets && !rc; k++) rc = expr_eval_with(cd->lets[k], vals, &h, &vals[op->nargs + k]);
            if (!rc) rc = expr_eval_with(cd->result, vals, &h, &out);
        }
    } else {
        rc = cost_op(cc, op, vals, &out);
        cc->flops /= kernel_rate;
    }
    if (!rc) *ns = cost_ns(cc);
    free(cc);
    return rc;
}

static uint64_t slot_bytes(const opr_op *op, const mval *slots, uint64_t save)
{
    uint64_t total = 0;
    for (int s = 0; s < op->nargs + op->nout; s++) {
        if (!((save >> s) & 1)) continue;
        if (slots[s].k == MV_TENSOR) total += (uint64_t)slots[s].u.t->numel * opr_dtype_size(slots[s].u.t->dtype);
        for (int k = 0; mval_is_list(&slots[s]) && k < slots[s].n; k++) { /* a Tensor[] saved: its items */
            const opr_meta *m = mval_item(&slots[s], k);
            if (m) total += (uint64_t)m->numel * opr_dtype_size(m->dtype);
        }
    }
    return total;
}

/* What costing one candidate found. */
typedef struct cand_eval {
    double ns;
    int launches;
    uint64_t save, meta;
    char plugin_note[160]; /* the kernels whose cost_ns gave the estimate, or "" */
    char refusal[512];     /* OPR_ERR_UNSUPPORTED: why its kernel's supports refused */
    const char *plugin;    /*   and whose kernel */
} cand_eval;

/* Cost of candidate c computing the inputs in `want` (a subset of its covers):
 * OPR_ERR_NOT_FOUND when its fused kernel is not on dev, OPR_ERR_UNSUPPORTED when
 * (ask_supports) the kernel's supports refuses the call. */
static int cand_cost(const opr_op *op, const deriv_cand *c, uint32_t want, opr_device dev, const mval *in_slots,
                     bool ask_supports, bool by_call, cand_eval *ev)
{
    const opr_device_desc *d = &op->ctx->devices[dev.type].desc;
    cost_ctx *cc = calloc(1, sizeof *cc);
    if (!cc) return opr_fail(OPR_ERR_NOMEM, "out of memory costing %s", op->name);
    cc->dev = d;
    cc->device = dev;
    uint64_t *save = &ev->save, *meta = &ev->meta;
    mval slots[DERIV_MAX_SLOTS];
    memcpy(slots, in_slots, sizeof slots);
    /* gradients have their outputs' metadata */
    opr_tensor *outs[OPR_MAX_OUTS];
    if (slots[op->nargs].k == MV_METAS) { /* the pieces of an op returning Tensor[]: grads has their metadata */
        slots[slot_result(op)] = slots[slot_grads(op)] = slots[slot_results(op)] = slots[op->nargs];
        slots[slot_grad(op)] = (mval){.k = MV_TENSOR, .u.t = &slots[op->nargs].u.ms[0]};
    } else {
        for (int k = 0; k < op->nout; k++) {
            const opr_meta *m = slots[op->nargs + k].u.t;
            outs[k] = fake_new(cc, m->dtype, m->ndim, m->shape);
        }
        slots[slot_result(op)] = slots[op->nargs];
        slots[slot_grad(op)] = slots[op->nargs];
        slots[slot_grads(op)] = (mval){.k = MV_TENSORS, .n = op->nout, .u.ts = outs};
        slots[slot_results(op)] = slots[slot_grads(op)];
    }
    int rc = OPR_OK;
    *save = 0;
    *meta = 0;
    if (c->kernel) {
        opr_dtype dt = slots[op->nargs].u.t->dtype;
        const dtype_kernel *k = kernel_for(atomic_load(&c->kernel->kernels[dev.type]), dt);
        if (!k) { free(cc); return OPR_ERR_NOT_FOUND; }
        kquery q;
        bool asked = (k->supports || k->cost_ns) && kquery_backward(&q, op, c, want, slots, dev, k);
        const char *why = ask_supports && asked ? kquery_refusal(k, &q.call, ev->refusal, sizeof ev->refusal) : NULL;
        if (why) { ev->plugin = k->plugin; free(cc); return OPR_ERR_UNSUPPORTED; }
        mval f;
        double flops = 0;
        if (c->flops && !expr_eval(c->flops, slots, &f)) flops = f.k == MV_INT ? (double)f.u.i : f.u.d;
        double frac = 0, bytes = 0, per_output = 0;
        for (int k = 0; k < c->ncover; k++) {
            if (!((want >> c->cover[k]) & 1)) continue;
            frac += 1.0 / c->ncover;
            if (c->out_flops[k] && !expr_eval(c->out_flops[k], slots, &f))
                per_output += f.k == MV_INT ? (double)f.u.i : f.u.d;
            deriv_reads(op, c, k, NULL, save, meta); /* a kernel entry's `needs` */
            bytes += (double)slots[c->cover[k]].u.t->numel; /* the gradient written */
        }
        /* per-output figures when the entry gives them, else a share of the whole */
        cc->flops = c->flops ? flops * frac : per_output;
        cc->bytes = (bytes + (double)slots[op->nargs].u.t->numel) * (double)opr_dtype_size(dt) +
                    (double)slot_bytes(op, slots, *save);
        cc->launches = 1;
        double ns;
        if (asked && kquery_cost(k, &q.call, &ns)) {
            cc->flops = cc->bytes = 0;
            note_plugin_cost(cc, c->kernel->name, k->plugin, ns);
        }
    } else {
        expr_hooks h = {cc, cost_call};
        for (int k = 0; k < c->nlets && !rc; k++) rc = expr_eval_with(c->lets[k], slots, &h, &slots[slot_let0(op) + k]);
        const mval *call = by_call ? in_slots : NULL; /* what the selects read: this call's branches */
        if (c->nlets) deriv_reads(op, c, -1, call, save, meta);
        for (int k = 0; k < c->ncover && !rc; k++) {
            if (!((want >> c->cover[k]) & 1)) continue;
            mval out;
            if (c->per_item) { /* once per item of the list, as the backward runs it */
                const mval *list = &slots[c->cover[k]];
                for (int i = 0; i < list->n && !rc; i++) {
                    slots[slot_item(op)] = (mval){.k = MV_INT, .u.i = i};
                    rc = expr_eval_with(c->formula[k], slots, &h, &out);
                }
            } else {
                rc = expr_eval_with(c->formula[k], slots, &h, &out);
            }
            deriv_reads(op, c, k, call, save, meta);
        }
    }
    if (!rc) {
        ev->ns = cost_ns(cc);
        ev->launches = cc->launches;
        memcpy(ev->plugin_note, cc->plugin_note, sizeof ev->plugin_note);
    }
    free(cc);
    return rc;
}

/* ------------------------------------------------------------------ selection */

typedef struct choice {
    int n;
    int cand[OPR_MAX_ARGS];
    uint32_t part[OPR_MAX_ARGS];
    double ns;
    int launches;
    int kernels;           /* fused kernels in the set */
    uint64_t save, meta, bytes;
    char plugin_note[160]; /* kernels whose cost_ns gave their part of ns */
} choice;

typedef struct search {
    const opr_op *op;
    opr_device dev;
    const mval *slots;
    uint32_t mask;
    choice cur, best, runner_up;
    bool have_best, have_runner_up;
    void (*visit)(void *ud, const choice *c);
    /* a fused kernel's supports refused the call (each time a set holds it) */
    void (*refused)(void *ud, int cand, const char *plugin, const char *why);
    void *ud;
    int forced;
    bool fast;                /* a fast-mode node: fast candidates are eligible */
    bool strict;              /* fast: normal candidates of inputs with a fast one are not */
    bool formulas_only;       /* PLAN_FORMULAS_ONLY: no fused backward kernel */
    bool by_call;             /* saves follow the branches this call's selects take (not PLAN_STATIC_SAVES) */
    int status;
    char refusal[640];        /* the first refusal of a supports, for the error when nothing is left */
} search;

static bool eligible(const search *s, const deriv_cand *c)
{
    if (s->formulas_only && c->kernel) return false; /* a kernel reads the data of its views: batched tensors are not */
    if (s->forced >= 0 && c == &s->op->deriv->cands[s->forced]) return true; /* tests force any candidate */
    if (c->fast) return s->fast;
    return !(s->fast && s->strict && (c->covers & s->op->deriv->fast_covers));
}

/* Whether a beats b. prefer_kernels: a tie that bytes and launches leave goes to the
 * set with more fused kernels (off while a test forces a formula: the inputs it does
 * not cover then keep to formulas too, so that the check of a formula runs no kernel). */
static bool better(const choice *a, const choice *b, bool prefer_kernels)
{
    double hi = a->ns > b->ns ? a->ns : b->ns;
    if (fabs(a->ns - b->ns) > TIE_FRACTION * hi) return a->ns < b->ns;
    if (a->bytes != b->bytes) return a->bytes < b->bytes;
    if (a->launches != b->launches) return a->launches < b->launches;
    if (a->kernels != b->kernels) return prefer_kernels ? a->kernels > b->kernels : a->kernels < b->kernels;
    return a->ns < b->ns;
}

/* Assigns the lowest uncovered input to each candidate that can take it, recursively. */
static void enumerate(search *s, uint32_t covered)
{
    if (covered == s->mask) {
        const deriv_info *d = s->op->deriv;
        bool forced_ok = s->forced < 0 || !(d->cands[s->forced].covers & s->mask);
        for (int i = 0; i < s->cur.n && !forced_ok; i++) forced_ok = s->cur.cand[i] == s->forced;
        if (!forced_ok) return;
        choice c = s->cur;
        c.ns = 0;
        c.launches = c.kernels = 0;
        c.save = c.meta = 0;
        c.plugin_note[0] = '\0';
        for (int i = 0; i < c.n; i++) {
            cand_eval ev;
            const deriv_cand *k = &d->cands[c.cand[i]];
            /* a forced candidate is tried whatever its supports says: the call reports it */
            int rc = cand_cost(s->op, k, c.part[i], s->dev, s->slots, c.cand[i] != s->forced, s->by_call, &ev);
            if (rc == OPR_ERR_NOT_FOUND) return; /* kernel not on this backend */
            if (rc == OPR_ERR_UNSUPPORTED) {
                if (!s->refusal[0])
                    snprintf(s->refusal, sizeof s->refusal, " (%s, plugin %s, supports: %.500s)", k->kernel->name,
                             ev.plugin, ev.refusal);
                if (s->refused) s->refused(s->ud, c.cand[i], ev.plugin, ev.refusal);
                return;
            }
            if (rc) { s->status = rc; return; }
            c.ns += ev.ns;
            c.launches += ev.launches;
            c.kernels += k->kernel != NULL;
            c.save |= ev.save;
            c.meta |= ev.meta;
            size_t used = strlen(c.plugin_note);
            if (ev.plugin_note[0] && used + 3 < sizeof c.plugin_note)
                snprintf(c.plugin_note + used, sizeof c.plugin_note - used, "%s%.150s", used ? ", " : "", ev.plugin_note);
        }
        c.meta &= ~c.save;
        c.bytes = slot_bytes(s->op, s->slots, c.save);
        if (s->visit) s->visit(s->ud, &c);
        const bool prefer_kernels = s->forced < 0 || d->cands[s->forced].kernel;
        if (!s->have_best || better(&c, &s->best, prefer_kernels)) {
            if (s->have_best) { s->runner_up = s->best; s->have_runner_up = true; }
            s->best = c;
            s->have_best = true;
        } else if (!s->have_runner_up || better(&c, &s->runner_up, prefer_kernels)) {
            s->runner_up = c;
            s->have_runner_up = true;
        }
        return;
    }
    uint32_t rest = s->mask & ~covered;
    int first = __builtin_ctz(rest);
    const deriv_info *d = s->op->deriv;
    for (int i = 0; i < d->ncands && !s->status; i++) {
        const deriv_cand *c = &d->cands[i];
        if (!((c->covers >> first) & 1) || !eligible(s, c)) continue;
        uint32_t part = c->covers & rest;
        /* a candidate that would recompute an input already covered is still fine:
         * it is asked only for `part` (its mask), so no input is computed twice */
        s->cur.cand[s->cur.n] = i;
        s->cur.part[s->cur.n++] = part;
        enumerate(s, covered | part);
        s->cur.n--;
    }
}

/* What plan_explain hooks into the search; NULL for plan_get. */
typedef struct search_hooks {
    void (*visit)(void *ud, const choice *c);
    void (*refused)(void *ud, int cand, const char *plugin, const char *why);
    void *ud;
    choice best, runner_up; /* filled */
    bool have_runner_up;
} search_hooks;

static int select_plan(const opr_op *op, uint32_t mask, opr_device dev, const mval *slots, unsigned flags,
                       deriv_plan *out, search_hooks *hooks)
{
    const bool fast = flags & PLAN_FAST;
    deriv_info *d = op->deriv;
    if (!d) return opr_fail(OPR_ERR_UNSUPPORTED, "%s is not differentiable", op->name);
    if (mask & ~d->differentiable) {
        int bad = __builtin_ctz(mask & ~d->differentiable);
        return opr_fail(OPR_ERR_UNSUPPORTED, "%s: no derivative formula for input '%s'", op->name, op->args[bad].name);
    }
    search *s = calloc(1, sizeof *s);
    if (!s) return opr_fail(OPR_ERR_NOMEM, "out of memory planning %s", op->name);
    *s = (search){.op = op, .dev = dev, .slots = slots, .mask = mask, .forced = d->forced,
                  .fast = fast && (mask & d->fast_covers), .strict = true, .formulas_only = flags & PLAN_FORMULAS_ONLY,
                  .by_call = !(flags & PLAN_STATIC_SAVES)};
    if (hooks) { s->visit = hooks->visit; s->refused = hooks->refused; s->ud = hooks->ud; }
    enumerate(s, 0);
    if (s->fast && !s->status && !s->have_best) { /* the fast ones leave an input uncovered: mix them */
        s->strict = false;
        enumerate(s, 0);
    }
    int rc = s->status;
    if (!rc && !s->have_best)
        rc = opr_fail(OPR_ERR_NOT_FOUND, "%s: no candidate set computes the requested gradients on %s%s%s", op->name,
                      op->ctx->devices[dev.type].name, d->forced >= 0 ? " with the forced candidate" : "", s->refusal);
    if (!rc) {
        const choice *b = &s->best;
        *out = (deriv_plan){.mask = mask, .fast = fast, .nchosen = b->n, .save = b->save, .save_meta = b->meta, .cost_ns = b->ns,
                         .saved_bytes = b->bytes};
        memcpy(out->chosen, b->cand, sizeof b->cand);
        memcpy(out->chosen_mask, b->part, sizeof b->part);
        if (hooks) { hooks->best = s->best; hooks->runner_up = s->runner_up; hooks->have_runner_up = s->have_runner_up; }
    }
    free(s);
    return rc;
}

/* ------------------------------------------------------------------ cache */

#define KEY_MAX (4 + (OPR_MAX_ARGS + OPR_MAX_OUTS) * (OPR_MAX_DIMS + 2))

typedef struct plan_entry {
    int64_t key[KEY_MAX];
    int klen;
    deriv_plan plan;
    struct plan_entry *retired_next;
} plan_entry;

typedef struct plan_cache {
    _Atomic(plan_entry *) slots[CACHE_SLOTS];
    pthread_mutex_t lock;
    plan_entry *retired; /* replaced entries: readers may still hold them */
} plan_cache;

void plan_cache_free(plan_cache *c)
{
    if (!c) return;
    for (int i = 0; i < CACHE_SLOTS; i++) free(atomic_load(&c->slots[i]));
    for (plan_entry *e = c->retired, *n; e; e = n) { n = e->retired_next; free(e); }
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* The cache key of a call: everything the plan depends on. *whole is false when some
 * slots did not fit (a long Tensor[]): calls that differ only there share the plan, so
 * it must not depend on them (PLAN_STATIC_SAVES). */
static int make_key(const opr_op *op, uint32_t mask, opr_device dev, const mval *slots, unsigned flags, int64_t *key,
                    bool *whole)
{
    int n = 0;
    *whole = true;
    key[n++] = mask;
    key[n++] = dev.type;
    key[n++] = op->deriv->forced;
    key[n++] = flags;
    for (int s = 0; s < op->nargs + op->nout; s++) {
        if (n + OPR_MAX_DIMS + 2 >= KEY_MAX) {
            *whole = false;
            break;
        }
        const mval *v = &slots[s];
        key[n++] = v->k;
        /* a drawn seed (`random:`) changes with every call but never the plan: keyed on
         * it, each call would make, and retire, a plan of its own */
        if (op->random && s == op->random_arg) continue;
        if (v->k == MV_TENSOR) {
            key[n++] = v->u.t->dtype * 16 + v->u.t->ndim;
            for (int d = 0; d < v->u.t->ndim; d++) key[n++] = v->u.t->shape[d];
        } else if (v->k == MV_INT) {
            key[n++] = v->u.i;
        } else if (v->k == MV_BOOL) {
            key[n++] = v->u.b;
        } else if (v->k == MV_FLOAT) {
            int64_t bits;
            memcpy(&bits, &v->u.d, sizeof bits);
            key[n++] = bits;
        } else if (v->k == MV_LIST) {
            key[n++] = v->n;
            for (int d = 0; d < v->n; d++) key[n++] = v->u.l[d];
        } else if (v->k == MV_FLIST) { /* scale_factors: a formula may read the items */
            key[n++] = v->n;
            for (int d = 0; d < v->n; d++) memcpy(&key[n++], &v->u.fl[d], sizeof(int64_t));
        } else if (v->k == MV_STR) { /* all_reduce's op: a select may read it */
            uint64_t h = 1469598103934665603ull;
            for (const char *c = v->u.s; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
            key[n++] = (int64_t)h;
        } else if (mval_is_list(v)) { /* a Tensor[]: its length and as many item shapes as fit */
            key[n++] = v->n;
            int i = 0;
            for (; i < v->n && n + 2 * OPR_MAX_DIMS + 4 < KEY_MAX; i++) {
                const opr_meta *m = mval_item(v, i);
                if (!m) { /* a None item of a Tensor?[] */
                    key[n++] = -1;
                    continue;
                }
                key[n++] = m->dtype * 16 + m->ndim;
                for (int d = 0; d < m->ndim; d++) key[n++] = m->shape[d];
            }
            if (i < v->n) *whole = false;
        }
    }
    return n;
}

static uint64_t hash_key(const int64_t *key, int n)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) h = (h ^ (uint64_t)key[i]) * 1099511628211ull;
    return h;
}

const deriv_plan *plan_get(const opr_op *op, uint32_t mask, opr_device dev, const mval *slots, unsigned flags)
{
    deriv_info *d = op->deriv;
    if (!d) { opr_fail(OPR_ERR_UNSUPPORTED, "%s is not differentiable", op->name); return NULL; }
    plan_cache *cache = d->cache;
    int64_t key[KEY_MAX];
    bool whole;
    int klen = make_key(op, mask, dev, slots, flags, key, &whole);
    uint64_t h = hash_key(key, klen) % CACHE_SLOTS;
    plan_entry *e = atomic_load_explicit(&cache->slots[h], memory_order_acquire);
    if (e && e->klen == klen && !memcmp(e->key, key, (size_t)klen * sizeof *key)) return &e->plan;

    plan_entry *fresh = malloc(sizeof *fresh);
    if (!fresh) { opr_fail(OPR_ERR_NOMEM, "out of memory caching a plan for %s", op->name); return NULL; }
    memcpy(fresh->key, key, (size_t)klen * sizeof *key);
    fresh->klen = klen;
    fresh->retired_next = NULL;
    pthread_mutex_lock(&op->ctx->lock);
    int rc = deriv_link(op->ctx, (opr_op *)op);
    pthread_mutex_unlock(&op->ctx->lock);
    if (!rc) rc = select_plan(op, mask, dev, slots, whole ? flags : flags | PLAN_STATIC_SAVES, &fresh->plan, NULL);
    if (rc) { free(fresh); return NULL; }
    pthread_mutex_lock(&cache->lock);
    plan_entry *old = atomic_exchange(&cache->slots[h], fresh);
    if (old) { old->retired_next = cache->retired; cache->retired = old; }
    pthread_mutex_unlock(&cache->lock);
    return &fresh->plan;
}

int plan_cache_new(deriv_info *d)
{
    d->cache = calloc(1, sizeof *d->cache);
    if (!d->cache) return opr_fail(OPR_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&d->cache->lock, NULL);
    return OPR_OK;
}

void plan_cache_clear(deriv_info *d)
{
    pthread_mutex_lock(&d->cache->lock);
    for (int i = 0; i < CACHE_SLOTS; i++) {
        plan_entry *old = atomic_exchange(&d->cache->slots[i], NULL);
        if (old) { old->retired_next = d->cache->retired; d->cache->retired = old; }
    }
    pthread_mutex_unlock(&d->cache->lock);
}

/* ------------------------------------------------------------------ explain */

typedef struct explain_buf {
    const opr_op *op;
    const mval *slots;
    char *buf;
    size_t len, used;
    opr_device dev;
    uint64_t refusals_told; /* bit per candidate (the first 64) */
} explain_buf;

static void appendf(explain_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void appendf(explain_buf *b, const char *fmt, ...)
{
    if (b->used + 1 >= b->len) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->buf + b->used, b->len - b->used, fmt, ap);
    va_end(ap);
    if (n > 0) b->used = b->used + (size_t)n < b->len ? b->used + (size_t)n : b->len - 1;
}

static void describe_set(explain_buf *b, const choice *c)
{
    const deriv_info *d = b->op->deriv;
    for (int i = 0; i < c->n; i++) {
        const deriv_cand *k = &d->cands[c->cand[i]];
        appendf(b, "%s[%s", i ? " + " : "", k->label);
        if (c->part[i] != k->covers) {
            appendf(b, " for");
            for (int a = 0; a < b->op->nargs; a++) if ((c->part[i] >> a) & 1) appendf(b, " %s", b->op->args[a].name);
        }
        appendf(b, "]");
    }
}

static void describe_saves(explain_buf *b, uint64_t save, uint64_t meta)
{
    const opr_op *op = b->op;
    const deriv_info *d = op->deriv;
    appendf(b, "saves {");
    int first = 1;
    for (int s = 0; s < op->nargs + op->nout; s++)
        if ((save >> s) & 1) { appendf(b, first ? "%s" : ", %s", d->slot_names[s]); first = 0; }
    appendf(b, "}");
    if (meta) {
        appendf(b, " + sizes of {");
        first = 1;
        for (int s = 0; s < op->nargs + op->nout; s++)
            if ((meta >> s) & 1) { appendf(b, first ? "%s" : ", %s", d->slot_names[s]); first = 0; }
        appendf(b, "}");
    }
}

static void fmt_bytes(char *buf, size_t len, uint64_t n)
{
    if (n >= (1u << 20)) snprintf(buf, len, "%.2f MiB", (double)n / (1 << 20));
    else if (n >= 1024) snprintf(buf, len, "%.1f KiB", (double)n / 1024);
    else snprintf(buf, len, "%llu B", (unsigned long long)n);
}

/* Appends, once each, the ops e calls that would run on the CPU fallback on b's device
 * (registry/fallback.c); *n counts them. */
static void list_fallbacks(explain_buf *b, const expr *e, opr_dtype dt, const opr_op **seen, int *n)
{
    if (!e) return;
    const opr_op *callee = e->kind == EXPR_CALL && e->builtin < 0 ? e->callee : NULL;
    if (callee && !kernel_for(atomic_load(&((opr_op *)callee)->kernels[b->dev.type]), dt) &&
        fallback_applies(callee, b->dev.type, dt)) {
        bool dup = false;
        for (int i = 0; i < *n && !dup; i++) dup = seen[i] == callee;
        if (!dup && *n < 16) {
            appendf(b, "%s%s", *n ? ", " : "\n      falls back to the cpu (no kernel on this device): ", callee->name);
            seen[(*n)++] = callee;
        }
    }
    for (int i = 0; i < e->nargs; i++) list_fallbacks(b, e->args[i], dt, seen, n);
}

static void explain_visit(void *ud, const choice *c)
{
    explain_buf *b = ud;
    char bytes[32];
    fmt_bytes(bytes, sizeof bytes, c->bytes);
    appendf(b, "  candidate ");
    describe_set(b, c);
    appendf(b, "\n      cost %.1f us%s%s%s, %d launch(es), ", c->ns / 1000, c->plugin_note[0] ? " (the estimate of " : "",
            c->plugin_note, c->plugin_note[0] ? ")" : "", c->launches);
    describe_saves(b, c->save, c->meta);
    appendf(b, " = %s", bytes);
    const opr_op *seen[16];
    int nseen = 0;
    const opr_dtype dt = b->slots[b->op->nargs].u.t->dtype;
    for (int i = 0; i < c->n; i++) {
        const deriv_cand *k = &b->op->deriv->cands[c->cand[i]];
        for (int l = 0; l < k->nlets; l++) list_fallbacks(b, k->lets[l], dt, seen, &nseen);
        for (int f = 0; f < k->ncover; f++) list_fallbacks(b, k->formula[f], dt, seen, &nseen);
    }
    appendf(b, "\n");
}

static void explain_refused(void *ud, int cand, const char *plugin, const char *why)
{
    explain_buf *b = ud;
    if (cand < 64 && (b->refusals_told >> cand) & 1) return;
    if (cand < 64) b->refusals_told |= 1ull << cand;
    const deriv_cand *k = &b->op->deriv->cands[cand];
    appendf(b, "  not a candidate: [%s], kernel %s (plugin %s) refuses these arguments (supports: %s)\n", k->label,
            k->kernel->name, plugin, why);
}

/* Why the chosen set beat the next best, by the rule that decided it (better()). */
static void explain_why(explain_buf *b, const search_hooks *h)
{
    const choice *w = &h->best, *r = &h->runner_up;
    appendf(b, "  why: ");
    double hi = w->ns > r->ns ? w->ns : r->ns;
    if (!h->have_runner_up) appendf(b, "the only candidate set (%.1f us)", w->ns / 1000);
    else if (fabs(w->ns - r->ns) > TIE_FRACTION * hi) appendf(b, "lowest estimated cost (%.1f us", w->ns / 1000);
    else {
        appendf(b, "a tie within %.0f%% with ", TIE_FRACTION * 100);
        describe_set(b, r);
        appendf(b, " (%.1f us against %.1f us), won on ", w->ns / 1000, r->ns / 1000);
        if (w->bytes != r->bytes) appendf(b, "fewer saved bytes");
        else if (w->launches != r->launches) appendf(b, "fewer launches (%d against %d)", w->launches, r->launches);
        else if (w->kernels > r->kernels) appendf(b, "a fused kernel over formulas (equal bytes and launches)");
        else if (w->kernels < r->kernels) appendf(b, "formulas, as the forced candidate is one (equal bytes and launches)");
        else appendf(b, "the lower estimate");
    }
    if (h->have_runner_up && fabs(w->ns - r->ns) > TIE_FRACTION * hi) {
        appendf(b, " against %.1f us for ", r->ns / 1000);
        describe_set(b, r);
        appendf(b, ")");
    }
    if (w->plugin_note[0]) appendf(b, "; costed with the estimate of %s", w->plugin_note);
    appendf(b, "\n  (ties within %.0f%% go to fewer saved bytes, then fewer launches, then a fused kernel)\n",
            TIE_FRACTION * 100);
}

int plan_explain(const opr_op *op, uint32_t mask, opr_device dev, const mval *slots, unsigned flags, char *buf,
                 size_t len)
{
    const bool fast = flags & PLAN_FAST;
    explain_buf b = {op, slots, buf, len, 0, dev, 0};
    if (len) buf[0] = '\0';
    if (op->composite) {
        appendf(&b, "composite op: forward = %s\n", op->composite->text);
        if (!op->deriv) { /* nothing of its own to plan: each part gets its own node */
            appendf(&b, "no derivative entries: autograd records the ops of the forward as ordinary nodes, each "
                        "with its own plan (opreg plan OP for each of them)\n");
            return OPR_OK;
        }
        appendf(&b, "own backward: the forward runs with grad mode off and the call is recorded as one node, "
                    "with the plan below\n");
    }
    if (!op->deriv) return opr_fail(OPR_ERR_UNSUPPORTED, "%s has no derivative formulas", op->name);
    pthread_mutex_lock(&op->ctx->lock);
    int rc = deriv_link(op->ctx, (opr_op *)op);
    pthread_mutex_unlock(&op->ctx->lock);
    if (rc) return rc;
    deriv_plan p;
    if (fast && (mask & op->deriv->fast_covers))
        appendf(&b, "fast mode (special gradients off): the fast variants replace the normal formulas of their inputs\n");
    else if (fast)
        appendf(&b, "fast mode (special gradients off): no fast variant for these inputs, the normal formulas run\n");
    search_hooks h = {.visit = explain_visit, .refused = explain_refused, .ud = &b};
    rc = select_plan(op, mask, dev, slots, flags, &p, &h);
    if (rc) return rc;
    char bytes[32];
    fmt_bytes(bytes, sizeof bytes, p.saved_bytes);
    appendf(&b, "chosen: ");
    describe_set(&b, &h.best);
    appendf(&b, "\n  estimated %.1f us, ", p.cost_ns / 1000);
    describe_saves(&b, p.save, p.save_meta);
    appendf(&b, " = %s\n", bytes);
    explain_why(&b, &h);
    return OPR_OK;
}
