/* An `extends:` entry: more derivative candidates, or other tolerances, for an op
 * defined elsewhere (a built-in op), from a plugin's YAML or an OPREG_YAML_PATH file,
 * without editing the installed op files (docs/formulas.md, "Extending an op"):
 *
 *   - extends: native_layer_norm
 *     input, weight, bias:
 *       kernel: my_layer_norm_backward     # a fused backward kernel my plugin registers
 *       needs: {input: [input, weight, result1, result2], ...}
 *     tolerance: {f16: 2e-2}
 *
 * The keys are parsed as in the op's own entry, on a scratch op made from the same
 * schema (so the formulas resolve to the same slots), then moved to the op. An extension
 * adds: it cannot change what the op computes (forward, shape, samples, dtypes ...), and
 * a candidate it adds must not repeat one the op has (a formula for the same inputs, a
 * kernel name in use). A tolerance replaces the op's for the dtypes it names (the point
 * of giving one: a backend's kernels are legitimately less exact).
 *
 * The op may already have been called: dispatch and the planner read its candidates
 * without the lock, and a node recorded earlier may hold a plan naming them. So the
 * grown array replaces the old one only once it is filled, the old one is kept
 * (deriv_info.retired) until the context is freed, and the cached plans are dropped, so
 * later calls choose among all the candidates. Loading an extension while another
 * thread plans a call of the op is not supported (docs/formulas.md). */
#include "deriv.h"
#include "yaml_loader.h"

#include <stdlib.h>
#include <string.h>

/* The keys an extension may give: derivative keys (an input's name), fast and
 * tolerance. */
static bool deriv_key(const opr_op *op, const char *key)
{
    char first[64];
    snprintf(first, sizeof first, "%.*s", (int)strcspn(key, ", ["), key);
    for (int i = 0; i < op->nargs; i++)
        if (!strcmp(op->args[i].name, first)) return true;
    return false;
}

/* Refuses a new candidate whose label one of the op's has ("self", "fast self", "self,
 * weight (kernel k)"): records and plans name candidates by label. */
static int check_new_cands(const loader *l, const yaml_node_t *entry, const opr_op *target, const deriv_info *add)
{
    for (int i = 0; i < add->ncands; i++)
        for (int j = 0; j < target->deriv->ncands; j++)
            if (!strcmp(add->cands[i].label, target->deriv->cands[j].label)) {
                char msg[512];
                snprintf(msg, sizeof msg, "extends %s: the op already has a candidate '%s' (defined at %s:%d); an "
                         "extension adds candidates, it does not replace them (give a kernel entry, labelled by "
                         "its kernel's name)", target->name, add->cands[i].label, target->file ? target->file : "?",
                         target->line);
                return yaml_fail_at(l, entry, OPR_ERR_INVALID, "%s", msg);
            }
    uint32_t normal = target->deriv->differentiable | add->differentiable;
    if (add->fast_covers & ~normal) {
        int a = __builtin_ctz(add->fast_covers & ~normal);
        return yaml_fail_at(l, entry, OPR_ERR_PARSE, "fast variant for '%s' without a normal derivative formula",
                            target->args[a].name);
    }
    return OPR_OK;
}

/* Moves the candidates of add (parsed on the scratch op) to target, whose kernel slots
 * are registered first: all or nothing. Call with ctx->lock held. */
static int merge(opr_ctx *ctx, opr_op *target, deriv_info *add)
{
    deriv_info *d = target->deriv;
    int n0 = registry_count(ctx), rc = OPR_OK;
    for (int i = 0; !rc && i < add->ncands; i++)
        if (add->cands[i].kernel) {
            add->cands[i].kernel->backward_of = target;
            rc = registry_add(ctx, add->cands[i].kernel);
        }
    deriv_cand *grown = rc ? NULL : malloc((size_t)(d->ncands + add->ncands) * sizeof *grown);
    deriv_cand **retired = grown ? realloc(d->retired, (size_t)(d->nretired + 1) * sizeof *retired) : NULL;
    if (!grown || !retired) {
        free(grown);
        if (registry_count(ctx) > n0) registry_truncate(ctx, n0); /* the slots stay the scratch op's to free */
        for (int i = 0; i < add->ncands; i++)
            if (add->cands[i].kernel) add->cands[i].kernel->backward_of = NULL;
        return rc ? rc : opr_fail(OPR_ERR_NOMEM, "out of memory");
    }
    memcpy(grown, d->cands, (size_t)d->ncands * sizeof *grown);
    memcpy(grown + d->ncands, add->cands, (size_t)add->ncands * sizeof *grown);
    d->retired = retired;
    d->retired[d->nretired++] = d->cands;
    /* no reader runs meanwhile: an extension loads before other threads call the op
     * (docs/formulas.md, "Extending an op"); the old array is kept (retired) for plans
     * made before */
    d->cands = grown;
    d->ncands += add->ncands;
    d->differentiable |= add->differentiable;
    d->fast_covers |= add->fast_covers;
    add->ncands = 0; /* they are target's now */
    plan_cache_clear(d);
    return OPR_OK;
}

int yaml_extend_entry(const loader *l, const yaml_node_t *entry, const yaml_node_t *name_node)
{
    const char *name = yaml_scalar(name_node);
    if (!name || !name[0]) return yaml_fail_at(l, name_node, OPR_ERR_PARSE, "extends: expected an op's name%s", "");
    for (yaml_node_pair_t *p = entry->data.mapping.pairs.start; p < entry->data.mapping.pairs.top; p++) {
        const char *k = yaml_scalar(yaml_document_get_node(l->doc, p->key));
        if (k && !strcmp(k, "name"))
            return yaml_fail_at(l, entry, OPR_ERR_PARSE, "an entry has 'name' (a new op) or 'extends' (more for an "
                                "existing one), not both%s", "");
    }
    pthread_mutex_lock(&l->ctx->lock);
    opr_op *target = registry_find_exact(l->ctx, name);
    pthread_mutex_unlock(&l->ctx->lock);
    if (!target)
        return yaml_fail_at(l, name_node, OPR_ERR_INVALID, "extends: no op '%s' is defined (an extension names an op "
                            "of the op files or of YAML loaded before it)", name);
    if (target->backward_of)
        return yaml_fail_at(l, name_node, OPR_ERR_INVALID, "extends: '%s' is a fused backward kernel slot, not an op",
                            name);
    if (!target->deriv)
        return yaml_fail_at(l, name_node, OPR_ERR_INVALID, "extends: op '%s' has no derivative entries (it is not "
                            "differentiable): there is nothing to add candidates beside", name);
    /* the scratch op: the same schema, so the new formulas read the same slots */
    opr_op *scratch = calloc(1, sizeof *scratch);
    if (!scratch) return opr_fail(OPR_ERR_NOMEM, "out of memory");
    scratch->dtypes = target->dtypes;
    scratch->dtype_arg = scratch->device_arg = -1;
    expr_src src = yaml_scalar_src(l, name_node);
    int rc = schema_parse(scratch, target->schema, &src);
    for (yaml_node_pair_t *p = entry->data.mapping.pairs.start; !rc && p < entry->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = yaml_document_get_node(l->doc, p->key), *v = yaml_document_get_node(l->doc, p->value);
        if ((rc = yaml_check_key(l, entry, p))) break;
        const char *key = yaml_scalar(k);
        if (!strcmp(key, "extends")) continue;
        if (!strcmp(key, "tolerance")) rc = yaml_tolerance_key(l, scratch, v);
        else if (!strcmp(key, "fast")) rc = yaml_fast_key(l, scratch, v);
        else if (deriv_key(scratch, key)) rc = yaml_deriv_key(l, scratch, k, v, false);
        else {
            char msg[400];
            snprintf(msg, sizeof msg, "extends %s: '%s' would redefine the op (defined at %s:%d); an extension gives "
                     "derivative candidates (keys naming inputs, fast) and tolerance only", name, key,
                     target->file ? target->file : "?", target->line);
            rc = yaml_fail_at(l, k, OPR_ERR_INVALID, "%s", msg);
        }
    }
    pthread_mutex_lock(&l->ctx->lock);
    if (!rc && scratch->deriv) rc = check_new_cands(l, entry, target, scratch->deriv);
    if (!rc && scratch->deriv) rc = merge(l->ctx, target, scratch->deriv);
    if (!rc) { /* a tolerance replaces the op's for the dtypes it names */
        for (int dt = 0; dt < OPR_DTYPE_COUNT; dt++) {
            if (scratch->tol_rtol_set & OPR_DTYPE_BIT(dt)) target->tol_rtol[dt] = scratch->tol_rtol[dt];
            if (scratch->tol_atol_set & OPR_DTYPE_BIT(dt)) target->tol_atol[dt] = scratch->tol_atol[dt];
        }
        target->tol_rtol_set |= scratch->tol_rtol_set;
        target->tol_atol_set |= scratch->tol_atol_set;
    }
    pthread_mutex_unlock(&l->ctx->lock);
    op_free(scratch);
    return rc;
}
