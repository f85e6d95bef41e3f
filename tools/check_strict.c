/* opreg check --strict (check_strict.h). */
#include "check_strict.h"

#include <stdio.h>
#include <string.h>

/* A comparison ran and gave a verdict about the kernel's numbers. */
static bool compared(const check_record *r)
{
    return r->kind == CR_RESULT && (r->verdict == CV_PASS || r->verdict == CV_FAIL || r->verdict == CV_DEP);
}

static int op_index(const opr_ctx *ctx, const opr_op *op)
{
    for (int i = 0; i < opr_op_count(ctx); i++)
        if (opr_op_at(ctx, i) == op) return i;
    return -1;
}

/* Whether a record of op (index) on dev_type compared something: in dtype dt (-1: any),
 * for the backward candidate labelled cand (NULL: any record). A unit that crashed or
 * timed out counts as looked at: it fails the run already. */
static bool ran(const check_record *recs, size_t n, int op, int dev_type, int dt, const char *cand)
{
    for (size_t i = 0; i < n; i++) {
        const check_record *r = &recs[i];
        if (r->op != op || r->dev_type != dev_type) continue;
        if (r->kind == CR_RESULT && (r->verdict == CV_CRASHED || r->verdict == CV_TIMEOUT)) return true;
        if (!compared(r) || (dt >= 0 && r->dtype != dt)) continue;
        if (cand && strcmp(r->candidate, cand)) continue;
        return true;
    }
    return false;
}

static bool selected_dtype(const check_cfg *c, opr_dtype dt)
{
    return !c->dtype_mask || (c->dtype_mask & (1u << dt));
}

/* Kernels for ops the registry does not define, from the loader's remark on a loaded
 * plugin ("skipped N kernel(s) for ops the registry does not define: a, b"). */
static int skipped_kernels(const opr_ctx *ctx, void (*finding)(const char *, void *), void *data)
{
    int found = 0;
    for (int i = 0; i < opr_plugin_candidate_count(ctx); i++) {
        opr_plugin_candidate pc = {.struct_size = sizeof pc};
        if (opr_plugin_candidate_get(ctx, i, &pc) || !pc.loaded || !pc.why) continue;
        const char *at = strstr(pc.why, "skipped ");
        if (!at || !strstr(at, "kernel(s) for ops the registry does not define")) continue;
        char msg[768];
        snprintf(msg, sizeof msg, "plugin %s %.*s (misspelt op names? those kernels are never run)",
                 pc.name ? pc.name : pc.path, (int)strcspn(at, ";"), at);
        finding(msg, data);
        found++;
    }
    return found;
}

/* The fused backward kernels of op's candidates on dev_type that no comparison ran. */
static int unrun_fused(const check_cfg *c, const opr_op *op, int opi, int dev_type, const check_record *recs,
                       size_t n, void (*finding)(const char *, void *), void *data)
{
    static const opr_dtype floating[] = {OPR_F32, OPR_F64, OPR_F16, OPR_BF16};
    int found = 0;
    for (int cand = 0; cand < opr_op_grad_candidate_count(op); cand++) {
        const char *label = opr_op_grad_candidate_label(op, cand), *k = label ? strstr(label, "kernel ") : NULL;
        if (!k) continue;
        char name[96];
        snprintf(name, sizeof name, "%s", k + 7);
        name[strcspn(name, " ,])")] = '\0';
        const opr_op *slot = opr_op_find(c->ctx, name);
        for (size_t d = 0; slot && d < sizeof floating / sizeof floating[0]; d++) {
            opr_kernel_info info = {.struct_size = sizeof info};
            if (!selected_dtype(c, floating[d]) || opr_op_kernel_info(slot, dev_type, floating[d], &info)) continue;
            if (ran(recs, n, opi, dev_type, (int)floating[d], label)) continue;
            char msg[512];
            snprintf(msg, sizeof msg, "fused backward kernel %s on %s (plugin %s) in %s: no comparison ran it", name,
                     opr_device_type_name(c->ctx, dev_type), info.plugin, opr_dtype_name(floating[d]));
            finding(msg, data);
            found++;
        }
    }
    return found;
}

int check_strict(const check_cfg *c, const check_record *recs, size_t nrecs,
                 void (*finding)(const char *message, void *data), void *data)
{
    int found = skipped_kernels(c->ctx, finding, data);
    for (int k = 0; k < c->ntypes; k++) {
        const int t = c->types[k];
        if (t == 0) continue; /* the CPU against itself: its kernels are the reference */
        bool seen = false; /* --ordinals all: a kernel serves every ordinal, once is enough */
        for (int j = 0; j < k; j++) seen = seen || c->types[j] == t;
        if (seen) continue;
        const char *dev = opr_device_type_name(c->ctx, t);
        for (int o = 0; o < c->nops; o++) {
            const opr_op *op = c->ops[o];
            int opi = op_index(c->ctx, op);
            if (!opr_op_has_kernel(op, t)) continue;
            char msg[512];
            if (!ran(recs, nrecs, opi, t, -1, NULL)) {
                snprintf(msg, sizeof msg, "%s on %s: nothing compared (%s)", opr_op_name(op), dev,
                         opr_op_sample_count(op) ? "every record n/i, declined or not checked"
                                                 : "its YAML entry has no samples");
                finding(msg, data);
                found++;
                continue;
            }
            for (int dt = 0; dt < OPR_DTYPE_COUNT; dt++) {
                opr_kernel_info info = {.struct_size = sizeof info};
                if (!selected_dtype(c, (opr_dtype)dt) || opr_op_kernel_info(op, t, (opr_dtype)dt, &info)) continue;
                if (ran(recs, nrecs, opi, t, dt, NULL)) continue;
                snprintf(msg, sizeof msg, "kernel %s on %s (plugin %s) in %s: no comparison ran it%s", opr_op_name(op),
                         dev, info.plugin, opr_dtype_name((opr_dtype)dt),
                         opr_op_supports_dtype(op, (opr_dtype)dt) ? "" : " (the op's schema does not list the dtype)");
                finding(msg, data);
                found++;
            }
            if (c->backward) found += unrun_fused(c, op, opi, t, recs, nrecs, finding, data);
        }
    }
    return found;
}
