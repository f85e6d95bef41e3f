/* opreg ops --core-aten: each overload of the Core ATen list against the registry. An
 * overload counts as defined when the registry has an op of exactly that name and
 * overload (what opr_op_find resolves for "slice.Tensor"), and as complete when it also
 * runs on the CPU, takes ATen's arguments (same_arguments: how a captured call binds),
 * and has derivative formulas wherever it can give floating
 * outputs that carry gradients (composites without their own formulas differentiate
 * through their parts). */
#include "core_aten.h"

#include <stdio.h>
#include <string.h>

/* The arguments of an ATen schema "name.ov(Type a, Type b=1, *, Type c) -> ...": each
 * name written into names[] (at most cap, up to 63 characters) and whether it comes
 * after `*` (keyword-only: a captured call passes it by name) into kwonly[]. Returns
 * their count. */
static int aten_args(const char *schema, char names[][64], bool *kwonly, int cap)
{
    const char *p = strchr(schema, '(');
    if (!p) return 0;
    int n = 0, depth = 0;
    bool star = false;
    const char *start = ++p;
    for (; *p; p++) {
        if (*p == '(' || *p == '[') depth++;
        else if ((*p == ']' || *p == ')') && depth > 0) depth--;
        else if ((*p == ',' || *p == ')') && depth == 0) {
            /* one argument: "Type name" or "Type name=default"; "*" marks keyword-only */
            const char *end = p;
            const char *eq = memchr(start, '=', (size_t)(end - start));
            if (eq) end = eq;
            while (end > start && end[-1] == ' ') end--;
            const char *b = end;
            while (b > start && b[-1] != ' ') b--;
            if (end - b == 1 && *b == '*') star = true;
            else if (end > b && n < cap) {
                snprintf(names[n], 64, "%.*s", (int)(end - b), b);
                kwonly[n++] = star;
            }
            if (*p == ')') break;
            start = p + 1;
        }
    }
    return n;
}

/* Whether op takes ATen's arguments: the positional ones (before `*`) first and in
 * ATen's order, since a captured call passes them by position; the keyword-only ones
 * by name anywhere after those; and any argument of its own (native_dropout's seed)
 * with a default, so that a call giving only ATen's arguments binds. */
static bool same_arguments(const opr_op *op, char names[][64], const bool *kwonly, int n)
{
    const int m = opr_op_num_args(op);
    int pos = 0;
    while (pos < n && !kwonly[pos]) pos++;
    if (m < pos) return false;
    for (int i = 0; i < pos; i++)
        if (strcmp(names[i], opr_op_arg_name(op, i))) return false;
    for (int i = pos; i < n; i++) {
        const int a = opr_op_arg_index(op, names[i]);
        if (a < pos) return false;
    }
    for (int a = pos; a < m; a++) {
        bool aten = false;
        for (int i = pos; i < n && !aten; i++) aten = !strcmp(names[i], opr_op_arg_name(op, a));
        if (!aten && !opr_op_arg_default(op, a, NULL)) return false;
    }
    return true;
}

/* The op named exactly name[.overload] (an ATen default overload: the op of that name
 * that declares no overload name, or "default"), or NULL. */
static const opr_op *find_exact(opr_ctx *ctx, const core_aten_entry *e)
{
    char full[160];
    snprintf(full, sizeof full, e->overload[0] ? "%s.%s" : "%s", e->name, e->overload);
    const opr_op *op = opr_op_find(ctx, full);
    if (!op) return NULL;
    const char *ov = opr_op_overload_name(op);
    if (e->overload[0]) return ov && !strcmp(ov, e->overload) ? op : NULL;
    size_t base = strcspn(opr_op_name(op), ".");
    bool same_name = strlen(e->name) == base && !strncmp(opr_op_name(op), e->name, base);
    return same_name && (!ov || !strcmp(ov, "default")) ? op : NULL;
}

/* Whether some output of op can carry gradients: marked differentiable and floating
 * (a fixed floating dtype, or the call's when the op accepts a floating one). */
static bool differentiable(const opr_op *op)
{
    bool takes_tensor = false; /* a factory (full, arange) has nothing to differentiate */
    for (int i = 0; i < opr_op_num_args(op); i++) takes_tensor |= opr_op_arg_kind(op, i) == OPR_V_TENSOR || opr_op_arg_kind(op, i) == OPR_V_TENSOR_LIST;
    if (!takes_tensor) return false;
    bool floating_t = opr_op_supports_dtype(op, OPR_F32) || opr_op_supports_dtype(op, OPR_F64);
    for (int k = 0; k < opr_op_num_outputs(op); k++) {
        if (!opr_op_output_differentiable(op, k)) continue;
        int dt = opr_op_output_dtype(op, k);
        if (dt < 0 ? floating_t : (dt == OPR_F32 || dt == OPR_F64 || dt == OPR_F16 || dt == OPR_BF16)) return true;
    }
    return false;
}

/* What is wrong with a defined overload, into why (empty when nothing). */
static void problems(opr_ctx *ctx, const core_aten_entry *e, const opr_op *op, int cpu, char *why, size_t cap)
{
    why[0] = '\0';
    size_t len = 0;
#define ADD(...) (len += (size_t)snprintf(why + len, len < cap ? cap - len : 0, __VA_ARGS__))
    if (cpu < 0 || !opr_op_has_kernel(op, cpu)) ADD("%sno CPU kernel", len ? "; " : "");
    if (differentiable(op) && !opr_op_is_composite(op) && opr_op_grad_candidate_count(op) == 0)
        ADD("%sno derivative formula", len ? "; " : "");
    char names[32][64];
    bool kwonly[32];
    int n = aten_args(e->schema, names, kwonly, 32), m = opr_op_num_args(op);
    if (!same_arguments(op, names, kwonly, n)) {
        ADD("%sarguments differ: ATen (", len ? "; " : "");
        for (int i = 0; i < n; i++) ADD("%s%s%s", i ? ", " : "", i && kwonly[i] && !kwonly[i - 1] ? "*, " : "", names[i]);
        ADD("), opreg (");
        for (int i = 0; i < m; i++) ADD("%s%s", i ? ", " : "", opr_op_arg_name(op, i));
        ADD(")");
    }
#undef ADD
    (void)ctx;
    if (len >= cap && cap > 4) snprintf(why + cap - 4, 4, "...");
}

int core_aten_report(opr_ctx *ctx, bool require_all)
{
    int cpu = -1;
    for (int t = 0; t < opr_device_type_count(ctx); t++)
        if (!strcmp(opr_device_type_name(ctx, t), "cpu")) cpu = t;
    int defined = 0, missing = 0, symbolic = 0, bad = 0;
    printf("%-40s %-8s %-9s %-16s %s\n", "Core ATen overload", "defined", "formulas", "runs on", "problem");
    for (int i = 0; i < core_aten_count; i++) {
        const core_aten_entry *e = &core_aten_list[i];
        char full[160];
        snprintf(full, sizeof full, e->overload[0] ? "%s.%s" : "%s", e->name, e->overload);
        if (!strncmp(e->name, "sym_", 4)) {
            /* symbolic-shape queries: a concrete tensor answers them */
            printf("%-40s %-8s %-9s %-16s %s\n", full, "n/a", "", "", "a shape query (opr_tensor_shape and friends)");
            symbolic++;
            continue;
        }
        const opr_op *op = find_exact(ctx, e);
        if (!op) {
            printf("%-40s %-8s %-9s %-16s %s\n", full, "no", "", "", e->in_1_13 ? "" : "(not in PyTorch 1.13)");
            missing++;
            continue;
        }
        defined++;
        char runs[64] = "";
        size_t len = 0;
        for (int t = 0; t < opr_device_type_count(ctx); t++)
            if (opr_op_has_kernel(op, t) && len < sizeof runs)
                len += (size_t)snprintf(runs + len, sizeof runs - len, "%s%s", len ? " " : "", opr_device_type_name(ctx, t));
        const char *formulas = opr_op_grad_candidate_count(op) ? "yes"
                               : opr_op_is_composite(op)       ? "parts"
                               : differentiable(op)            ? "NONE"
                                                               : "n/d";
        char why[512];
        problems(ctx, e, op, cpu, why, sizeof why);
        if (why[0]) bad++;
        printf("%-40s %-8s %-9s %-16s %s\n", full, "yes", formulas, runs, why);
    }
    printf("\n%d overloads listed (%d shape queries with nothing to define): %d defined, %d missing; "
           "%d defined with a problem\n",
           core_aten_count, symbolic, defined, missing, bad);
    return bad + (require_all ? missing : 0);
}
