/* What the MPI and the NCCL kernels of the collectives share: their arguments' checks,
 * the output shapes of all_gather and reduce_scatter, and the check that every member
 * of a group is about to run the same collective. Engines leave members that call different
 * collectives (or the same one on other shapes) undefined: a hang, a truncation, wrong
 * values. So each member first gathers every member's signature (a short text of the
 * op, its arguments but the group, and self's dtype and shape), and all of them fail,
 * naming the first member that differs. C and C++. */
#ifndef OPREG_OPC_COLLECTIVE_H
#define OPREG_OPC_COLLECTIVE_H

#include <opreg/plugin.h>
#include <opreg/plugin_util.h>

#include <stdio.h>
#include <string.h>

/* Bytes of one signature, NUL-padded (a longer one is cut: shapes that differ past it
 * go unnoticed). */
#define OPC_COLL_SIG 64

/* The signature of call into sig (OPC_COLL_SIG bytes, zeroed first): "all_reduce(sum)
 * f32 [6, 2]". The group is its last argument (group_arg), left out: ids are local.
 * any_rows: dim 0 is written "*" (all_to_all_single's members may hold different
 * numbers of rows); int lists are left out (its split sizes differ by member). */
static inline void opc_coll_describe_rows(const opr_kernel_call *call, int group_arg, const opr_tensor_view *self,
                                          int any_rows, char *sig)
{
    memset(sig, 0, OPC_COLL_SIG);
    int n = snprintf(sig, OPC_COLL_SIG, "%s(", call->op);
    for (int i = 1; i < group_arg && n < OPC_COLL_SIG; i++) {
        const opr_kernel_arg *a = call->args[i];
        const char *sep = i > 1 ? ", " : "";
        if (a->kind == OPR_ARG_STRING)
            n += snprintf(sig + n, OPC_COLL_SIG - (size_t)n, "%s%s", sep, a->u.s);
        else if (a->kind == OPR_ARG_INT)
            n += snprintf(sig + n, OPC_COLL_SIG - (size_t)n, "%s%lld", sep, (long long)a->u.i);
    }
    if (n < OPC_COLL_SIG) n += snprintf(sig + n, OPC_COLL_SIG - (size_t)n, ") %s [", opu_dtype_name(self->dtype));
    for (int d = 0; d < self->ndim && n < OPC_COLL_SIG; d++) {
        if (d == 0 && any_rows) n += snprintf(sig + n, OPC_COLL_SIG - (size_t)n, "*");
        else n += snprintf(sig + n, OPC_COLL_SIG - (size_t)n, "%s%lld", d ? ", " : "", (long long)self->shape[d]);
    }
    if (n < OPC_COLL_SIG) snprintf(sig + n, OPC_COLL_SIG - (size_t)n, "]");
}

/* The signature with every dim (opc_coll_describe_rows without any_rows). */
static inline void opc_coll_describe(const opr_kernel_call *call, int group_arg, const opr_tensor_view *self,
                                     char *sig)
{
    opc_coll_describe_rows(call, group_arg, self, 0, sig);
}

/* all: size gathered signatures in rank order. -1 when each equals mine; else the
 * first rank that differs, with "WHAT: the members called different collectives: ..."
 * in why. */
static inline int opc_coll_mismatch(const char *all, int size, const char *mine, const char *what, char *why,
                                    size_t why_len)
{
    for (int r = 0; r < size; r++) {
        const char *theirs = all + (size_t)r * OPC_COLL_SIG;
        if (memcmp(theirs, mine, OPC_COLL_SIG)) {
            snprintf(why, why_len, "%s: the members called different collectives: this rank %.*s, rank %d %.*s", what,
                     OPC_COLL_SIG, mine, r, OPC_COLL_SIG, theirs);
            return r;
        }
    }
    return -1;
}

/* The root argument (arg 1 of broadcast_from and reduce_to: a group rank) of a group of size members
 * into root; 0, or -1 with the reason in why. */
static inline int opc_coll_root(const opr_kernel_call *call, int size, int *root, char *why, size_t why_len)
{
    const int64_t r = call->args[1]->u.i;
    if (r < 0 || r >= size) {
        snprintf(why, why_len, "root %lld is not a member (the group has %d)", (long long)r, size);
        return -1;
    }
    *root = (int)r;
    return 0;
}

/* The output shape of all_gather (gather: dim 0 times size) or reduce_scatter (dim 0
 * divided by size, which must divide it) of self into shape (self->ndim entries); 0, or
 * -1 with the reason in why. */
static inline int opc_coll_dim0_shape(const opr_tensor_view *self, int size, int gather, int64_t *shape, char *why,
                                      size_t why_len)
{
    if (!gather && self->shape[0] % size) {
        snprintf(why, why_len, "size(self, 0) = %lld is not a multiple of the group's %d members",
                 (long long)self->shape[0], size);
        return -1;
    }
    memcpy(shape, self->shape, sizeof(int64_t) * (size_t)self->ndim);
    shape[0] = gather ? shape[0] * size : shape[0] / size;
    return 0;
}

#endif
