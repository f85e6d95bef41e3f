/* Private definitions of the program layer: a captured program as loaded
 * (docs/program-format.md). program_file.c reads the safetensors container,
 * program_graph.c the JSON graph, program_run.c runs it. */
#ifndef OPREG_PROGRAM_INTERNAL_H
#define OPREG_PROGRAM_INTERNAL_H

#include <opreg/program.h>

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* Where a tensor argument comes from. */
typedef enum prog_src { SRC_INPUT, SRC_PARAM, SRC_BUFFER, SRC_CONST, SRC_NODE, SRC_NONE } prog_src;

typedef struct prog_ref {
    prog_src src;
    int index;  /* graph tensor index, or node index for SRC_NODE */
    int output; /* output of that node */
} prog_ref;

/* The kinds of argument of the format's table "Arguments". */
typedef enum prog_arg_kind {
    PA_NONE, PA_REF, PA_TENSORS, PA_INT, PA_FLOAT, PA_BOOL, PA_INTS, PA_BOOLS, PA_STR, PA_DTYPE, PA_DEVICE
} prog_arg_kind;

typedef struct prog_arg {
    prog_arg_kind kind;
    int pos;         /* schema position it binds to */
    char *kw;        /* keyword name (owned), NULL if positional */
    prog_ref ref;    /* PA_REF */
    prog_ref *refs;  /* PA_TENSORS: n of them, SRC_NONE for a None item */
    opr_tensor **items; /* PA_TENSORS: the list a run passes, filled by each run */
    int64_t *ints;   /* PA_INTS, PA_BOOLS: n of them */
    int n;
    int64_t i;
    double d;
    bool b;
    char *s;         /* PA_STR, PA_DTYPE, PA_DEVICE (already the run's dtype or device) */
} prog_arg;

typedef struct prog_node {
    const opr_op *op;
    char aten[96];      /* "addmm", "sum.dim_IntList" */
    prog_arg *args;
    int nargs;          /* positional ones first, then the keyword ones */
    int npos;
    bool add_device;    /* a factory not given its device: runs add the program's */
    int nout;
    int *refs;          /* per output: index of its reference in the stored tensors, or -1 */
    opr_tensor **values;/* per output: the last run's value */
    int64_t time_ns;    /* over every profiled run */
    prog_ref *frees;    /* outputs of this or earlier nodes read last by this node: a
                           run that keeps no values drops them after it (peak memory) */
    int nfrees;
} prog_node;

/* One tensor of the safetensors file. */
typedef struct prog_stored {
    char *name;
    opr_dtype dtype;
    int ndim;
    int64_t shape[OPR_MAX_DIMS];
    uint64_t begin, end; /* byte offsets in the data section */
    opr_tensor *t;       /* as loaded */
} prog_stored;

struct opr_program {
    opr_ctx *ctx;
    opr_program_opts opts;
    opr_dtype run_dtype; /* the floating dtype the program runs in: opts.dtype when
                            converting, else the one it was captured in ("dtype") */
    char device[32];
    prog_stored *stored;
    int nstored;
    /* graph tensors: indices into stored, by kind (SRC_INPUT .. SRC_CONST) */
    int *graph[4];
    char **graph_names[4];
    int ngraph[4];
    opr_tensor **gtensor[4]; /* the graph tensors as run: on the device, in the run dtype */
    prog_node *nodes;
    int nnodes;
    prog_ref *outputs;
    int *output_refs; /* index into stored or -1 */
    int noutputs;
    int loss;         /* output index or -1 */
};

/* Reads the container at data (n bytes): the stored tensors (into p->stored, created on
 * the CPU in their file dtype) and the program's JSON text (a new string in *json). */
opr_status prog_read_container(opr_program *p, const uint8_t *data, size_t n, char **json);
/* Parses and checks the graph (JSON text) against p->stored and the registry. */
opr_status prog_read_graph(opr_program *p, const char *json);
/* Fills every node's frees from the graph (after prog_read_graph). */
opr_status prog_plan_frees(opr_program *p);
/* The stored tensor named name, -1 when none. */
int prog_stored_find(const opr_program *p, const char *name);

#endif
