/* Pieces of the YAML loader shared by yaml_load.c (op entries) and yaml_deriv.c
 * (their derivative keys). */
#ifndef OPREG_YAML_LOADER_H
#define OPREG_YAML_LOADER_H

#include "registry.h"

#include <yaml.h>

typedef struct loader {
    opr_ctx *ctx;
    yaml_document_t *doc;
    const char *text;   /* the whole file, to re-read flow sequences as expressions */
    const char *file;
} loader;

/* Fails with "file:line:col: " + fmt (one %s for tok) at node n. */
int yaml_fail_at(const loader *l, const yaml_node_t *n, int status, const char *fmt, const char *tok);
/* Checks the key of pair p of mapping map: a scalar, and not one of the earlier keys
 * (libyaml keeps both, and the second would silently replace, or leak, the first). */
int yaml_check_key(const loader *l, const yaml_node_t *map, const yaml_node_pair_t *p);
/* The text of a scalar node, NULL for other nodes. */
const char *yaml_scalar(const yaml_node_t *n);
/* Position of a scalar's first character (past the opening quote if any). */
expr_src yaml_scalar_src(const loader *l, const yaml_node_t *n);
/* A derivative key (`self`, `self, mat2`) of op. */
/* One derivative key of an op entry (fast: one under its `fast:` key). */
int yaml_deriv_key(const loader *l, opr_op *op, const yaml_node_t *k, const yaml_node_t *v, bool fast);
/* The op's `fast:` key: a mapping of derivative keys, the fast-mode variants. */
int yaml_fast_key(const loader *l, opr_op *op, const yaml_node_t *v);
/* The `forward:` key of a composite op (yaml_forward.c). */
int yaml_forward_key(const loader *l, opr_op *op, const yaml_node_t *k, const yaml_node_t *v);
/* The `reference:` key: the same syntax, run on the CPU only where no CPU kernel exists. */
int yaml_reference_key(const loader *l, opr_op *op, const yaml_node_t *k, const yaml_node_t *v);
/* The `jagged:` key: how the op takes jagged tensors (yaml_jagged.c). */
int yaml_jagged_key(const loader *l, opr_op *op, const yaml_node_t *v);
/* The `batch:` key: how the op runs on batched tensors of opr_vmap (yaml_batch.c). */
int yaml_batch_key(const loader *l, opr_op *op, const yaml_node_t *v);
/* The `alternative:` and `kernel_rate:` keys (yaml_alternative.c). */
int yaml_alternative_key(const loader *l, opr_op *op, const yaml_node_t *v);
int yaml_kernel_rate_key(const loader *l, opr_op *op, const yaml_node_t *v);
/* `tolerance:` (yaml_tolerance.c) */
int yaml_tolerance_key(const loader *l, opr_op *op, const yaml_node_t *v);
/* An `extends: NAME` entry (name_node: its value): candidates and tolerances added to
 * the op NAME defined earlier (yaml_extend.c). */
int yaml_extend_entry(const loader *l, const yaml_node_t *entry, const yaml_node_t *name_node);
/* The `samples:` list of an entry (samples.c). */
int samples_parse(const loader *l, opr_op *op, const yaml_node_t *n);

#endif
