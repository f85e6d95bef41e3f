/* The captured-program loader (program/, docs/program-format.md) against hostile files:
 * each case starts from one small valid program, breaks one thing (a truncated file,
 * offsets past the end or overlapping, a node reading a later node, an unknown op, a
 * wrong dtype or argument kind, another version) and expects a clear error naming it,
 * and no program. The valid program itself must load, run, compare and backpropagate. */
#include "test_util.h"

#include <opreg/program.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* x + w, then squared; x = [1, 2], w = [0.5, -1]; node 0 has a reference. */
static const float data_vals[6] = {1, 2, 0.5f, -1, 1.5f, 1};
#define TENSORS                                                                                                        \
    "\"input/0\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"                                           \
    "\"param/w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"                                          \
    "\"ref/node/0/0\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}"
#define NODE0 "{\"op\":\"add\",\"overload\":\"Tensor\",\"args\":[{\"input\":0},{\"param\":0}],\"outputs\":1,\"refs\":[\"ref/node/0/0\"]}"
#define NODE1 "{\"op\":\"mul\",\"overload\":\"Tensor\",\"args\":[{\"node\":0,\"output\":0},{\"node\":0,\"output\":0}],\"outputs\":1}"
#define PROGRAM(nodes)                                                                                                 \
    "{\"format\":\"opreg-program\",\"version\":1,\"dtype\":\"f32\",\"inputs\":[{\"name\":\"x\",\"tensor\":\"input/0\"}]," \
    "\"params\":[{\"name\":\"w\",\"tensor\":\"param/w\"}],\"nodes\":[" nodes "],\"outputs\":[{\"node\":1,\"output\":0}]}"

/* A program file: the 8-byte length, the header holding tensors and the escaped
 * program, then data (n bytes). Returns its size; *out is malloc'd. */
static size_t make_file(const char *tensors, const char *program, const void *data, size_t n, uint8_t **out)
{
    char *esc = malloc(2 * strlen(program) + 1), *e = esc;
    ck_assert_ptr_nonnull(esc);
    for (const char *c = program; *c; c++) {
        if (*c == '"' || *c == '\\') *e++ = '\\';
        *e++ = *c;
    }
    *e = '\0';
    size_t hcap = strlen(tensors) + strlen(esc) + 128;
    char *h = malloc(hcap);
    ck_assert_ptr_nonnull(h);
    size_t hl = (size_t)snprintf(h, hcap, "{%s%s\"__metadata__\":{\"opreg.program\":\"%s\"}}", tensors, tensors[0] ? "," : "", esc);
    free(esc);
    uint8_t *f = malloc(8 + hl + n);
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 8; i++) f[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(f + 8, h, hl);
    if (n) memcpy(f + 8 + hl, data, n);
    free(h);
    *out = f;
    return 8 + hl + n;
}

/* Loads the bytes and expects failure with `status` and `needle` in the message. */
static void expect_refused(opr_ctx *ctx, const uint8_t *f, size_t n, int status, const char *needle)
{
    opr_program *p = (opr_program *)1;
    int st = opr_program_load_buffer(ctx, f, n, NULL, &p);
    ck_assert_msg(st == status, "expected status %d, got %d (%s)", status, st, opr_last_error());
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(opr_last_error(), needle), "message '%s' lacks '%s'", opr_last_error(), needle);
}

static void expect_program_refused(opr_ctx *ctx, const char *tensors, const char *program, int status, const char *needle)
{
    uint8_t *f;
    size_t n = make_file(tensors, program, data_vals, sizeof data_vals, &f);
    expect_refused(ctx, f, n, status, needle);
    free(f);
}

START_TEST(test_valid_program)
{
    opr_ctx *ctx = tu_ctx();
    uint8_t *f;
    size_t n = make_file(TENSORS, PROGRAM(NODE0 "," NODE1), data_vals, sizeof data_vals, &f);
    opr_program *p = NULL;
    opr_program_opts o = {.struct_size = sizeof o, .requires_grad = true, .keep_values = true};
    ck_assert_msg(!opr_program_load_buffer(ctx, f, n, &o, &p), "%s", opr_last_error());
    free(f);
    ck_assert_int_eq(opr_program_num_nodes(p), 2);
    ck_assert_int_eq(opr_program_num_inputs(p), 1);
    ck_assert_str_eq(opr_program_param_name(p, 0), "w");
    ck_assert_str_eq(opr_program_node_aten_name(p, 0), "add.Tensor");
    opr_tensor *out = NULL;
    ck_assert_msg(!opr_program_run(p, NULL, 0, &out, 1), "%s", opr_last_error());
    double v[2];
    ck_assert(!opr_tensor_copy_to_host_f64(out, v, 2));
    ck_assert(v[0] == 2.25 && v[1] == 1.0);
    /* node 0's value and its reference, and which node node 1 reads */
    double r[2], x[2];
    ck_assert(!opr_tensor_copy_to_host_f64(opr_program_node_reference(p, 0, 0), r, 2));
    ck_assert(!opr_tensor_copy_to_host_f64(opr_program_node_value(p, 0, 0), x, 2));
    ck_assert(r[0] == x[0] && r[1] == x[1]);
    int src, k;
    ck_assert_int_eq(opr_program_node_num_tensor_args(p, 1), 2);
    ck_assert(!opr_program_node_tensor_arg(p, 1, 1, &src, &k));
    ck_assert(src == 0 && k == 0);
    ck_assert(!opr_program_node_tensor_arg(p, 0, 0, &src, &k));
    ck_assert_int_eq(src, -1);
    /* d/dw sum((x + w)^2) = 2 (x + w) */
    ck_assert_msg(!opr_program_backward(p, &out), "%s", opr_last_error());
    double g[2];
    ck_assert(!opr_tensor_copy_to_host_f64(opr_grad(opr_program_param(p, "w")), g, 2));
    ck_assert(g[0] == 3.0 && g[1] == 2.0);
    /* other inputs than the stored ones */
    opr_tensor *in = opr_tensor_from_data(ctx, OPR_F32, 1, (int64_t[]){2}, (float[]){0, 0}, OPR_CPU), *out2 = NULL;
    ck_assert_msg(!opr_program_run(p, &in, 1, &out2, 1), "%s", opr_last_error());
    ck_assert(!opr_tensor_copy_to_host_f64(out2, v, 2));
    ck_assert(v[0] == 0.25 && v[1] == 1.0);
    opr_tensor_release(out2);
    ck_assert_int_eq(opr_program_run(p, &in, 2, &out2, 1), OPR_ERR_INVALID);
    ck_assert_ptr_null(out2);
    opr_tensor_release(in);
    opr_tensor_release(out);
    opr_program_free(p);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_truncated_and_header)
{
    opr_ctx *ctx = tu_ctx();
    uint8_t *f;
    size_t n = make_file(TENSORS, PROGRAM(NODE0 "," NODE1), data_vals, sizeof data_vals, &f);
    expect_refused(ctx, f, 0, OPR_ERR_PARSE, "shorter than the 8-byte");
    expect_refused(ctx, f, 7, OPR_ERR_PARSE, "shorter than the 8-byte");
    expect_refused(ctx, f, 40, OPR_ERR_PARSE, "past the end of the file");
    expect_refused(ctx, f, n - 1, OPR_ERR_PARSE, "past the end of the data");
    f[7] = 0x7f; /* a length of about 2^63 */
    expect_refused(ctx, f, n, OPR_ERR_PARSE, "past the end of the file");
    free(f);
    /* not JSON, not an object, duplicate keys, no program */
    static const char *const bad[] = {"{\"a\":", "[1,2]", "{\"a\":{},\"a\":{}}", "{}"};
    static const char *const why[] = {"program header", "not a JSON object", "duplicate", "no __metadata__"};
    for (int i = 0; i < 4; i++) {
        uint8_t buf[64] = {(uint8_t)strlen(bad[i])};
        memcpy(buf + 8, bad[i], strlen(bad[i]));
        expect_refused(ctx, buf, 8 + strlen(bad[i]), OPR_ERR_PARSE, why[i]);
    }
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_tensor_entries)
{
    opr_ctx *ctx = tu_ctx();
    const char *prog = PROGRAM(NODE0 "," NODE1);
    expect_program_refused(ctx, "\"input/0\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,800]}", prog, OPR_ERR_PARSE,
                           "past the end of the data");
    expect_program_refused(ctx, "\"input/0\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}", prog, OPR_ERR_PARSE,
                           "dtype 'F16'");
    expect_program_refused(ctx, "\"input/0\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,8]}", prog, OPR_ERR_PARSE,
                           "need 16");
    expect_program_refused(ctx, "\"input/0\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}", prog, OPR_ERR_PARSE,
                           "size 0 is not");
    expect_program_refused(ctx, "\"input/0\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}", prog, OPR_ERR_PARSE,
                           "begin <= end");
    expect_program_refused(ctx,
                           "\"input/0\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,8]}", prog,
                           OPR_ERR_PARSE, "overflows");
    expect_program_refused(ctx,
                           "\"input/0\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                           "\"param/w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}",
                           prog, OPR_ERR_PARSE, "overlap");
    expect_program_refused(ctx, "\"input/0\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[2,4]}", prog, OPR_ERR_PARSE,
                           "bool byte 0 is 128"); /* bytes 2, 3 of 1.0f (00 00 80 3f) */
    expect_program_refused(ctx, "\"input/0\":{\"dtype\":\"F32\",\"shape\":[2]}", prog, OPR_ERR_PARSE, "data_offsets");
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_graph_refusals)
{
    opr_ctx *ctx = tu_ctx();
    /* node 0 reads node 1 */
    expect_program_refused(ctx, TENSORS,
                           PROGRAM("{\"op\":\"neg\",\"args\":[{\"node\":1,\"output\":0}],\"outputs\":1}," NODE1), OPR_ERR_PARSE,
                           "not an earlier node");
    /* an output a node does not have, a graph index out of range */
    expect_program_refused(ctx, TENSORS, PROGRAM(NODE0 ",{\"op\":\"neg\",\"args\":[{\"node\":0,\"output\":3}],\"outputs\":1}"),
                           OPR_ERR_PARSE, "output 3 of node 0");
    expect_program_refused(ctx, TENSORS, PROGRAM("{\"op\":\"neg\",\"args\":[{\"param\":5}],\"outputs\":1}," NODE1),
                           OPR_ERR_PARSE, "param index out of range");
    /* unknown ops: every one named, before anything runs */
    expect_program_refused(ctx, TENSORS,
                           PROGRAM("{\"op\":\"no_such_op\",\"overload\":\"default\",\"args\":[{\"input\":0}],\"outputs\":1},"
                                   "{\"op\":\"nor_this\",\"overload\":\"Tensor\",\"args\":[{\"node\":0,\"output\":0}],\"outputs\":1}"),
                           OPR_ERR_NOT_FOUND, "aten::no_such_op (node 0), aten::nor_this.Tensor (node 1)");
    /* an ATen overload bound to opreg's op of the plain name only when the argument
     * names of its schema agree */
    expect_program_refused(ctx, TENSORS,
                           PROGRAM("{\"op\":\"neg\",\"overload\":\"other\",\"schema\":\"neg.other(Tensor x) -> Tensor\","
                                   "\"args\":[{\"input\":0}],\"outputs\":1}," NODE1),
                           OPR_ERR_NOT_FOUND, "aten::neg.other (node 0)");
    /* argument kinds the schema does not take, unknown kinds and keywords */
    expect_program_refused(ctx, TENSORS, PROGRAM("{\"op\":\"neg\",\"args\":[{\"str\":\"x\"}],\"outputs\":1}," NODE1),
                           OPR_ERR_PARSE, "takes no such value");
    expect_program_refused(ctx, TENSORS, PROGRAM("{\"op\":\"neg\",\"args\":[{\"tensor\":0}],\"outputs\":1}," NODE1),
                           OPR_ERR_PARSE, "unknown argument kind \"tensor\"");
    expect_program_refused(ctx, TENSORS,
                           PROGRAM("{\"op\":\"neg\",\"args\":[{\"input\":0}],\"kwargs\":{\"bogus\":{\"int\":1}},\"outputs\":1}," NODE1),
                           OPR_ERR_PARSE, "no such argument");
    expect_program_refused(ctx, TENSORS, PROGRAM("{\"op\":\"neg\",\"args\":[{\"input\":0},{\"int\":1}],\"outputs\":1}," NODE1),
                           OPR_ERR_PARSE, "2 arguments, the schema has 1");
    expect_program_refused(ctx, TENSORS, PROGRAM("{\"op\":\"neg\",\"args\":[{\"input\":0}],\"outputs\":2}," NODE1),
                           OPR_ERR_PARSE, "2 outputs, the op has 1");
    /* graph tensors the file lacks, versions and formats */
    expect_program_refused(ctx, "\"param/w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}",
                           PROGRAM(NODE0 "," NODE1), OPR_ERR_PARSE, "names tensor 'input/0'");
    expect_program_refused(ctx, TENSORS, "{\"format\":\"opreg-program\",\"version\":2,\"nodes\":[],\"outputs\":[]}",
                           OPR_ERR_PARSE, "reads version 1");
    expect_program_refused(ctx, TENSORS, "{\"format\":\"onnx\",\"version\":1,\"nodes\":[],\"outputs\":[]}", OPR_ERR_PARSE,
                           "\"format\"");
    expect_program_refused(ctx, TENSORS, "{\"format\":\"opreg-program\",\"version\":1,\"nodes\":[]}", OPR_ERR_PARSE,
                           "no \"outputs\"");
    expect_program_refused(ctx, TENSORS, "not json", OPR_ERR_PARSE, "program graph");
    tu_ctx_free(ctx);
}
END_TEST

/* A node that fails at run time (shapes only a run knows) is named, and nothing is returned. */
START_TEST(test_run_error_names_node)
{
    opr_ctx *ctx = tu_ctx();
    uint8_t *f;
    size_t n = make_file(TENSORS, PROGRAM(NODE0 ",{\"op\":\"mm\",\"args\":[{\"node\":0,\"output\":0},{\"input\":0}],\"outputs\":1}"),
                         data_vals, sizeof data_vals, &f);
    opr_program *p = NULL;
    ck_assert_msg(!opr_program_load_buffer(ctx, f, n, NULL, &p), "%s", opr_last_error());
    free(f);
    opr_tensor *out = (opr_tensor *)1;
    ck_assert_int_ne(opr_program_run(p, NULL, 0, &out, 1), OPR_OK);
    ck_assert_ptr_null(out);
    ck_assert_msg(strstr(opr_last_error(), "node 1 (aten::mm)"), "%s", opr_last_error());
    opr_program_free(p);
    ck_assert_int_eq(opr_program_load(ctx, "/nonexistent/x.opreg", NULL, &p), OPR_ERR_IO);
    /* the same overload with ATen's argument names binds to opreg's neg */
    n = make_file(TENSORS,
                  PROGRAM("{\"op\":\"neg\",\"overload\":\"other\",\"schema\":\"neg.other(Tensor(a) self) -> Tensor\","
                          "\"args\":[{\"input\":0}],\"outputs\":1}," NODE1),
                  data_vals, sizeof data_vals, &f);
    ck_assert_msg(!opr_program_load_buffer(ctx, f, n, NULL, &p), "%s", opr_last_error());
    free(f);
    ck_assert_str_eq(opr_op_name(opr_program_node_op(p, 0)), "neg");
    opr_program_free(p);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("program_load");
    TCase *tc = tcase_create("program_load");
    tcase_add_test(tc, test_valid_program);
    tcase_add_test(tc, test_truncated_and_header);
    tcase_add_test(tc, test_tensor_entries);
    tcase_add_test(tc, test_graph_refusals);
    tcase_add_test(tc, test_run_error_names_node);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
