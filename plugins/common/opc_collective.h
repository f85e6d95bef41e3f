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

/* all_to_all_single's split list (a kernel argument: an int list of size entries, or
 * empty for size(self, 0) / size rows each) into rows[size]; an input list must add up
 * to dim0. 0, or -1 with the reason in why. */
static inline int opc_coll_split_rows(const opr_kernel_arg *a, const char *name, int input, int64_t dim0, int size,
                                      int64_t *rows, char *why, size_t why_len)
{
    if (a->kind != OPR_ARG_INT_LIST || a->u.il.n == 0) {
        if (dim0 % size) {
            snprintf(why, why_len, "%s is empty and size(self, 0) = %lld is not a multiple of the group's %d members",
                     name, (long long)dim0, size);
            return -1;
        }
        for (int r = 0; r < size; r++) rows[r] = dim0 / size;
        return 0;
    }
    if (a->u.il.n != size) {
        snprintf(why, why_len, "%s has %d sizes; the group has %d members", name, (int)a->u.il.n, size);
        return -1;
    }
    int64_t total = 0;
    for (int r = 0; r < size; r++) {
        rows[r] = a->u.il.items[r];
        if (rows[r] < 0 || rows[r] > 0x7fffffff) {
            snprintf(why, why_len, "%s[%d] = %lld is not a number of rows", name, r, (long long)rows[r]);
            return -1;
        }
        total += rows[r];
    }
    if (input && total != dim0) {
        snprintf(why, why_len, "%s adds up to %lld rows; self has %lld", name, (long long)total, (long long)dim0);
        return -1;
    }
    return 0;
}

/* The entries of one member's record for opc_coll_splits_agree: valid, its input
 * split, its output split. */
#define OPC_COLL_SPLIT_RECORD(size) (2 * (size) + 1)

/* This member's record (own_error: "" when its lists were valid, else why not). */
static inline void opc_coll_split_record(const int64_t *in, const int64_t *out, int size, const char *own_error,
                                         int64_t *rec)
{
    rec[0] = own_error[0] ? 0 : 1;
    for (int r = 0; r < size; r++) {
        rec[1 + r] = own_error[0] ? 0 : in[r];
        rec[1 + size + r] = own_error[0] ? 0 : out[r];
    }
}

/* Every member's record gathered (all, in rank order): the members agree when each
 * one's lists were valid and what r sends to s is what s expects from r. Every member
 * reads the same records, so all of them fail alike, naming the first member at
 * fault: 0, or -1 with "WHAT: ..." in why. */
static inline int opc_coll_splits_agree(const int64_t *all, int size, const char *own_error, const char *what,
                                        char *why, size_t why_len)
{
    const int n = OPC_COLL_SPLIT_RECORD(size);
    if (own_error[0]) {
        snprintf(why, why_len, "%s: %s", what, own_error);
        return -1;
    }
    for (int r = 0; r < size; r++)
        if (!all[(size_t)r * n]) {
            snprintf(why, why_len, "%s: rank %d's split sizes are not valid (it says why)", what, r);
            return -1;
        }
    for (int r = 0; r < size; r++)
        for (int s = 0; s < size; s++) {
            const int64_t sent = all[(size_t)r * n + 1 + s], expected = all[(size_t)s * n + 1 + size + r];
            if (sent != expected) {
                snprintf(why, why_len, "%s: rank %d sends %lld rows to rank %d, which expects %lld from it", what, r,
                         (long long)sent, s, (long long)expected);
                return -1;
            }
        }
    return 0;
}

#endif
