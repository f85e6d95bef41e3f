/* Analysis of derivative formulas: which slots each formula reads as tensors (these
 * are saved) and which only through built-ins such as size() (only metadata is kept);
 * linking the ops that formulas call. */
#include "deriv.h"

#include <stdlib.h>
#include <string.h>

/* Maps `result` to output 0 and drops slots that are never saved (grads, lets). */
static uint64_t saved_bit(const opr_op *op, int slot)
{
    if (slot == slot_result(op)) return 1ull << op->nargs;
    if (slot < op->nargs) return op->args[slot].type == ARG_TENSOR ? 1ull << slot : 0; /* scalars are kept anyway */
    if (slot < op->nargs + op->nout) return 1ull << slot;
    return 0;
}

static void analyze(const opr_op *op, const expr *e, bool meta_only, uint64_t *needs, uint64_t *meta)
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
        break;
    case EXPR_CALL:
        for (int i = 0; i < e->nargs; i++)
            analyze(op, e->args[i], expr_builtin_reads_meta(e->builtin), needs, meta);
        return;
    default:
        break;
    }
    for (int i = 0; i < e->nargs; i++) analyze(op, e->args[i], false, needs, meta);
}

int deriv_add_formula(opr_op *op, deriv_cand *c, int cover_pos, expr *e, const char **names, int nnames,
                      const expr_src *src)
{
    int rc = expr_resolve_formula(e, names, nnames, src);
    if (rc) return rc;
    uint64_t needs = 0, meta = 0;
    analyze(op, e, false, &needs, &meta);
    if (cover_pos < 0) { /* a shared `let` */
        c->let_needs |= needs;
        c->let_meta |= meta;
    } else {
        c->formula[cover_pos] = e;
        c->out_needs[cover_pos] = needs;
        c->out_meta[cover_pos] = meta;
    }
    return OPR_OK;
}

static int link_expr(opr_ctx *ctx, const opr_op *op, const char *label, expr *e)
{
    if (e->kind == EXPR_CALL && e->builtin < 0 && !e->callee) {
        e->callee = registry_find(ctx, e->name);
        if (!e->callee)
            return opr_fail(OPR_ERR_NOT_FOUND, "%s:%d:%d: derivative of %s for '%s' calls unknown op '%s'", op->file,
                            e->line, e->col, op->name, label, e->name);
    }
    for (int i = 0; i < e->nargs; i++) {
        int rc = link_expr(ctx, op, label, e->args[i]);
        if (rc) return rc;
    }
    return OPR_OK;
}

int deriv_link(opr_ctx *ctx, opr_op *op)
{
    deriv_info *d = op->deriv;
    for (int i = 0; d && i < d->ncands; i++) {
        deriv_cand *c = &d->cands[i];
        for (int k = 0; k < c->ncover; k++)
            if (c->formula[k] && link_expr(ctx, op, c->label, c->formula[k])) return OPR_ERR_NOT_FOUND;
        for (int k = 0; k < c->nlets; k++)
            if (link_expr(ctx, op, c->label, c->lets[k])) return OPR_ERR_NOT_FOUND;
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
    }
    for (int i = op->nargs + op->nout; i < d->nslots; i++) free(d->slot_names[i]);
    free(d->cands);
    plan_cache_free(d->cache);
    free(d);
    op->deriv = NULL;
}
