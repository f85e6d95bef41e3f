/* Derivative entries of an op (the keys named after its inputs in the YAML), their
 * analysis (what each formula reads), costs, and the plans chosen from them.
 *
 * A candidate computes the gradients of one or more inputs:
 *   separate   `self: mm(grad, t(mat2))`            one input, one formula
 *   composite  `x1, x2: {let: {...}, x1: ..., x2: ...}`  several inputs sharing
 *              intermediates (`let`) that are computed once
 *   kernel     `self, mat2: {kernel: mm_backward, needs: {self: [mat2], ...}}`
 *              a native fused backward a backend may implement
 *   per item   `tensors[i]: narrow(grad, dim, cat_offset(tensors, dim, i), ...)`
 *              the gradient of each item of a Tensor[] argument: the formula runs
 *              once per item that requires grad, with `i` its index
 * A plan is a set of candidates that together cover exactly the inputs that need
 * grad; it saves the union of what the chosen formulas read.
 *
 * Candidates under the op's `fast:` key are the special-gradient fast mode's
 * variants: they skip the special-case subgradients (norm at 0, ties of max, ...).
 * They are eligible only for a node recorded in fast mode, and there they replace
 * the normal candidates of the inputs they cover. */
#ifndef OPREG_DERIV_H
#define OPREG_DERIV_H

#include "registry.h"

#define DERIV_MAX_LETS 4

/* Formula slots: the op's arguments, its outputs by name, then these. */
static inline int slot_result(const opr_op *op) { return op->nargs + op->nout; }
static inline int slot_grad(const opr_op *op) { return op->nargs + op->nout + 1; }
static inline int slot_grads(const opr_op *op) { return op->nargs + op->nout + 2; }   /* grads[k] */
static inline int slot_results(const opr_op *op) { return op->nargs + op->nout + 3; } /* results[k] */
static inline int slot_item(const opr_op *op) { return op->nargs + op->nout + 4; }    /* `i` of `tensors[i]:` */
static inline int slot_let0(const opr_op *op) { return op->nargs + op->nout + 5; }
#define DERIV_MAX_SLOTS (OPR_MAX_ARGS + OPR_MAX_OUTS + 5 + DERIV_MAX_LETS)

typedef struct deriv_cand {
    char *label;                      /* as written: "self", "self, mat2" */
    bool fast;                        /* under `fast:`: for nodes recorded in fast mode */
    bool per_item;                    /* `tensors[i]:` covers the items of a Tensor[] argument */
    int ncover;
    int cover[OPR_MAX_ARGS];          /* input arg indices, in the order written */
    uint32_t covers;                  /* bit per input arg */
    /* composite (and separate): one formula per covered input, shared lets */
    expr *formula[OPR_MAX_ARGS];      /* by cover position */
    expr *lets[DERIV_MAX_LETS];
    int nlets;
    /* kernel entry */
    struct opr_op *kernel;            /* the backward kernel slot ("mm_backward") */
    expr *flops;                      /* kernel cost, all outputs (or NULL) */
    expr *out_flops[OPR_MAX_ARGS];    /* kernel cost per output, by cover position */
    /* analysis: slots read as tensors / only as metadata, per output and by lets */
    uint64_t out_needs[OPR_MAX_ARGS];
    uint64_t out_meta[OPR_MAX_ARGS];
    uint64_t let_needs, let_meta;
    /* formulas (bit per cover position) and lets holding a select whose branch the
     * call's arguments decide: what they read depends on the call (deriv_reads) */
    uint32_t call_select;
    bool lets_call_select;
} deriv_cand;

typedef struct deriv_info {
    deriv_cand *cands;
    int ncands;
    uint32_t differentiable;          /* inputs some normal candidate covers */
    uint32_t fast_covers;             /* inputs some fast candidate covers */
    char *slot_names[DERIV_MAX_SLOTS];/* borrowed names, for messages and `opreg plan` */
    int nslots;
    struct plan_cache *cache;
    int forced;                       /* candidate forced by tests, -1 = choose by cost */
    deriv_cand **retired;             /* arrays replaced by an `extends:` entry (yaml_extend.c): */
    int nretired;                     /* readers may still hold them, freed with the op */
} deriv_info;

/* A chosen plan for (op, requires-grad mask, device type, input shapes). */
typedef struct deriv_plan {
    uint32_t mask;                    /* inputs whose gradient is computed */
    bool fast;                        /* planned for a node recorded in fast mode */
    int nchosen;
    int chosen[OPR_MAX_ARGS];         /* candidate indices */
    uint32_t chosen_mask[OPR_MAX_ARGS]; /* what each chosen candidate computes */
    uint64_t save;                    /* slots saved as tensors */
    uint64_t save_meta;               /* slots kept as metadata only */
    double cost_ns;                   /* estimated */
    uint64_t saved_bytes;             /* bytes of the saved tensors */
} deriv_plan;

/* Parsed from YAML by yaml_load.c; analysed here. Returns a status with a
 * file:line:column message. */
int deriv_add_formula(opr_op *op, deriv_cand *c, int cover_pos, expr *e, const char **names, int nnames,
                      const expr_src *src);
void deriv_free(opr_op *op);

/* Resolves op names called in formulas and kernel slots (lazily, since formulas may
 * call ops defined in later files). Call with the registry lock held. */
int deriv_link(opr_ctx *ctx, opr_op *op);

/* Links the op calls of e (a formula of op, or a composite op's forward) to the ops
 * they name and checks that each binds (below); `what` says whose expression it is in
 * messages ("derivative of mm for 'self'", "forward of cdist_mm"). With known_only,
 * calls of ops not defined yet are left alone and nothing is linked (load time).
 * Call with the registry lock held. */
int deriv_link_calls(opr_ctx *ctx, const opr_op *op, const char *what, expr *e, bool known_only);

/* At load time: checks that the calls in e to ops already defined bind to them (every
 * argument without a default given, no unknown keyword, none twice); the others are
 * checked when linked. Takes the registry lock. */
int deriv_check_calls(opr_ctx *ctx, const opr_op *op, const char *label, const expr *e);

/* Maps the arguments of a formula's call to the callee's parameters: pos[p] is the
 * index of the call argument bound to parameter p, or -1 (use its default). */
int deriv_bind(const opr_op *callee, const expr *call, int *pos);

/* What candidate c's formula for cover position cover_pos (-1: its lets) reads, added
 * to needs (as tensors) and meta (metadata only). With slots (the call's arguments and
 * outputs as metadata, op->nargs + op->nout of them), a select whose condition reads
 * only those counts only the branch it takes; without, both (the formula's static
 * analysis). */
void deriv_reads(const opr_op *op, const deriv_cand *c, int cover_pos, const mval *slots, uint64_t *needs,
                 uint64_t *meta);

int plan_cache_new(deriv_info *d);
void plan_cache_free(struct plan_cache *cache);
/* Drops cached plans (after forcing a candidate). */
void plan_cache_clear(deriv_info *d);

/* Flags of a plan: PLAN_FAST, the node is recorded in fast mode (fast candidates
 * first, see above); PLAN_FORMULAS_ONLY, no fused backward kernel (the node holds
 * batched tensors of opr_vmap, whose views a kernel cannot read). */
#define PLAN_FAST 1u
#define PLAN_FORMULAS_ONLY 2u
/* Internal to the cache: the saves of every branch of the formulas' selects, for a
 * plan shared by calls its key cannot tell apart. */
#define PLAN_STATIC_SAVES 4u

/* The plan for a call; cached. slots: an array of DERIV_MAX_SLOTS whose first
 * op_nslots(op) hold the op's arguments and outputs as metadata; the planner writes the
 * ones after them (the lets of the candidates it costs). Returns NULL with a message on
 * failure. */
const deriv_plan *plan_get(const opr_op *op, uint32_t mask, opr_device dev, const mval *slots, unsigned flags);

/* Estimated time in ns of one forward call of op on device dev, on the arguments'
 * metadata (args: op->nargs values): its kernel, with the flops counted at kernel_rate
 * times the device's GEMM rate, or, for a composite op, the ops of its forward. */
int plan_forward_cost(const opr_op *op, const mval *args, opr_device dev, double kernel_rate, double *ns);

/* A kernel call made of metadata alone, for a kernel's supports and cost_ns (ABI 2.2)
 * before anything runs: every data pointer NULL, every view contiguous, host and
 * host_call NULL (kernel_query.c). */
#define KQUERY_MAX_ARGS (2 * OPR_MAX_OUTS + OPR_MAX_ARGS)
typedef struct kquery {
    opr_kernel_arg args[KQUERY_MAX_ARGS];
    opr_tensor_view views[KQUERY_MAX_ARGS];
    int64_t strides[KQUERY_MAX_ARGS][OPR_MAX_DIMS];
    const opr_kernel_arg *arg_ptrs[KQUERY_MAX_ARGS];
    opr_tensor_view outv[OPR_MAX_ARGS];
    int64_t out_strides[OPR_MAX_ARGS][OPR_MAX_DIMS];
    opr_tensor_view *out_ptrs[OPR_MAX_ARGS];
    opr_kernel_call call;
} kquery;
/* q->call as kernel k of op would get a forward call with these argument slots and
 * outputs; false when an argument is a Tensor[] (not asked then). */
bool kquery_forward(kquery *q, const opr_op *op, const mval *slots, const opr_meta *const *outs, opr_device dev,
                    const dtype_kernel *k);
/* q->call as fused backward kernel k of candidate c would get it computing the
 * gradients of the inputs in want (slots: the op's arguments and outputs); false for
 * an op returning Tensor[]. */
bool kquery_backward(kquery *q, const opr_op *op, const deriv_cand *c, uint32_t want, const mval *slots,
                     opr_device dev, const dtype_kernel *k);

/* Writes a human-readable account of every candidate set for the given shapes. */
int plan_explain(const opr_op *op, uint32_t mask, opr_device dev, const mval *slots, unsigned flags, char *buf,
                 size_t len);

#endif
