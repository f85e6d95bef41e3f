/* Loading a captured program onto a device, running it node by node through the
 * registry (opr_call per node, so autograd records it like any other calls), and the
 * accessors of include/opreg/program.h. */
#include "program_internal.h"

#include "../core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The tensor t in dtype dt (floating tensors only are converted): through the host, once
 * at load, so that no conversion op is needed on the device. */
static opr_tensor *convert(opr_ctx *ctx, opr_tensor *t, opr_dtype dt)
{
    if (!opr_dtype_is_floating(opr_tensor_dtype(t)) || opr_tensor_dtype(t) == dt) return opr_tensor_retain(t);
    const int64_t n = opr_tensor_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    opr_tensor *r = NULL;
    if (v && f && !opr_tensor_copy_to_host_f64(t, v, n)) {
        for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
        r = opr_tensor_from_data(ctx, dt, opr_tensor_ndim(t), opr_tensor_shape(t), dt == OPR_F64 ? (void *)v : (void *)f,
                                 OPR_CPU);
    } else if (!v || !f) {
        opr_fail(OPR_ERR_NOMEM, "program: out of memory");
    }
    free(v);
    free(f);
    return r;
}

static opr_status place_graph_tensors(opr_program *p)
{
    static const char *const what[4] = {"input", "parameter", "buffer", "constant"};
    for (int kind = 0; kind < 4; kind++) {
        p->gtensor[kind] = calloc((size_t)p->ngraph[kind] + 1, sizeof *p->gtensor[kind]);
        if (!p->gtensor[kind]) return opr_fail(OPR_ERR_NOMEM, "program: out of memory");
        for (int i = 0; i < p->ngraph[kind]; i++) {
            opr_tensor *stored = p->stored[p->graph[kind][i]].t;
            opr_tensor *host = p->opts.convert_dtype ? convert(p->ctx, stored, p->run_dtype) : opr_tensor_retain(stored);
            opr_tensor *t = host ? opr_tensor_to(host, p->opts.device) : NULL;
            opr_tensor_release(host);
            if (!t) return opr_fail_wrap(opr_error_status(), "program %s '%s'", what[kind], p->graph_names[kind][i]);
            p->gtensor[kind][i] = t;
            if (kind == SRC_PARAM && p->opts.requires_grad && opr_dtype_is_floating(opr_tensor_dtype(t)) &&
                opr_set_requires_grad(t, true))
                return opr_error_status();
        }
    }
    return OPR_OK;
}

opr_status opr_program_load_buffer(opr_ctx *ctx, const void *data, size_t n, const opr_program_opts *opts,
                                   opr_program **out)
{
    if (!out) return opr_fail(OPR_ERR_INVALID, "opr_program_load: NULL out");
    *out = NULL;
    if (!ctx || (!data && n)) return opr_fail(OPR_ERR_INVALID, "opr_program_load: NULL argument");
    opr_program *p = calloc(1, sizeof *p);
    if (!p) return opr_fail(OPR_ERR_NOMEM, "program: out of memory");
    p->ctx = ctx;
    p->opts.device = OPR_CPU;
    if (opts) {
        if (opts->struct_size < OPR_PROGRAM_OPTS_STRUCT_SIZE_0_1) {
            free(p);
            return opr_fail(OPR_ERR_INVALID, "opr_program_load: opts.struct_size %zu is too small", opts->struct_size);
        }
        memcpy(&p->opts, opts, OPR_PROGRAM_OPTS_STRUCT_SIZE_0_1);
    }
    opr_status st = OPR_OK;
    if (p->opts.convert_dtype && p->opts.dtype != OPR_F32 && p->opts.dtype != OPR_F64)
        st = opr_fail(OPR_ERR_INVALID, "opr_program_load: dtype must be f32 or f64");
    opr_device_format(ctx, p->opts.device, p->device, sizeof p->device);
    char *json = NULL;
    if (!st) st = prog_read_container(p, data, n, &json);
    if (!st) {
        p->run_dtype = p->opts.convert_dtype ? (opr_dtype)p->opts.dtype : OPR_F32;
        st = prog_read_graph(p, json);
    }
    free(json);
    if (!st) st = prog_plan_frees(p);
    if (!st) st = place_graph_tensors(p);
    if (st) {
        opr_program_free(p);
        return st;
    }
    *out = p;
    return OPR_OK;
}

opr_status opr_program_load(opr_ctx *ctx, const char *path, const opr_program_opts *opts, opr_program **out)
{
    if (!out) return opr_fail(OPR_ERR_INVALID, "opr_program_load: NULL out");
    *out = NULL;
    if (!path) return opr_fail(OPR_ERR_INVALID, "opr_program_load: NULL path");
    FILE *f = fopen(path, "rb");
    if (!f) return opr_fail(OPR_ERR_IO, "%s: cannot open", path);
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    opr_status st = OPR_OK;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                st = opr_fail(OPR_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) st = opr_fail(OPR_ERR_IO, "%s: read error", path);
            break;
        }
    }
    fclose(f);
    if (!st) st = opr_program_load_buffer(ctx, buf, n, opts, out);
    free(buf);
    return st ? opr_fail_wrap(st, "%s", path) : OPR_OK;
}

static void release_values(opr_program *p)
{
    for (int i = 0; i < p->nnodes; i++)
        if (p->nodes[i].values)
            for (int k = 0; k < p->nodes[i].nout; k++) {
                opr_tensor_release(p->nodes[i].values[k]);
                p->nodes[i].values[k] = NULL;
            }
}

void opr_program_free(opr_program *p)
{
    if (!p) return;
    release_values(p);
    for (int i = 0; i < p->nnodes; i++) {
        prog_node *nd = &p->nodes[i];
        for (int a = 0; nd->args && a < nd->nargs; a++) {
            free(nd->args[a].refs);
            free(nd->args[a].items);
            free(nd->args[a].ints);
            free(nd->args[a].s);
            free(nd->args[a].kw);
        }
        free(nd->args);
        free(nd->refs);
        free(nd->values);
        free(nd->frees);
    }
    free(p->nodes);
    for (int kind = 0; kind < 4; kind++) {
        for (int i = 0; i < p->ngraph[kind]; i++) {
            if (p->gtensor[kind]) opr_tensor_release(p->gtensor[kind][i]);
            free(p->graph_names[kind][i]);
        }
        free(p->gtensor[kind]);
        free(p->graph[kind]);
        free(p->graph_names[kind]);
    }
    for (int i = 0; i < p->nstored; i++) {
        free(p->stored[i].name);
        opr_tensor_release(p->stored[i].t);
    }
    free(p->stored);
    free(p->outputs);
    free(p->output_refs);
    free(p);
}

/* The tensor a reference stands for in the current run (borrowed), NULL for None. */
static opr_tensor *deref(const opr_program *p, opr_tensor *const *inputs, prog_ref r)
{
    if (r.src == SRC_NONE) return NULL;
    if (r.src == SRC_NODE) return p->nodes[r.index].values[r.output];
    if (r.src == SRC_INPUT && inputs) return inputs[r.index];
    return p->gtensor[r.src][r.index];
}

static opr_value arg_value(const opr_program *p, opr_tensor *const *inputs, const prog_arg *a)
{
    switch (a->kind) {
    case PA_REF: return opr_v_tensor(deref(p, inputs, a->ref));
    case PA_TENSORS:
        for (int i = 0; i < a->n; i++) a->items[i] = deref(p, inputs, a->refs[i]);
        return opr_v_tensors(a->items, a->n);
    case PA_INT: return opr_v_int(a->i);
    case PA_FLOAT: return opr_v_double(a->d);
    case PA_BOOL: return opr_v_bool(a->b);
    case PA_INTS:
    case PA_BOOLS: return opr_v_ints(a->ints, a->n);
    case PA_STR:
    case PA_DTYPE:
    case PA_DEVICE: return opr_v_string(a->s);
    default: return opr_v_none();
    }
}

/* Calls node i; its outputs go to its values. */
static opr_status run_node(opr_program *p, opr_tensor *const *inputs, int i)
{
    prog_node *nd = &p->nodes[i];
    opr_value vals[32];
    opr_kwarg kws[32];
    if (nd->nargs > 30) return opr_fail(OPR_ERR_INVALID, "node %d (aten::%s): too many arguments", i, nd->aten);
    int nkw = 0;
    for (int a = 0; a < nd->nargs; a++) {
        const prog_arg *pa = &nd->args[a];
        opr_value v = arg_value(p, inputs, pa);
        if (a < nd->npos) vals[a] = v;
        else kws[nkw++] = opr_kw(pa->kw, v);
    }
    if (nd->add_device) kws[nkw++] = opr_kw("device", opr_v_string(p->device));
    opr_status st = opr_call_kw(nd->op, vals, nd->npos, kws, nkw, nd->values, nd->nout);
    return st ? opr_fail_wrap(st, "node %d (aten::%s)", i, nd->aten) : OPR_OK;
}

opr_status opr_program_run(opr_program *p, opr_tensor *const *inputs, int n_inputs, opr_tensor **outputs, int n_outputs)
{
    if (!p || (n_outputs && !outputs)) return opr_fail(OPR_ERR_INVALID, "opr_program_run: NULL argument");
    for (int k = 0; k < n_outputs; k++) outputs[k] = NULL;
    if (inputs && n_inputs != p->ngraph[SRC_INPUT])
        return opr_fail(OPR_ERR_INVALID, "opr_program_run: %d inputs given, the program takes %d", n_inputs,
                        p->ngraph[SRC_INPUT]);
    if (n_outputs < 0 || n_outputs > p->noutputs)
        return opr_fail(OPR_ERR_INVALID, "opr_program_run: %d outputs asked, the program has %d", n_outputs, p->noutputs);
    release_values(p);
    opr_status st = OPR_OK;
    for (int i = 0; i < p->nnodes && !st; i++) {
        const int64_t t0 = p->opts.profile ? now_ns() : 0;
        st = run_node(p, inputs, i);
        /* a device queues work: the node's time is only known once it is done */
        if (p->opts.profile && !st && !(st = opr_device_sync(p->ctx, p->opts.device)))
            p->nodes[i].time_ns += now_ns() - t0;
        for (int f = 0; !p->opts.keep_values && f < p->nodes[i].nfrees; f++) {
            prog_ref r = p->nodes[i].frees[f];
            opr_tensor_release(p->nodes[r.index].values[r.output]);
            p->nodes[r.index].values[r.output] = NULL;
        }
    }
    for (int k = 0; k < n_outputs && !st; k++) {
        opr_tensor *t = deref(p, inputs, p->outputs[k]);
        outputs[k] = opr_tensor_retain(t);
    }
    if (!p->opts.keep_values || st) release_values(p);
    if (st)
        for (int k = 0; k < n_outputs; k++) {
            opr_tensor_release(outputs[k]);
            outputs[k] = NULL;
        }
    return st;
}

opr_status opr_program_backward(opr_program *p, opr_tensor *const *outputs)
{
    if (!p || !outputs) return opr_fail(OPR_ERR_INVALID, "opr_program_backward: NULL argument");
    if (p->loss >= 0) return opr_backward(outputs[p->loss], NULL, NULL);
    opr_tensor *total = NULL;
    opr_status st = OPR_OK;
    for (int k = 0; k < p->noutputs && !st; k++) {
        if (!outputs[k] || !opr_requires_grad(outputs[k])) continue;
        opr_tensor *s = NULL, *sum = NULL;
        opr_value a = opr_v_tensor(outputs[k]);
        st = opr_call_by_name(p->ctx, "sum", &a, 1, &s, 1);
        if (!st && total) {
            opr_value b[2] = {opr_v_tensor(total), opr_v_tensor(s)};
            st = opr_call_by_name(p->ctx, "add", b, 2, &sum, 1);
            opr_tensor_release(s);
            opr_tensor_release(total);
            total = sum;
        } else if (!st) {
            total = s;
        }
    }
    if (!st && !total) st = opr_fail(OPR_ERR_INVALID, "opr_program_backward: no output requires grad");
    if (!st) st = opr_backward(total, NULL, NULL);
    opr_tensor_release(total);
    return st;
}

int opr_program_num_inputs(const opr_program *p) { return p ? p->ngraph[SRC_INPUT] : -1; }
int opr_program_num_outputs(const opr_program *p) { return p ? p->noutputs : -1; }
int opr_program_num_nodes(const opr_program *p) { return p ? p->nnodes : -1; }
int opr_program_num_params(const opr_program *p) { return p ? p->ngraph[SRC_PARAM] : -1; }

const char *opr_program_param_name(const opr_program *p, int i)
{
    return p && i >= 0 && i < p->ngraph[SRC_PARAM] ? p->graph_names[SRC_PARAM][i] : NULL;
}

opr_tensor *opr_program_param(const opr_program *p, const char *name)
{
    for (int i = 0; p && name && i < p->ngraph[SRC_PARAM]; i++)
        if (!strcmp(p->graph_names[SRC_PARAM][i], name)) return p->gtensor[SRC_PARAM][i];
    return NULL;
}

int opr_program_num_buffers(const opr_program *p) { return p ? p->ngraph[SRC_BUFFER] : -1; }

const char *opr_program_buffer_name(const opr_program *p, int i)
{
    return p && i >= 0 && i < p->ngraph[SRC_BUFFER] ? p->graph_names[SRC_BUFFER][i] : NULL;
}

opr_tensor *opr_program_buffer(const opr_program *p, const char *name)
{
    for (int i = 0; p && name && i < p->ngraph[SRC_BUFFER]; i++)
        if (!strcmp(p->graph_names[SRC_BUFFER][i], name)) return p->gtensor[SRC_BUFFER][i];
    return NULL;
}

opr_tensor *opr_program_stored(const opr_program *p, const char *name)
{
    int i = p && name ? prog_stored_find(p, name) : -1;
    return i < 0 ? NULL : p->stored[i].t;
}

static bool node_ok(const opr_program *p, int i) { return p && i >= 0 && i < p->nnodes; }

const opr_op *opr_program_node_op(const opr_program *p, int i) { return node_ok(p, i) ? p->nodes[i].op : NULL; }
int opr_program_node_num_outputs(const opr_program *p, int i) { return node_ok(p, i) ? p->nodes[i].nout : -1; }
const char *opr_program_node_aten_name(const opr_program *p, int i) { return node_ok(p, i) ? p->nodes[i].aten : NULL; }

opr_tensor *opr_program_node_value(const opr_program *p, int i, int k)
{
    return node_ok(p, i) && k >= 0 && k < p->nodes[i].nout ? p->nodes[i].values[k] : NULL;
}

opr_tensor *opr_program_node_reference(const opr_program *p, int i, int k)
{
    if (!node_ok(p, i) || k < 0 || k >= p->nodes[i].nout || p->nodes[i].refs[k] < 0) return NULL;
    return p->stored[p->nodes[i].refs[k]].t;
}

opr_tensor *opr_program_output_reference(const opr_program *p, int k)
{
    if (!p || k < 0 || k >= p->noutputs || p->output_refs[k] < 0) return NULL;
    return p->stored[p->output_refs[k]].t;
}

int64_t opr_program_node_time_ns(const opr_program *p, int i) { return node_ok(p, i) ? p->nodes[i].time_ns : -1; }

int opr_program_node_num_tensor_args(const opr_program *p, int i)
{
    if (!node_ok(p, i)) return -1;
    int n = 0;
    for (int a = 0; a < p->nodes[i].nargs; a++)
        n += p->nodes[i].args[a].kind == PA_REF ? 1 : p->nodes[i].args[a].kind == PA_TENSORS ? p->nodes[i].args[a].n : 0;
    return n;
}

opr_status opr_program_node_tensor_arg(const opr_program *p, int i, int j, int *node, int *output)
{
    if (!node_ok(p, i) || !node || !output) return opr_fail(OPR_ERR_INVALID, "opr_program_node_tensor_arg: bad argument");
    for (int a = 0; a < p->nodes[i].nargs; a++) {
        const prog_arg *pa = &p->nodes[i].args[a];
        const prog_ref *r = pa->kind == PA_REF ? &pa->ref : NULL;
        if (pa->kind == PA_TENSORS && j < pa->n) r = &pa->refs[j];
        else if (pa->kind == PA_TENSORS) j -= pa->n;
        else if (r && j) {
            j--;
            r = NULL;
        }
        if (!r) continue;
        *node = r->src == SRC_NODE ? r->index : -1;
        *output = r->src == SRC_NODE ? r->output : 0;
        return OPR_OK;
    }
    return opr_fail(OPR_ERR_INVALID, "opr_program_node_tensor_arg: node %d has no tensor argument %d", i, j);
}
