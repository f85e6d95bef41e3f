/* Analysis of derivative formulas: which slots each formula reads as tensors (these
 * are saved) and which only through built-ins such as size() (only metadata is kept);
 * linking the ops that formulas call. */
#include "deriv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Maps `result` to output 0 and drops slots that are never saved (grads, lets). */
static uint64_t saved_bit(const opr_op *op, int slot)
{
    if (slot == slot_result(op)) return 1ull << op->nargs;
    if (slot < op->nargs) /* scalars are kept anyway */
        return op->args[slot].type == ARG_TENSOR || op->args[slot].type == ARG_TENSOR_LIST ? 1ull << slot : 0;
    if (slot < op->nargs + op->nout) return 1ull << slot;
    return 0;
}

/* Whether e reads only the op's arguments and outputs (no grad, result, lets, item). */
static bool reads_only_call(const opr_op *op, const expr *e)
{
    if (e->kind == EXPR_NAME && e->slot >= op->nargs + op->nout) return false;
    if (e->kind == EXPR_CALL && e->builtin < 0) return false; /* an op: not evaluable on metadata */
    for (int i = 0; i < e->nargs; i++)
        if (!reads_only_call(op, e->args[i])) return false;
    return true;
}

/* The branch (1 or 2) select e takes on the call in slots, or 0 when that is not known
 * before the backward runs: its condition reads more than the call's arguments and
 * outputs, or cannot be evaluated. The backward evaluates the same condition on the
 * same values (scalars are kept, tensors' metadata too), so it takes the same one. */
static int select_taken(const opr_op *op, const expr *e, const mval *slots)
{
    if (!slots || !reads_only_call(op, e->args[0])) return 0;
    mval c;
    return expr_eval(e->args[0], slots, &c) ? 0 : expr_truthy(&c) ? 1 : 2;
}

/* What e reads: slots read as tensors into needs, through built-ins only into meta.
 * slots (or NULL): the call, whose selects then count only the branch they take. */
static void analyze(const opr_op *op, const expr *e, bool meta_only, const mval *slots, uint64_t *needs,
                    uint64_t *meta)
{
    switch (e->kind) {
    case EXPR_NAME:
        if (e->slot == slot_results(op)) {  /* results without an index: all outputs */
            for (int k = 0; k < op->nout; k++) *needs |= 1ull << (op->nargs + k);
        } else if (meta_only) {
            *meta |= saved_bit(op, e->slot);
        } else {
            *needs |= saved_bit(op, e->slot);
        }
        return;
    case EXPR_INDEX:
        if (e->args[0]->kind == EXPR_NAME && e->args[1]->kind == EXPR_INT && e->args[1]->i >= 0 &&
            e->args[1]->i < op->nout) {
            if (e->args[0]->slot == slot_results(op)) {
                uint64_t bit = 1ull << (op->nargs + e->args[1]->i);
                if (meta_only) *meta |= bit;
                else *needs |= bit;
                return;
            }
            if (e->args[0]->slot == slot_grads(op)) return;
        }
        if (e->args[0]->kind == EXPR_NAME && e->args[0]->slot < op->nargs) { /* tensors[i]: read as the list is */
            analyze(op, e->args[0], meta_only, slots, needs, meta);
            analyze(op, e->args[1], false, slots, needs, meta);
            return;
        }
        break;
    case EXPR_CALL: {
        const bool select = expr_builtin_is_select(e->builtin);
        const int taken = select ? select_taken(op, e, slots) : 0;
        for (int i = 0; i < e->nargs; i++)
            if (!taken || i == 0 || i == taken)
                analyze(op, e->args[i], select ? meta_only : expr_builtin_reads_meta(e->builtin), slots, needs, meta);
        return;
    }
    default:
        break;
    }
    for (int i = 0; i < e->nargs; i++) analyze(op, e->args[i], false, slots, needs, meta);
}

/* Whether e holds a select whose branch the call decides (select_taken). */
static bool has_call_select(const opr_op *op, const expr *e)
{
    if (e->kind == EXPR_CALL && expr_builtin_is_select(e->builtin) && reads_only_call(op, e->args[0])) return true;
    for (int i = 0; i < e->nargs; i++)
        if (has_call_select(op, e->args[i])) return true;
    return false;
}

void deriv_reads(const opr_op *op, const deriv_cand *c, int cover_pos, const mval *slots, uint64_t *needs,
                 uint64_t *meta)
{
    if (cover_pos < 0) {
        if (slots && c->lets_call_select) {
            for (int k = 0; k < c->nlets; k++) analyze(op, c->lets[k], false, slots, needs, meta);
        } else {
            *needs |= c->let_needs;
            *meta |= c->let_meta;
        }
    } else if (slots && (c->call_select >> cover_pos) & 1) {
        analyze(op, c->formula[cover_pos], false, slots, needs, meta);
    } else {
        *needs |= c->out_needs[cover_pos];
        *meta |= c->out_meta[cover_pos];
    }
}

/* The first node of e that reads slot, or NULL. */
static const expr *find_slot(const expr *e, int slot)
{
    if (e->kind == EXPR_NAME && e->slot == slot) return e;
    for (int i = 0; i < e->nargs; i++) {
        const expr *f = find_slot(e->args[i], slot);
        if (f) return f;
    }
    return NULL;
}

int deriv_add_formula(opr_op *op, deriv_cand *c, int cover_pos, expr *e, const char **names, int nnames,
                      const expr_src *src)
{
    int rc = expr_resolve_formula(e, names, nnames, src);
    if (rc) return rc;
    const expr *item = c->per_item ? NULL : find_slot(e, slot_item(op));
    if (item) /* an argument named `i` resolves to its own slot first */
        return opr_fail(OPR_ERR_PARSE, "%s:%d:%d: 'i' (an item's index) is known only in a 'LIST[i]:' derivative "
                        "entry", src->file, item->line, item->col);
    uint64_t needs = 0, meta = 0;
    analyze(op, e, false, NULL, &needs, &meta);
    const bool call_select = has_call_select(op, e);
    if (cover_pos < 0) { /* a shared `let` */
        c->let_needs |= needs;
        c->let_meta |= meta;
        c->lets_call_select |= call_select;
    } else {
        c->formula[cover_pos] = e;
        c->out_needs[cover_pos] = needs;
        c->out_meta[cover_pos] = meta;
        if (call_select) c->call_select |= 1u << cover_pos;
    }
    return OPR_OK;
}

/* Whether a formula's call can bind to callee: no more positional arguments than it
 * takes, keywords it has, no parameter given twice, every one without a default given
 * but a `str device`, which the run fills with its own device (expr_run.c). The cost
 * model and the backward pass read each parameter's slot, so a call that leaves one out
 * must not get that far. */
static int check_call(const opr_op *op, const char *where, const expr *call, const opr_op *callee)
{
    const char *why = NULL, *what = "";
    bool bound[OPR_MAX_ARGS] = {false};
    int next = 0;
    for (int i = 0; i < call->nargs && !why; i++) {
        const char *kw = call->kwnames ? call->kwnames[i] : NULL;
        int p = kw ? -1 : next++;
        for (int k = 0; kw && k < callee->nargs; k++)
            if (!strcmp(callee->args[k].name, kw)) p = k;
        if (p < 0 || p >= callee->nargs) why = kw ? "has no argument named" : "takes fewer arguments", what = kw ? kw : "";
        else if (bound[p]) why = "gets this argument twice:", what = callee->args[p].name;
        else bound[p] = true;
    }
    for (int p = 0; p < callee->nargs && !why; p++)
        if (!bound[p] && !callee->args[p].has_default && p != callee->device_arg)
            why = "needs argument", what = callee->args[p].name;
    if (!why) return OPR_OK;
    return opr_fail(OPR_ERR_PARSE, "%s:%d:%d: %s: %s() %s %s%s%s", op->file, call->line, call->col, where,
                    callee->name, why, *what ? "'" : "", what, *what ? "'" : "");
}

int deriv_link_calls(opr_ctx *ctx, const opr_op *op, const char *what, expr *e, bool known_only)
{
    if (e->kind == EXPR_CALL && e->builtin < 0 && !e->callee) {
        opr_op *callee = registry_find(ctx, e->name);
        if (!callee && !known_only)
            return opr_fail(OPR_ERR_NOT_FOUND, "%s:%d:%d: %s calls unknown op '%s'", op->file, e->line, e->col, what,
                            e->name);
        int rc = callee ? check_call(op, what, e, callee) : OPR_OK;
        if (rc) return rc;
        if (!known_only) e->callee = callee;
    }
    for (int i = 0; i < e->nargs; i++) {
        int rc = deriv_link_calls(ctx, op, what, e->args[i], known_only);
        if (rc) return rc;
    }
    return OPR_OK;
}

/* "derivative of OP for 'LABEL'": what messages about a formula's calls say. */
static void formula_what(const opr_op *op, const char *label, char *buf, size_t len)
{
    snprintf(buf, len, "derivative of %s for '%s'", op->name, label);
}

int deriv_check_calls(opr_ctx *ctx, const opr_op *op, const char *label, const expr *e)
{
    char what[256];
    formula_what(op, label, what, sizeof what);
    pthread_mutex_lock(&ctx->lock);
    int rc = deriv_link_calls(ctx, op, what, (expr *)e, true);
    pthread_mutex_unlock(&ctx->lock);
    return rc;
}

int deriv_link(opr_ctx *ctx, opr_op *op)
{
    deriv_info *d = op->deriv;
    for (int i = 0; d && i < d->ncands; i++) {
        deriv_cand *c = &d->cands[i];
        int rc = OPR_OK;
        char what[256];
        formula_what(op, c->label, what, sizeof what);
        for (int k = 0; k < c->ncover && !rc; k++)
            if (c->formula[k]) rc = deriv_link_calls(ctx, op, what, c->formula[k], false);
        for (int k = 0; k < c->nlets && !rc; k++) rc = deriv_link_calls(ctx, op, what, c->lets[k], false);
        if (rc) return rc;
    }
    return OPR_OK;
}

void deriv_free(opr_op *op)
{
    deriv_info *d = op->deriv;
    if (!d) return;
    for (int i = 0; i < d->ncands; i++) {
        deriv_cand *c = &d->cands[i];
        free(c->label);
        for (int k = 0; k < c->ncover; k++) expr_free(c->formula[k]);
        for (int k = 0; k < c->nlets; k++) expr_free(c->lets[k]);
        expr_free(c->flops);
        for (int k = 0; k < c->ncover; k++) expr_free(c->out_flops[k]);
        if (c->kernel && !c->kernel->ctx) op_free(c->kernel); /* never registered: the entry was refused */
    }
    for (int i = op->nargs + op->nout; i < d->nslots; i++) free(d->slot_names[i]);
    free(d->cands);
    for (int i = 0; i < d->nretired; i++) free(d->retired[i]); /* their candidates are d->cands' */
    free(d->retired);
    plan_cache_free(d->cache);
    free(d);
    op->deriv = NULL;
}
