/* The samples of `opreg check` as it runs them (check_sample.c): built on a device in a
 * dtype, the CPU reference in f64 on the same values, the op called, the results
 * compared within the tolerance. */
#ifndef OPREG_CHECK_SAMPLE_H
#define OPREG_CHECK_SAMPLE_H

#include "check_run.h"

#define CHECK_MAX_ARGS 16
#define CHECK_MAX_OUTS 4

typedef struct sample_run {
    opr_value args[CHECK_MAX_ARGS];
    int nargs, nowned;
    opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS];
    opr_tensor *outs[CHECK_MAX_OUTS];
    int nouts;  /* the op's outputs, or the pieces of an op returning Tensor[] */
    int rc;     /* of the op's call */
    bool declined; /* rc is a kernel's supports declining the call (opr_last_error_declined) */
    char err[1024];
} sample_run;

/* Tolerance of dtype dt against an f64 reference (the op's YAML `tolerance:` where it
 * has one). */
void check_tolerance(const opr_op *op, opr_dtype dt, double *rtol, double *atol);
/* A record of unit u about (phase, dtype, sample, variant), verdict pass, nothing measured. */
check_record check_new_record(const check_cfg *c, int u, const char *phase, opr_dtype dt, int sample,
                              const char *variant);
/* Releases what the sample holds and clears it. */
void check_sample_free(sample_run *r);
/* Builds variant v of sample s in dtype dt on dev (label: the variant's): 0, or the
 * status (nothing built). */
int check_sample_build(const opr_op *op, int s, int v, opr_dtype dt, opr_device dev, sample_run *r, char *label,
                       size_t label_len);
/* Runs op on the built sample: its status in r->rc, its error in r->err. */
void check_sample_call(const opr_op *op, sample_run *r);
/* Both: builds (its status returned) and, when built, calls. */
int check_sample_run(const opr_op *op, int s, int v, opr_dtype dt, opr_device dev, sample_run *r, char *label,
                     size_t label_len);
/* The CPU reference for dtype dt: built in f64 (integral and bool ops: in dt) on dt's
 * values, and called; the build's status returned. */
int check_sample_reference(const opr_op *op, int s, int v, opr_dtype dt, sample_run *ref, char *label,
                           size_t label_len);
/* The layout of each tensor argument of the built sample, for a failure's message:
 * "self [3, 4] f32 vdev strides [1, 3] offset 0; other ...". */
void check_describe_args(const opr_op *op, const sample_run *r, char *buf, size_t len);
/* Compares got with ref (output `out`) into r: verdict, max_error, tolerance, message.
 * A result the backend cannot copy back is n/i. */
void check_compare(const opr_op *op, const opr_tensor *ref, const opr_tensor *got, int out, check_record *r);

/* Sets requires-grad on the tensor arguments candidate cand covers (its label: "self,
 * other (kernel vfma_backward)"; -1, the plan: every candidate's), collecting them in
 * ins; returns how many, -1 when an input cannot take it. */
int check_cover_inputs(const opr_op *op, int cand, sample_run *r, opr_tensor **ins);
/* Calls op on the built sample with grad mode on and computes the gradients of the n_in
 * inputs ins for grad_outputs of fixed pseudo-random values (the same numbers on every
 * device); r->outs and grads (n_in of them) are the caller's to release. */
int check_grads_of(const opr_op *op, sample_run *r, opr_tensor **ins, int n_in, opr_tensor **grads);

#endif
