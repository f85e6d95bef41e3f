/* plugins/common (prefix opc_, C11 and C++17; see opc_blas_layout.h): the siblings of
 * native_batch_norm that ATen's later exports name (_native_batch_norm_legit.no_stats,
 * _native_batch_norm_legit_no_training) run native_batch_norm's own kernel: this maps
 * their arguments onto its (input, weight, bias, running_mean, running_var, training,
 * momentum, eps), so no backend keeps a second copy of the batch norm kernel.
 * (_native_batch_norm_legit itself has native_batch_norm's arguments and is registered
 * with the kernel as it is.) */
#ifndef OPREG_OPC_BATCH_NORM_LEGIT_H
#define OPREG_OPC_BATCH_NORM_LEGIT_H

#include <opreg/plugin.h>

#include <stdbool.h>
#include <string.h>

/* Storage of the rewritten call: the filled-in arguments and the argument table. */
typedef struct opc_bn_legit {
    opr_kernel_arg none, no_train;
    const opr_kernel_arg *args[8];
    opr_kernel_call call;
} opc_bn_legit;

/* Fills *m with c rewritten as a native_batch_norm call: no_stats (6 args: input,
 * weight, bias, training, momentum, eps) gets None running statistics, no_training
 * (7 args: input, weight, bias, running_mean, running_var, momentum, eps) training
 * false. false for another argument count. */
static inline bool opc_bn_legit_call(const opr_kernel_call *c, opc_bn_legit *m)
{
    memset(&m->none, 0, sizeof m->none);
    m->none.struct_size = sizeof m->none;
    m->none.kind = OPR_ARG_NONE;
    m->no_train = m->none;
    m->no_train.kind = OPR_ARG_BOOL;
    m->no_train.u.b = false;
    const opr_kernel_arg *const *a = c->args;
    if (c->nargs == 6) {
        const opr_kernel_arg *v[8] = {a[0], a[1], a[2], &m->none, &m->none, a[3], a[4], a[5]};
        memcpy(m->args, v, sizeof v);
    } else if (c->nargs == 7) {
        const opr_kernel_arg *v[8] = {a[0], a[1], a[2], a[3], a[4], &m->no_train, a[5], a[6]};
        memcpy(m->args, v, sizeof v);
    } else {
        return false;
    }
    m->call = *c;
    m->call.args = m->args;
    m->call.nargs = 8;
    return true;
}

#endif
