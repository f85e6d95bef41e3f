/* Captured programs: a PyTorch model written down as ATen calls (opreg-capture), run on
 * any backend without Python (docs/program-format.md has the file format).
 *
 *   opr_program *p;
 *   opr_program_opts o = {.struct_size = sizeof o, .device = dev, .requires_grad = true};
 *   if (opr_program_load(ctx, "model.opreg", &o, &p)) fail(opr_last_error());
 *   opr_tensor *out[4];
 *   opr_program_run(p, NULL, 0, out, opr_program_num_outputs(p));   // the stored inputs
 *   opr_program_backward(p, out);                                 // parameter .grad
 *   opr_tensor *g = opr_grad(opr_program_param(p, "fc.weight"));
 *   ... release out[], opr_program_free(p);
 *
 * A program file is untrusted input: opr_program_load checks every size, offset, dtype,
 * node reference and argument kind, and resolves every op in the context's registry,
 * before it returns; nothing is run from the file but registry ops. */
#ifndef OPREG_PROGRAM_H
#define OPREG_PROGRAM_H

#include <opreg/opreg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct opr_program opr_program;

/* How a program is loaded. Zero-initialised fields (besides struct_size) mean: on the
 * CPU, in the dtype it was captured in, parameters not requiring grad, node values not
 * kept. */
typedef struct opr_program_opts {
    size_t struct_size;
    opr_device device;  /* where its tensors go and its ops run */
    int dtype;          /* OPR_F32 or OPR_F64: floating tensors and dtype arguments are
                           converted to it; 0 (OPR_F32) is taken as "as captured" unless
                           convert_dtype is set */
    bool convert_dtype; /* dtype above applies */
    bool requires_grad; /* floating parameters require grad (for opr_program_backward) */
    bool keep_values;   /* opr_program_run keeps every node's outputs, for
                           opr_program_node_value (comparisons, debugging) */
    bool profile;       /* opr_program_run times every node (waiting for the device
                           after each: slower), for opr_program_node_time_ns */
} opr_program_opts; /* all fields since 0.1 */
#define OPR_PROGRAM_OPTS_STRUCT_SIZE_0_1 OPR_STRUCT_SIZE(opr_program_opts, profile)

/* Loads the program file at path (opr_program_load) or the n bytes at data
 * (opr_program_load_buffer; the bytes are copied, data may be freed after). opts may be
 * NULL. On success *out is the program, which holds its tensors on opts->device. Errors:
 * OPR_ERR_IO (unreadable file), OPR_ERR_PARSE (not the format, with what and where),
 * OPR_ERR_NOT_FOUND (ops the registry lacks, all named: "aten::foo.bar"), OPR_ERR_INVALID,
 * OPR_ERR_NOMEM; opr_last_error says which check failed. *out is NULL on error. */
OPR_API opr_status opr_program_load(opr_ctx *ctx, const char *path, const opr_program_opts *opts, opr_program **out);
OPR_API opr_status opr_program_load_buffer(opr_ctx *ctx, const void *data, size_t n, const opr_program_opts *opts,
                                           opr_program **out);
/* Frees the program and its tensors (the caller's references to them stay valid). NULL is fine. */
OPR_API void opr_program_free(opr_program *p);

/* Counts of the graph's inputs, outputs, nodes and parameters. */
OPR_API int opr_program_num_inputs(const opr_program *p);
OPR_API int opr_program_num_outputs(const opr_program *p);
OPR_API int opr_program_num_nodes(const opr_program *p);
OPR_API int opr_program_num_params(const opr_program *p);
/* Name of parameter i ("layer1.0.conv1.weight"), NULL out of range; lives as long as p. */
OPR_API const char *opr_program_param_name(const opr_program *p, int i);
/* The parameter named name (borrowed: lives as long as p), NULL when none. Its gradient
 * after opr_program_backward is opr_grad(opr_program_param(p, name)). */
OPR_API opr_tensor *opr_program_param(const opr_program *p, const char *name);
/* The same for the model's buffers (running statistics: what ops of the graph write
 * stays in them from one run to the next). */
OPR_API int opr_program_num_buffers(const opr_program *p);
OPR_API const char *opr_program_buffer_name(const opr_program *p, int i);
OPR_API opr_tensor *opr_program_buffer(const opr_program *p, const char *name);
/* A tensor of the file by its name ("ref/grad/fc.weight", "input/0") as the file holds
 * it: on the CPU, in its stored dtype (references are compared from there); borrowed,
 * NULL when the file has none. */
OPR_API opr_tensor *opr_program_stored(const opr_program *p, const char *name);

/* Runs the graph, node by node (opr_call per node, recorded by autograd when parameters
 * require grad and grad mode is on). inputs: n_inputs tensors in graph order, or NULL
 * (n_inputs 0) for the example inputs stored in the file. outputs receives n_outputs
 * (<= opr_program_num_outputs) new references. On error (a node's call failed) the
 * status and opr_last_error name the node and its op ("node 12 (aten::addmm): ...")
 * and outputs are NULL. A program must not run on two threads at once. */
OPR_API opr_status opr_program_run(opr_program *p, opr_tensor *const *inputs, int n_inputs, opr_tensor **outputs,
                                   int n_outputs);
/* Backward from the outputs of the last run (all of them, as opr_program_run gave them):
 * of the output the program names as its loss, else of the sum of every floating output
 * that requires grad. Gradients accumulate in the parameters' .grad. */
OPR_API opr_status opr_program_backward(opr_program *p, opr_tensor *const *outputs);

/* Node i's op (resolved in the registry), its number of outputs, and its ATen name as
 * the file wrote it ("addmm", "sum.dim_IntList"; lives as long as p). NULL / -1 out of range. */
OPR_API const opr_op *opr_program_node_op(const opr_program *p, int i);
OPR_API int opr_program_node_num_outputs(const opr_program *p, int i);
OPR_API const char *opr_program_node_aten_name(const opr_program *p, int i);
/* Output k of node i in the last run (borrowed; only with opts.keep_values), NULL when
 * not kept or not a tensor. */
OPR_API opr_tensor *opr_program_node_value(const opr_program *p, int i, int k);
/* The stored reference of output k of node i (borrowed), NULL when the file has none. */
OPR_API opr_tensor *opr_program_node_reference(const opr_program *p, int i, int k);
/* The reference of graph output k, NULL when none. */
OPR_API opr_tensor *opr_program_output_reference(const opr_program *p, int k);
/* Nanoseconds node i took over every run so far (opts.profile), -1 out of range. */
OPR_API int64_t opr_program_node_time_ns(const opr_program *p, int i);
/* Node i's tensor arguments: how many there are (items of tensor lists counted one by
 * one), and for the j-th the node and output it reads (*node = -1 for an input,
 * parameter, buffer or constant of the graph, which are exact by construction). */
OPR_API int opr_program_node_num_tensor_args(const opr_program *p, int i);
OPR_API opr_status opr_program_node_tensor_arg(const opr_program *p, int i, int j, int *node, int *output);

#ifdef __cplusplus
}
#endif

#endif
