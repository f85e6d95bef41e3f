/* The expression language of op definitions: shapes, checks, costs and (later)
 * derivative formulas. Parsed once at load time into a small tree; evaluated on
 * metadata (shapes, scalars) at call time. */
#ifndef OPREG_EXPR_H
#define OPREG_EXPR_H

#include "../core/core.h"

#define OPR_MAX_ARGS 12 /* arguments of an op (and of a call in an expression) */
/* Deepest nesting an expression may have (brackets, calls, operators): parsing,
 * resolving, evaluating and freeing recurse over the tree, so its height is what bounds
 * their stack use. Real formulas nest a handful of levels. */
#define EXPR_MAX_DEPTH 256

typedef enum expr_kind {
    EXPR_INT, EXPR_FLOAT, EXPR_BOOL, EXPR_NONE, EXPR_STR,
    EXPR_NAME,   /* an argument or `result` */
    EXPR_CALL,   /* f(a, b, key=c) */
    EXPR_LIST,   /* [a, b] */
    EXPR_BINARY, /* a op b */
    EXPR_UNARY,  /* -a, !a */
    EXPR_INDEX   /* a[b] */
} expr_kind;

/* Operators of EXPR_BINARY / EXPR_UNARY. */
enum { EOP_ADD = 1, EOP_SUB, EOP_MUL, EOP_DIV, EOP_MOD, EOP_EQ, EOP_NE, EOP_LT, EOP_LE,
       EOP_GT, EOP_GE, EOP_AND, EOP_OR, EOP_NEG, EOP_NOT };

typedef struct expr {
    expr_kind kind;
    int line, col;          /* where it starts in its file */
    int op;                 /* EOP_* for BINARY and UNARY */
    int64_t i;
    double d;
    bool b;
    char *name;             /* NAME, CALL callee, STR text; in the node's own block */
    struct expr **args;     /* CALL arguments, LIST items, operands */
    char **kwnames;         /* CALL: keyword of each argument, NULL if positional; NULL if none has one */
    int nargs, cap;         /* cap: room in args (and kwnames) */
    int height;             /* levels of nodes below this one (0 for a leaf) */
    int slot;               /* NAME: resolved slot (see expr_resolve) */
    int builtin;            /* CALL: built-in function id, -1 if not a built-in */
    struct opr_op *callee;  /* CALL in a derivative formula: the op it calls */
} expr;

/* Where an expression came from, for error messages. */
typedef struct expr_src {
    const char *file;
    int line, col;          /* position of the first character of `text` */
} expr_src;

/* Parses `text`. On error returns NULL with "file:line:col: message near 'token'" in
 * opr_last_error, status OPR_ERR_PARSE (nesting deeper than EXPR_MAX_DEPTH included),
 * or OPR_ERR_NOMEM when an allocation failed: callers pass on opr_error_status(). */
expr *expr_parse(const char *text, const expr_src *src);
void expr_free(expr *e);

/* Names an expression may read: argument names in schema order, then `result` names.
 * Resolves every NAME to its slot and every CALL to a built-in; reports unknown
 * names and built-ins (with their position). */
int expr_resolve(expr *e, const char *const *names, int nnames, const expr_src *src);
/* Same for derivative formulas, where calls may also name ops (linked later). */
int expr_resolve_formula(expr *e, const char *const *names, int nnames, const expr_src *src);


/* ------------------------------------------------------------------ evaluation */

/* MV_TENSORS: a list of real tensors (a Tensor[] argument of a call, `grads`); MV_METAS:
 * the same seen only through its items' metadata (a Tensor[] argument as a graph node
 * keeps it: item metadata without the tensors). */
typedef enum mval_kind { MV_NONE, MV_INT, MV_FLOAT, MV_BOOL, MV_LIST, MV_TENSOR, MV_TENSORS, MV_STR, MV_METAS,
               MV_FLIST /* a float list (float[] arguments): u.fl */ } mval_kind;

/* A value during metadata evaluation. Tensors are seen through their metadata only. */
typedef struct mval {
    mval_kind k;
    int n;                           /* LIST length, TENSORS count */
    union {
        int64_t i;
        double d;
        bool b;
        int64_t l[OPR_MAX_DIMS];
        double fl[OPR_MAX_DIMS];
        const opr_meta *t;
        opr_tensor *const *ts;
        const opr_meta *ms;
        const char *s;
    } u;
} mval;

/* Evaluates e with slots[k] the value of slot k. On error returns a status with the
 * message in opr_last_error. */
int expr_eval(const expr *e, const mval *slots, mval *out);

/* Calls that are not built-ins (ops, in derivative formulas) go to a hook: it gets
 * the call node (for keyword names) and its evaluated arguments. */
typedef struct expr_hooks {
    void *ud;
    int (*call)(void *ud, const expr *call, const mval *args, int nargs, mval *out);
} expr_hooks;
int expr_eval_with(const expr *e, const mval *slots, const expr_hooks *h, mval *out);

/* True for built-ins, which read only the metadata of their tensor arguments: a
 * tensor seen only through them is not saved. */
bool expr_builtin_reads_meta(int builtin);
/* True for select(cond, a, b), whose value is one of its arguments as it is. */
bool expr_builtin_is_select(int builtin);
/* Whether select takes its first branch on v: true, nonzero, not None; lists,
 * strings and tensors count as true. */
bool expr_truthy(const mval *v);

/* Item k of a tensor list (MV_TENSORS or MV_METAS) as metadata: NULL for a None item
 * (`grads[k]` of an output that got no gradient, a None of a Tensor?[], which a node
 * keeps as ndim -1). k must be in range. */
static inline const opr_meta *mval_item(const mval *l, int k)
{
    if (l->k == MV_METAS) return l->u.ms[k].ndim < 0 ? NULL : &l->u.ms[k];
    return l->u.ts[k] ? &l->u.ts[k]->m : NULL;
}
static inline bool mval_is_list(const mval *v) { return v->k == MV_TENSORS || v->k == MV_METAS; }

/* The metadata view of a kernel argument (tensors are not converted). */
void mval_of_kernel_arg(const opr_kernel_arg *k, mval *m);
/* The other way, for a value that is not a tensor (a number, bool, int list, string
 * or none: *k refers to m's list and string); false, with *k OPR_ARG_NONE, for a
 * tensor or a tensor list. */
bool kernel_arg_of_mval(const mval *m, opr_kernel_arg *k);

/* The built-ins of the convolution, pooling and normalization shapes (expr_conv.c). */
int expr_bi_conv_shape(const mval *a, int n, mval *out);
int expr_bi_conv_transpose_padding(const mval *a, int n, mval *out);
int expr_bi_pool_shape(const mval *a, int n, mval *out);
int expr_bi_dims_except(const mval *a, int n, mval *out);
int expr_bi_range(const mval *a, int n, mval *out);
int expr_bi_channel_shape(const mval *a, int n, mval *out);
/* The built-ins of the padding and resampling shapes (expr_resample.c). */
int expr_bi_pad_shape(const mval *a, int n, mval *out);
int expr_bi_neg_ints(const mval *a, int n, mval *out);
/* expr_aten_shape.c: reduce_perm, reduce_flat, list_sum, repeat_shape */
int expr_bi_reduce_perm(const mval *a, int n, mval *out);
int expr_bi_reduce_flat(const mval *a, int n, mval *out);
int expr_bi_list_sum(const mval *a, int n, mval *out);
int expr_bi_repeat_shape(const mval *a, int n, mval *out);
/* expr_index_shape.c: index_shape(self, indices), the result shape of index.Tensor */
int expr_bi_index_shape(const mval *a, int n, mval *out);

/* expr_geometry.c: strides, storage_offset, min_storage_size, maybe_overlap (a
 * tensor's layout in its storage, for as_strided's gradient) */
int expr_bi_strides(const mval *a, int n, mval *out);
int expr_bi_storage_offset(const mval *a, int n, mval *out);
int expr_bi_min_storage_size(const mval *a, int n, mval *out);
int expr_bi_maybe_overlap(const mval *a, int n, mval *out);

/* Appends the source-like text of e to buf (for error messages). */
void expr_format(const expr *e, char *buf, size_t len);

/* Broadcast of two shapes (right-aligned); false when incompatible. */
bool shape_broadcast(const int64_t *a, int na, const int64_t *b, int nb, int64_t *out, int *nout);

#endif
