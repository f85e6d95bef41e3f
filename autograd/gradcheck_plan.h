/* What a derivative candidate or the plan chosen by cost calls, for opr_gradcheck's
 * attribution (gradcheck_plan.c): a failure of the plan is held to what the plan ran,
 * never to candidates it did not choose. */
#ifndef OPREG_GRADCHECK_PLAN_H
#define OPREG_GRADCHECK_PLAN_H

#include "autograd.h"

/* The plan the autograd node of out (made by op) chose, as opr_node_info.plan gives it
 * ("[self] + [mat2]"), into buf; "" when out has no such node. */
void gc_plan_of(const opr_tensor *out, const opr_op *op, char *buf, size_t len);

/* The candidates of op a plan text names, as a bit per candidate index; all bits when
 * plan is "" or names none it can tell (the caller then blames as before). */
uint64_t gc_plan_cands(const opr_op *op, const char *plan);

/* The ops (not built-ins) the formula candidates in cands that cover an argument of
 * argmask call, ", "-joined into buf, once each. */
void gc_helpers_of(const opr_op *op, uint64_t cands, uint32_t argmask, char *buf, size_t len);

#endif
