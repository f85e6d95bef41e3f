/* What a candidate or a plan calls (gradcheck_plan.h). */
#include "gradcheck_plan.h"

#include <stdio.h>
#include <string.h>

typedef struct plan_find {
    const char *op;
    char *buf;
    size_t len;
} plan_find;

static void take_node(void *ud, const opr_node_info *info)
{
    plan_find *f = ud;
    if (!f->buf[0] && info->op && info->plan && !strcmp(info->op, f->op)) snprintf(f->buf, f->len, "%s", info->plan);
}

void gc_plan_of(const opr_tensor *out, const opr_op *op, char *buf, size_t len)
{
    buf[0] = '\0';
    plan_find f = {op->name, buf, len};
    if (out) opr_autograd_walk(out, take_node, &f);
}

uint64_t gc_plan_cands(const opr_op *op, const char *plan)
{
    const deriv_info *d = op->deriv;
    if (!plan[0] || d->ncands > 64) return ~0ull;
    uint64_t cands = 0;
    for (int i = 0; i < d->ncands; i++) {
        /* "[label]" or "[label for mat2]": the label whole, not a prefix of another */
        const char *label = d->cands[i].label;
        size_t n = strlen(label);
        for (const char *p = plan; (p = strstr(p, label)); p += n)
            if (p > plan && p[-1] == '[' && (p[n] == ']' || !strncmp(p + n, " for ", 5))) cands |= 1ull << i;
    }
    return cands ? cands : ~0ull;
}

/* Appends the names of the ops e calls (not the built-ins), once each. */
static void collect_calls(const expr *e, char *buf, size_t len)
{
    if (!e) return;
    if (e->kind == EXPR_CALL && e->builtin < 0 && e->name) {
        size_t n = strlen(e->name), used = strlen(buf);
        bool seen = false;
        for (const char *p = buf; (p = strstr(p, e->name)); p += n)
            if ((p == buf || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0')) seen = true;
        if (!seen && used + n + 3 < len) snprintf(buf + used, len - used, "%s%s", used ? ", " : "", e->name);
    }
    for (int i = 0; i < e->nargs; i++) collect_calls(e->args[i], buf, len);
}

void gc_helpers_of(const opr_op *op, uint64_t cands, uint32_t argmask, char *buf, size_t len)
{
    buf[0] = '\0';
    const deriv_info *d = op->deriv;
    for (int i = 0; i < d->ncands; i++) {
        const deriv_cand *c = &d->cands[i];
        if ((i < 64 && !((cands >> i) & 1)) || c->kernel || !(c->covers & argmask)) continue;
        for (int l = 0; l < c->nlets; l++) collect_calls(c->lets[l], buf, len);
        for (int p = 0; p < c->ncover; p++) collect_calls(c->formula[p], buf, len);
    }
}
