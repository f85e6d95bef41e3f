/* The check that every member of a group is about to run the same collective, shared
 * by the MPI and the NCCL kernels. Engines leave members that call different
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
 * f32 [6, 2]". The group is its last argument (group_arg), left out: ids are local. */
static inline void opc_coll_describe(const opr_kernel_call *call, int group_arg, const opr_tensor_view *self,
                                     char *sig)
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
    for (int d = 0; d < self->ndim && n < OPC_COLL_SIG; d++)
        n += snprintf(sig + n, OPC_COLL_SIG - (size_t)n, "%s%lld", d ? ", " : "", (long long)self->shape[d]);
    if (n < OPC_COLL_SIG) snprintf(sig + n, OPC_COLL_SIG - (size_t)n, "]");
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

#endif
