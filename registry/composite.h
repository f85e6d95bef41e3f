/* Composite ops: ops defined in YAML by a `forward:` expression over other ops instead
 * of a kernel; and the `reference:` of an op with kernels, the same kind of expression
 * the CPU runs for it where no plugin gives the CPU a kernel. They run wherever their parts run (each part through opr_call). Without
 * derivative entries autograd records the parts; with them the call is one node with
 * the op's own formulas (docs/formulas.md, "Composite ops"). */
#ifndef OPREG_COMPOSITE_H
#define OPREG_COMPOSITE_H

#include "registry.h"

#define COMPOSITE_MAX_LETS 4
/* Composite ops calling composite ops: deeper than this at run time is refused (cycles
 * are refused when an op is added; this bounds the stack whatever happens). */
#define COMPOSITE_MAX_DEPTH 64

typedef struct composite_def {
    expr *lets[COMPOSITE_MAX_LETS];   /* `let:` intermediates, computed in order */
    char *let_names[COMPOSITE_MAX_LETS];
    int nlets;
    expr *result;                     /* the op's output */
    char *text;                       /* the forward as written, for opreg plan */
    int line, col;                    /* of the `forward` key */
    _Atomic bool linked;              /* calls resolved (lazily: parts may come later) */
} composite_def;

/* The `forward:` key of an entry (yaml_forward.c; loader in yaml_loader.h). */
void composite_free(opr_op *op);

/* Refuses op (not yet added) when its forward calls itself, directly or through
 * composite ops already in the registry; an error with file:line:col of the call.
 * Call with ctx->lock held, just before the op is added (so two loads cannot close a
 * cycle between them). */
int composite_check_cycle(opr_ctx *ctx, const opr_op *op);

/* Resolves the ops the forward calls (once; takes the registry lock the first time):
 * an unknown op is an error naming it and its position. */
int composite_link(const opr_op *op);

/* Runs op's forward for a call that dispatch has checked (tensors[i]: argument i or
 * NULL; slots: the arguments' metadata; common: the dtype T). Checks that the result
 * has the shape and dtype the op's entry gives. With derivative entries the parts run
 * with grad mode off and, when `record`, the call is recorded as one node. *out gets a
 * new reference. */
int composite_call(const opr_op *op, opr_tensor *const *tensors, const mval *slots, opr_device dev,
                   opr_dtype common, bool record, opr_tensor **out);

/* Runs op's `reference:` on the CPU, as composite_call runs a forward: for a call
 * dispatch has checked on the CPU, which has no kernel for the op. */
int composite_call_reference(const opr_op *op, opr_tensor *const *tensors, const mval *slots, opr_dtype common,
                             bool record, opr_tensor **out);

/* Whether every op the forward (on the CPU without a CPU kernel: the reference) calls (through nested composites too) runs on
 * device_type: has a kernel there or is a host view. */
bool composite_runs_on(const opr_op *op, int device_type);

#endif
