/* Running expressions on real tensors: every op call of the expression goes through
 * opr_call. Shared by the backward formulas (autograd/formula_run.c) and the forward
 * expressions of composite ops (composite.c), which the registry runs itself. */
#ifndef OPREG_EXPR_RUN_H
#define OPREG_EXPR_RUN_H

#include "registry.h"

/* Intermediates one run may hold: a composite computing indices and weights per dim
 * (upsample_bilinear2d_backward) makes about 70, each number passed as a tensor one. */
#define EXPR_RUN_MAX_TEMPS 128
#define EXPR_RUN_MAX_KNOWN (OPR_MAX_ARGS + 3 * OPR_MAX_OUTS)

typedef struct expr_run {
    opr_ctx *ctx;
    opr_device dev;
    opr_dtype dt;             /* dtype for numbers passed where a tensor goes */
    opr_tensor *known[EXPR_RUN_MAX_KNOWN]; /* tensors the slots point at (borrowed) */
    int nknown;
    opr_tensor *const *known_list;         /* more of them, any number (a list op's piece */
    int nknown_list;                       /* gradients, `grads[k]`); borrowed, or NULL */
    opr_tensor *temps[EXPR_RUN_MAX_TEMPS]; /* owned results of calls */
    int ntemps;
} expr_run;

/* Starts a run on dev; numbers passed where a callee takes a Tensor become 0-d
 * tensors of dt. */
void expr_run_init(expr_run *r, opr_ctx *ctx, opr_device dev, opr_dtype dt);
/* The tensor behind a metadata pointer, if it is a real tensor of this run (a slot
 * kept only as metadata has none). */
opr_tensor *expr_run_tensor(const expr_run *r, const opr_meta *m);
/* Takes ownership of t until expr_run_done (releases it on failure). */
int expr_run_keep(expr_run *r, opr_tensor *t);
/* Evaluates e; op calls are linked (call->callee) and run through opr_call. */
int expr_run_eval(expr_run *r, const expr *e, const mval *slots, mval *out);
/* Releases the results of the run's calls. */
void expr_run_done(expr_run *r);
/* Releases the results kept after the first `mark` (an earlier r->ntemps): a formula
 * run once per item of a list frees each item's intermediates before the next. */
void expr_run_rewind(expr_run *r, int mark);

#endif
