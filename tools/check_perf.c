/* opreg check --perf (check_perf.h). Times are the best of a few runs with the device
 * synchronised: the first run pays for allocations and plans. */
#include "check_perf.h"
#include "check_sample.h"
#include "check_supervisor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Best of a few calls of the op on prepared arguments, with the device synchronised. */
static double time_call(const opr_op *op, sample_run *r, opr_device dev)
{
    double best = INFINITY;
    for (int rep = 0; rep < 5; rep++) {
        opr_tensor *outs[CHECK_MAX_OUTS] = {NULL};
        double t0 = now_ns();
        int rc = opr_call(op, r->args, r->nargs, outs, r->nouts);
        if (!rc) rc = opr_device_sync(opr_tensor_ctx(r->owned[0]), dev);
        double t = now_ns() - t0;
        for (int o = 0; o < CHECK_MAX_OUTS; o++) opr_tensor_release(outs[o]);
        if (rc) return NAN;
        if (t < best) best = t;
    }
    return best;
}

/* Best of 3 forward-and-backward runs of variant v of sample s in f32 on dev with
 * candidate `forced` forced (-1: the plan chosen by cost), gradients for every input
 * candidate `cover` covers (-1: every candidate's); NaN when it cannot run there. */
static double time_backward(const opr_op *op, int s, int v, int cover, int forced, opr_device dev)
{
    double best = INFINITY;
    opr_op_force_grad_candidate(op, forced);
    for (int rep = 0; rep < 3 && !isnan(best); rep++) {
        sample_run r;
        char label[48];
        opr_tensor *ins[CHECK_MAX_ARGS], *grads[CHECK_MAX_ARGS] = {NULL};
        int n_in = check_sample_build(op, s, v, OPR_F32, dev, &r, label, sizeof label) ? -1
                                                                                      : check_cover_inputs(op, cover, &r, ins);
        double t0 = now_ns();
        int rc = n_in > 0 ? check_grads_of(op, &r, ins, n_in, grads) : OPR_ERR_INVALID;
        if (!rc) rc = opr_device_sync(opr_tensor_ctx(r.owned[0]), dev);
        double t = now_ns() - t0;
        for (int k = 0; k < n_in; k++) opr_tensor_release(grads[k]);
        check_sample_free(&r);
        if (rc) best = NAN;
        else if (t < best) best = t;
    }
    opr_op_force_grad_candidate(op, -1);
    return best;
}

void check_perf(const check_cfg *c, int u, const opr_op *op, opr_device dev)
{
    if (!opr_op_supports_dtype(op, OPR_F32) || !opr_op_sample_count(op)) return;
    int s = 0, v = 0;
    char label[48] = "";
    for (int i = 0; i < opr_op_sample_count(op) && !v; i++)
        for (int k = 1; k < opr_op_sample_variant_count(op, i) && !v; k++) {
            opr_value args[CHECK_MAX_ARGS];
            opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS];
            int nargs = 0, nowned = 0;
            if (opr_op_sample_variant_args(op, i, k, OPR_F32, (opr_device){0, 0}, 1, args, &nargs, owned, &nowned,
                                           label, sizeof label) == OPR_OK && !strcmp(label, "large")) {
                s = i;
                v = k;
            }
            for (int j = 0; j < nowned; j++) opr_tensor_release(owned[j]);
        }
    check_phase("%s perf, sample %d [%s], f32", opr_op_name(op), s, v ? "large" : "");
    sample_run on_dev, on_cpu;
    check_record r = check_new_record(c, u, "perf", OPR_F32, s, v ? "large" : "");
    r.kind = CR_PERF;
    r.ns = r.ref_ns = NAN;
    if (!check_sample_run(op, s, v, OPR_F32, dev, &on_dev, label, sizeof label) && !on_dev.rc && on_dev.nowned)
        r.ns = time_call(op, &on_dev, dev);
    if (!check_sample_run(op, s, v, OPR_F32, (opr_device){0, 0}, &on_cpu, label, sizeof label) && !on_cpu.rc &&
        on_cpu.nowned)
        r.ref_ns = time_call(op, &on_cpu, (opr_device){0, 0});
    check_sample_free(&on_dev);
    check_sample_free(&on_cpu);
    check_emit(&r);
    if (!c->backward || !opr_op_grad_candidate_count(op)) return;
    for (int cand = 0; cand <= opr_op_grad_candidate_count(op); cand++) {
        int which = cand < opr_op_grad_candidate_count(op) ? cand : -1;
        const char *cl = which < 0 ? "plan chosen by cost" : opr_op_grad_candidate_label(op, which);
        check_phase("%s perf backward [%s], sample %d [%s], f32", opr_op_name(op), cl, s, v ? "large" : "");
        check_record b = check_new_record(c, u, "perf", OPR_F32, s, v ? "large" : "");
        b.kind = CR_PERF;
        snprintf(b.candidate, sizeof b.candidate, "%s", cl);
        b.ns = time_backward(op, s, v, which, which, dev);
        if (isnan(b.ns)) continue; /* a candidate the backend cannot run has no time */
        /* the yardstick: the CPU's plan chosen by cost for the same inputs */
        b.ref_ns = time_backward(op, s, v, which, -1, (opr_device){0, 0});
        check_emit(&b);
    }
}

