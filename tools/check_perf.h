/* opreg check --perf (check_perf.c): how fast the backend is against the CPU, on the
 * op's large variant (or first sample) in f32: its forward, and a forward and backward
 * with each derivative candidate forced in turn and with the plan chosen by cost. */
#ifndef OPREG_CHECK_PERF_H
#define OPREG_CHECK_PERF_H

#include "check_run.h"

/* Emits the CR_PERF records of unit u (op on dev): the forward's (candidate ""), then
 * one per backward candidate (candidate: its label, or "plan chosen by cost"), each
 * with the CPU's time for the same work (the backward: the CPU's plan chosen by cost,
 * gradients for the same inputs). */
void check_perf(const check_cfg *c, int u, const opr_op *op, opr_device dev);

#endif
