/* YAML op registry: user ops loaded at run time, and every kind of definition error,
 * each reported as "name:line:col: message" with the right position and the offending
 * token, with the bad entry refused and the other entries of the same text still
 * loaded. */
#include "test_util.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The allocation-failure sweep uses alloc_hook.c, linked in plain builds only
 * (OPREG_ALLOC_HOOK; the sanitizers bring their own allocator). */
#if OPREG_ALLOC_HOOK
#include "alloc_hook.h"
#endif

/* ------------------------------------------------------------------ helpers */

/* Built-in op definitions, no plugin. */
static opr_ctx *bare_ctx(void)
{
    opr_ctx_opts o = {.struct_size = sizeof o, .skip_plugin_discovery = true};
    opr_ctx *ctx = opr_ctx_new(&o);
    ck_assert_msg(ctx != NULL, "opr_ctx_new: %s", opr_last_error());
    return ctx;
}

/* What opr_registry_errors gained since `before` (a length taken earlier). */
static const char *errors_since(const opr_ctx *ctx, size_t before)
{
    const char *all = opr_registry_errors(ctx);
    ck_assert_uint_ge(strlen(all), before);
    return all + before;
}

static void assert_has(const char *hay, const char *needle, const char *what)
{
    ck_assert_msg(hay != NULL, "%s is NULL (expected it to contain '%s')", what, needle);
    ck_assert_msg(strstr(hay, needle) != NULL, "%s '%s' lacks '%s'", what, hay, needle);
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* Two good entries around the bad one, which starts on line 3. */
#define GOOD_A "- name: ya(Tensor self) -> Tensor\n  shape: sizes(self)\n"
#define GOOD_C "- name: yc(Tensor self, Tensor other) -> Tensor\n  shape: broadcast(self, other)\n"

/* Loads GOOD_A + bad + GOOD_C as "t.yaml" into a fresh context and checks: status
 * OPR_ERR_PARSE, two entries loaded (ya, yc), `bad_op` (if not NULL) absent, the error
 * starting with `where` ("t.yaml:LINE:COL: ") and containing `what` and `token`, and
 * the same line in opr_registry_errors. */
static void expect_bad_entry(const char *bad, const char *bad_op, const char *where, const char *what,
                             const char *token)
{
    char text[2048];
    snprintf(text, sizeof text, "%s%s%s", GOOD_A, bad, GOOD_C);
    opr_ctx *ctx = bare_ctx();
    int nops = opr_op_count(ctx), n = -1;
    size_t before = strlen(opr_registry_errors(ctx));
    int rc = opr_registry_load_yaml_string(ctx, text, "t.yaml", &n);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", opr_last_error());
    ck_assert_msg(rc == OPR_ERR_PARSE, "expected OPR_ERR_PARSE, got %s (%s)\n%s", opr_status_name(rc), msg, text);
    ck_assert_msg(strncmp(msg, where, strlen(where)) == 0, "error '%s' does not start with '%s'\n%s", msg, where, text);
    assert_has(msg, what, "error");
    if (token) {
        char quoted[128];
        snprintf(quoted, sizeof quoted, "'%s'", token);
        assert_has(msg, quoted, "error");
    }
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(opr_op_count(ctx), nops + 2);
    ck_assert_ptr_nonnull(opr_op_find(ctx, "ya"));
    ck_assert_ptr_nonnull(opr_op_find(ctx, "yc"));
    if (bad_op) ck_assert_ptr_null(opr_op_find(ctx, bad_op));
    const char *errs = errors_since(ctx, before);
    assert_has(errs, msg, "opr_registry_errors");
    ck_assert_int_eq(count_lines(errs), 1);
    tu_ctx_free(ctx);
}

static opr_tensor *f32_tensor(opr_ctx *ctx, int ndim, const int64_t *shape, const float *v)
{
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_F32, ndim, shape, v, OPR_CPU);
    ck_assert_msg(t != NULL, "%s", opr_last_error());
    return t;
}

/* ------------------------------------------------------------------ valid user ops */

START_TEST(test_builtin_yaml_is_clean)
{
    opr_ctx *ctx = bare_ctx();
    ck_assert_msg(opr_registry_errors(ctx)[0] == '\0', "built-in op definitions have errors:\n%s",
                  opr_registry_errors(ctx));
    ck_assert_ptr_nonnull(opr_op_find(ctx, "add"));
    ck_assert_int_gt(opr_op_count(ctx), 50);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_user_ops_load)
{
    static const char text[] =
        "# user ops\n"
        "- name: my_scale(Tensor self, float factor=2.5, int[] dims=[0, 1], bool flag=True, str mode=\"fast\", int? k=None) -> Tensor\n"
        "  dtypes: [f32, f64, i64]\n"
        "  check: [factor > 0, dim(self) >= 0]\n"
        "  shape: sizes(self)\n"
        "  flops: 2 * numel(self)\n"
        "- name: my_split(Tensor self, int dim=0) -> (Tensor lo, Tensor hi)\n"
        "  shapes: [sizes(self),\n"
        "           set(sizes(self), dim, 1)]\n"
        "  dtypes_out: [T, i64]\n"
        "- name: my_t(Tensor self) -> Tensor\n"
        "  dtypes: [f32, f64, i64, bool]\n"
        "  view: t\n"
        "- name: my_pair(Tensor self) -> (Tensor, Tensor)\n"
        "  shapes:\n"
        "    - sizes(self)\n"
        "    - \"[numel(self)]\"\n";
    opr_ctx *ctx = bare_ctx();
    int nops = opr_op_count(ctx), n = -1;
    size_t before = strlen(opr_registry_errors(ctx));
    int rc = opr_registry_load_yaml_string(ctx, text, "user.yaml", &n);
    ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    ck_assert_int_eq(n, 4);
    ck_assert_int_eq(opr_op_count(ctx), nops + 4);
    ck_assert_str_eq(errors_since(ctx, before), "");

    const opr_op *scale = opr_op_find(ctx, "my_scale");
    ck_assert_ptr_nonnull(scale);
    ck_assert_str_eq(opr_op_name(scale), "my_scale");
    ck_assert_str_eq(opr_op_schema(scale), "my_scale(Tensor self, float factor=2.5, int[] dims=[0, 1], bool flag=True, "
                                           "str mode=\"fast\", int? k=None) -> Tensor");
    ck_assert_int_eq(opr_op_num_args(scale), 6);
    ck_assert_int_eq(opr_op_num_outputs(scale), 1);
    ck_assert(!opr_op_has_kernel(scale, 0));
    const opr_op *split = opr_op_find(ctx, "my_split");
    ck_assert_ptr_nonnull(split);
    ck_assert_int_eq(opr_op_num_args(split), 2);
    ck_assert_int_eq(opr_op_num_outputs(split), 2);
    ck_assert_int_eq(opr_op_num_outputs(opr_op_find(ctx, "my_pair")), 2);
    ck_assert(opr_op_has_kernel(opr_op_find(ctx, "my_t"), 0)); /* host-implemented view */

    /* the view op runs without any plugin */
    float v[6] = {1, 2, 3, 4, 5, 6};
    opr_tensor *a = f32_tensor(ctx, 2, (int64_t[]){2, 3}, v);
    opr_value args[2] = {opr_v_tensor(a)};
    opr_tensor *t = tu_call1(ctx, "my_t", args, 1);
    ck_assert_int_eq(opr_tensor_size(t, 0), 3);
    ck_assert_int_eq(opr_tensor_size(t, 1), 2);
    ck_assert(opr_tensor_shares_storage(t, a));
    opr_tensor_release(t);

    /* defaults fill in; the check runs before the kernel lookup */
    args[1] = opr_v_double(-1);
    tu_expect_fail(ctx, "my_scale", args, 2, 1, OPR_ERR_INVALID, "check failed: factor > 0");
    tu_expect_fail(ctx, "my_scale", args, 1, 1, OPR_ERR_NOT_FOUND, "my_scale: no kernel for device cpu");
    tu_expect_fail(ctx, "my_split", args, 1, 2, OPR_ERR_NOT_FOUND, "my_split: no kernel for device cpu");
    opr_tensor_release(a);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_empty_and_comment_only)
{
    opr_ctx *ctx = bare_ctx();
    int nops = opr_op_count(ctx), n = -1;
    size_t before = strlen(opr_registry_errors(ctx));
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, "", "empty.yaml", &n), OPR_OK);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, "# nothing here\n", "c.yaml", &n), OPR_OK);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, "[]\n", "seq.yaml", NULL), OPR_OK);
    ck_assert_int_eq(opr_op_count(ctx), nops);
    ck_assert_int_eq(opr_registry_load_yaml_string(NULL, "", "x", &n), OPR_ERR_INVALID);
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, NULL, "x", &n), OPR_ERR_INVALID);
    /* no name: "<string>" stands in for the file */
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, "- 1\n", NULL, &n), OPR_ERR_PARSE);
    ck_assert_msg(strncmp(opr_last_error(), "<string>:1:3: ", 14) == 0, "%s", opr_last_error());
    ck_assert_int_eq(count_lines(errors_since(ctx, before)), 1);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ structure errors */

START_TEST(test_bad_yaml_syntax)
{
    /* a syntax error makes the whole document unreadable: nothing of it loads */
    static const char text[] =
        GOOD_A
        "- name: yb(Tensor self) -> Tensor\n"
        "  shape: sizes(self): x\n"
        GOOD_C;
    opr_ctx *ctx = bare_ctx();
    int nops = opr_op_count(ctx), n = -1;
    size_t before = strlen(opr_registry_errors(ctx));
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, text, "t.yaml", &n), OPR_ERR_PARSE);
    ck_assert_msg(strncmp(opr_last_error(), "t.yaml:4:21: ", 13) == 0, "%s", opr_last_error());
    assert_has(opr_last_error(), "mapping values are not allowed", "error");
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(opr_op_count(ctx), nops);
    assert_has(opr_registry_errors(ctx), "t.yaml:4:21: ", "opr_registry_errors");
    /* an unclosed flow sequence is reported where the scanner gave up */
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, "- name: yq(Tensor self) -> Tensor\n  dtypes: [f32\n", "u.yaml", &n),
                     OPR_ERR_PARSE);
    ck_assert_msg(strncmp(opr_last_error(), "u.yaml:", 7) == 0, "%s", opr_last_error());
    assert_has(opr_last_error(), "flow sequence", "error");
    ck_assert_int_eq(count_lines(errors_since(ctx, before)), 2);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_root_not_a_sequence)
{
    opr_ctx *ctx = bare_ctx();
    int n = -1;
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, "name: yb(Tensor self) -> Tensor\nshape: sizes(self)\n", "t.yaml", &n),
                     OPR_ERR_PARSE);
    ck_assert_msg(strncmp(opr_last_error(), "t.yaml:1:1: ", 12) == 0, "%s", opr_last_error());
    assert_has(opr_last_error(), "must be a sequence of op entries", "error");
    ck_assert_int_eq(n, 0);
    ck_assert_ptr_null(opr_op_find(ctx, "yb"));
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_entry_not_a_mapping)
{
    expect_bad_entry("- just a string\n", NULL, "t.yaml:3:3: ", "each entry must be a mapping", NULL);
    expect_bad_entry("- [yb, 1]\n", NULL, "t.yaml:3:3: ", "each entry must be a mapping", NULL);
}
END_TEST

START_TEST(test_missing_name)
{
    expect_bad_entry("- shape: sizes(self)\n  flops: 1\n", NULL, "t.yaml:3:3: ", "entry has no 'name'", NULL);
    expect_bad_entry("- name: [yb, yc]\n  shape: sizes(self)\n", NULL, "t.yaml:3:3: ", "entry has no 'name'", NULL);
}
END_TEST

START_TEST(test_missing_shape)
{
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  flops: 1\n", "yb", "t.yaml:3:3: ", "op 'yb' needs a 'shape'", NULL);
}
END_TEST

START_TEST(test_unknown_key)
{
    /* the key itself is the offending token */
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(self)\n  colour: blue\n", "yb", "t.yaml:5:3: ",
                     "unknown key", "colour");
    /* a key given twice (the second would silently replace the first) */
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(self)\n  flops: 1\n  shape: \"[1]\"\n", "yb",
                     "t.yaml:6:3: ", "duplicate key", "shape");
}
END_TEST

/* `tolerance:` per dtype: a number for rtol and atol, or {rtol, atol}; what an entry
 * does not give keeps the default (opr_op_tolerance leaves it alone). */
START_TEST(test_tolerance_key)
{
    opr_ctx *ctx = bare_ctx();
    const char *text = "- name: ytol(Tensor self) -> Tensor\n  shape: sizes(self)\n"
                       "  tolerance: {f32: 1e-3, f16: {rtol: 0.05}, bf16: {atol: 0}}\n";
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, text, "tol.yaml", NULL), OPR_OK);
    const opr_op *op = opr_op_find(ctx, "ytol");
    ck_assert_ptr_nonnull(op);
    double r = -1, a = -1;
    ck_assert(opr_op_tolerance(op, OPR_F32, &r, &a));
    ck_assert(r == 1e-3 && a == 1e-3);
    r = a = -1;
    ck_assert(opr_op_tolerance(op, OPR_F16, &r, &a));
    ck_assert(r == 0.05 && a == -1);
    r = a = -1;
    ck_assert(opr_op_tolerance(op, OPR_BF16, &r, &a));
    ck_assert(r == -1 && a == 0);
    ck_assert(!opr_op_tolerance(op, OPR_F64, &r, &a));
    ck_assert(!opr_op_tolerance(opr_op_find(ctx, "add"), OPR_F32, NULL, NULL));
    ck_assert(!opr_op_tolerance(NULL, OPR_F32, NULL, NULL));
    tu_ctx_free(ctx);
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(self)\n  tolerance: {i64: 1}\n", "yb",
                     "t.yaml:5:15: ", "not a floating dtype", "i64");
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(self)\n  tolerance: {f32: -1}\n", "yb",
                     "t.yaml:5:20: ", "not a number >= 0", "-1");
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(self)\n  tolerance: {f32: {eps: 1}}\n", "yb",
                     "t.yaml:5:21: ", "expected rtol or atol", "eps");
}
END_TEST

/* ------------------------------------------------------------------ schema errors */

START_TEST(test_schema_unknown_type)
{
    expect_bad_entry("- name: yb(Tensor self, foo x) -> Tensor\n  shape: sizes(self)\n", "yb", "t.yaml:3:25: ",
                     "unknown argument type", "foo");
    /* in a quoted scalar the column still points at the token (past the quote) */
    expect_bad_entry("- name: \"yb(Tensor self, foo x) -> Tensor\"\n  shape: sizes(self)\n", "yb", "t.yaml:3:26: ",
                     "unknown argument type", "foo");
    expect_bad_entry("- name: yb(Tensor self, int ) -> Tensor\n  shape: sizes(self)\n", "yb", "t.yaml:3:29: ",
                     "expected an argument name", ")");
}
END_TEST

START_TEST(test_schema_missing_arrow)
{
    expect_bad_entry("- name: yb(Tensor self) Tensor\n  shape: sizes(self)\n", "yb", "t.yaml:3:25: ", "expected '->'",
                     "Tensor");
    expect_bad_entry("- name: yb(Tensor self) -> Tensr\n  shape: sizes(self)\n", "yb", "t.yaml:3:28: ",
                     "expected 'Tensor' or '(' after '->'", "Tensr");
}
END_TEST

START_TEST(test_schema_bad_default)
{
    expect_bad_entry("- name: yb(Tensor self, int k=1.5) -> Tensor\n  shape: sizes(self)\n", "yb", "t.yaml:3:31: ",
                     "default value does not match the argument type", "1.5");
    expect_bad_entry("- name: yb(Tensor self, int k=None) -> Tensor\n  shape: sizes(self)\n", "yb", "t.yaml:3:31: ",
                     "None default for a non-optional argument", "None");
    /* a default that is not even an expression: the expression parser's position */
    expect_bad_entry("- name: yb(Tensor self, int k=*) -> Tensor\n  shape: sizes(self)\n", "yb", "t.yaml:3:31: ",
                     "unexpected token", "*");
}
END_TEST

START_TEST(test_schema_duplicate_arg)
{
    expect_bad_entry("- name: yb(Tensor self, int self) -> Tensor\n  shape: sizes(self)\n", "yb", "t.yaml:3:29: ",
                     "duplicate argument name", "self");
    /* with a default the position is still the name's */
    expect_bad_entry("- name: yb(Tensor self, int self=3) -> Tensor\n  shape: sizes(self)\n", "yb", "t.yaml:3:29: ",
                     "duplicate argument name", "self");
    expect_bad_entry("- name: yb(Tensor self, int k=1, int j) -> Tensor\n  shape: sizes(self)\n", "yb", "t.yaml:3:38: ",
                     "argument without default after one with a default", "j");
}
END_TEST

/* ------------------------------------------------------------------ expression errors */

START_TEST(test_expr_unexpected_token)
{
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(self) +* 2\n", "yb", "t.yaml:4:23: ",
                     "unexpected token", "*");
    /* quoted: the column skips the quote */
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: \"[size(self, 0), ]\"\n", "yb", "t.yaml:4:27: ",
                     "unexpected token", "]");
    /* in a check list */
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  check: [dim(self) >> 1]\n  shape: sizes(self)\n", "yb",
                     "t.yaml:4:22: ", "unexpected token", ">");
    /* a flow list over two lines: line and column of the second line */
    expect_bad_entry("- name: yb(Tensor self) -> (Tensor a, Tensor b)\n"
                     "  shapes: [sizes(self),\n"
                     "           sizes(self) $ 1]\n",
                     "yb", "t.yaml:5:24: ", "expected ',' or ']'", "$");
    /* trailing text */
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(self) self\n", "yb", "t.yaml:4:22: ",
                     "unexpected trailing text", "self");
}
END_TEST

START_TEST(test_expr_unknown_name)
{
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(selff)\n", "yb", "t.yaml:4:16: ",
                     "unknown name", "selff");
    /* shapes may read only the arguments, not the outputs */
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(result)\n", "yb", "t.yaml:4:16: ",
                     "unknown name", "result");
    expect_bad_entry("- name: yb(Tensor self, int n) -> Tensor\n  check: [n > 0, m > 0]\n  shape: sizes(self)\n", "yb",
                     "t.yaml:4:18: ", "unknown name", "m");
    /* checks run before the outputs exist: they may not read them either */
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  check: [numel(result) > 0]\n  shape: sizes(self)\n", "yb",
                     "t.yaml:4:17: ", "unknown name", "result");
    expect_bad_entry("- name: yb(Tensor self) -> (Tensor out)\n  check: [numel(out) > 0]\n  shape: sizes(self)\n", "yb",
                     "t.yaml:4:17: ", "unknown name", "out");
}
END_TEST

START_TEST(test_kernel_keys_without_kernel)
{
    /* needs: and flops: belong to kernel entries; in a composite entry they would be ignored */
    expect_bad_entry("- name: yb(Tensor self, Tensor other) -> Tensor\n  shape: broadcast(self, other)\n"
                     "  self, other: {needs: {self: [other]}, self: grad, other: grad}\n",
                     "yb", "t.yaml:5:", "'needs' is read only in a kernel entry", NULL);
    expect_bad_entry("- name: yb(Tensor self, Tensor other) -> Tensor\n  shape: broadcast(self, other)\n"
                     "  self, other: {flops: numel(self), self: grad, other: grad}\n",
                     "yb", "t.yaml:5:", "'flops' is read only in a kernel entry", NULL);
}
END_TEST

START_TEST(test_expr_unknown_function)
{
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizez(self)\n", "yb", "t.yaml:4:10: ",
                     "unknown function", "sizez");
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(self)\n  flops: 2 * cost(self)\n", "yb",
                     "t.yaml:5:14: ", "unknown function", "cost");
}
END_TEST

START_TEST(test_wrong_shape_count)
{
    expect_bad_entry("- name: yb(Tensor self) -> (Tensor a, Tensor b)\n  shapes: [sizes(self)]\n", "yb", "t.yaml:4:11: ",
                     "different number of shapes than the op has outputs", "shapes");
    expect_bad_entry("- name: yb(Tensor self) -> (Tensor a, Tensor b)\n  shapes: [sizes(self), sizes(self), sizes(self)]\n",
                     "yb", "t.yaml:4:11: ", "different number of shapes than the op has outputs", "shapes");
    expect_bad_entry("- name: yb(Tensor self) -> (Tensor a, Tensor b)\n"
                     "  shapes:\n"
                     "    - sizes(self)\n"
                     "    - sizes(self)\n"
                     "    - sizes(self)\n",
                     "yb", "t.yaml:5:5: ", "different number of shapes than the op has outputs", "shapes");
    expect_bad_entry("- name: yb(Tensor self) -> (Tensor a, Tensor b)\n  shape: sizes(self)\n", "yb", "t.yaml:4:10: ",
                     "different number of shapes than the op has outputs", "shape");
}
END_TEST

/* ------------------------------------------------------------------ other keys */

START_TEST(test_duplicate_op_name)
{
    /* the position is the duplicate's name; the message says where the first one is */
    expect_bad_entry("- name: ya(Tensor self, Tensor other) -> Tensor\n  shape: sizes(self)\n", NULL, "t.yaml:3:9: ",
                     "is already defined", "ya");
    opr_ctx *ctx = bare_ctx();
    int n = -1;
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, GOOD_A "- name: add(Tensor self) -> Tensor\n  shape: sizes(self)\n",
                                                   "t.yaml", &n),
                     OPR_ERR_PARSE);
    ck_assert_int_eq(n, 1);
    ck_assert_msg(strncmp(opr_last_error(), "t.yaml:3:9: ", 12) == 0, "%s", opr_last_error());
    assert_has(opr_last_error(), "op 'add' is already defined", "error");
    assert_has(opr_last_error(), "core.yaml:", "error");
    ck_assert_int_eq(opr_op_num_args(opr_op_find(ctx, "add")), 3); /* the built-in one stays */
    /* loading the same text again refuses every entry */
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, GOOD_A, "again.yaml", &n), OPR_ERR_PARSE);
    ck_assert_int_eq(n, 0);
    assert_has(opr_last_error(), "again.yaml:1:9: ", "error");
    assert_has(opr_last_error(), "t.yaml:1", "error");
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_unknown_dtype)
{
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  dtypes: [f32, f128]\n  shape: sizes(self)\n", "yb", "t.yaml:4:17: ",
                     "unknown dtype", "f128");
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  dtype: int8\n  shape: sizes(self)\n", "yb", "t.yaml:4:10: ",
                     "unknown dtype", "int8");
    expect_bad_entry("- name: yb(Tensor self, Tensor idx) -> Tensor\n  arg_dtypes: {idx: u32}\n  shape: sizes(self)\n", "yb",
                     "t.yaml:4:21: ", "unknown dtype", "u32");
    expect_bad_entry("- name: yb(Tensor self) -> (Tensor a, Tensor b)\n  shapes: [sizes(self), sizes(self)]\n"
                     "  dtypes_out: [T, u8]\n",
                     "yb", "t.yaml:5:19: ", "unknown dtype", "u8");
}
END_TEST

START_TEST(test_bad_view_kind)
{
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  view: transposed\n", "yb", "t.yaml:4:9: ", "unknown view kind",
                     "transposed");
    expect_bad_entry("- name: yb(int n) -> Tensor\n  view: t\n", "yb", "t.yaml:3:3: ",
                     "must take a Tensor first and return one Tensor", "yb");
}
END_TEST

/* ------------------------------------------------------------------ error log, files */

START_TEST(test_errors_accumulate)
{
    static const char text[] =
        "- name: e1(Tensor self, foo x) -> Tensor\n"  /* 1: unknown type at col 25 */
        "  shape: sizes(self)\n"
        "- name: e2(Tensor self) -> Tensor\n"         /* 3 */
        "  shape: sizes(self)\n"
        "  colour: blue\n"                            /* 5: unknown key at col 3 */
        "- name: ok1(Tensor self) -> Tensor\n"        /* 6: loads */
        "  shape: sizes(self)\n"
        "- name: e3(Tensor self) -> Tensor\n"         /* 8 */
        "  dtypes: [f32, f128]\n"                     /* 9: unknown dtype at col 17 */
        "  shape: sizes(self)\n";
    opr_ctx *ctx = bare_ctx();
    int n = -1;
    size_t before = strlen(opr_registry_errors(ctx));
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, text, "acc.yaml", &n), OPR_ERR_PARSE);
    ck_assert_int_eq(n, 1);
    ck_assert_ptr_nonnull(opr_op_find(ctx, "ok1"));
    /* the first error, with a pointer to the rest */
    ck_assert_msg(strncmp(opr_last_error(), "acc.yaml:1:25: ", 15) == 0, "%s", opr_last_error());
    assert_has(opr_last_error(), "see opr_registry_errors", "error");
    char *errs = strdup(errors_since(ctx, before));
    ck_assert_int_eq(count_lines(errs), 3);
    const char *l1 = strstr(errs, "acc.yaml:1:25: "), *l2 = strstr(errs, "acc.yaml:5:3: "),
               *l3 = strstr(errs, "acc.yaml:9:17: ");
    ck_assert_msg(l1 && l2 && l3 && l1 < l2 && l2 < l3, "errors in order expected:\n%s", errs);
    assert_has(errs, "'foo'", "errors");
    assert_has(errs, "'colour'", "errors");
    assert_has(errs, "'f128'", "errors");

    /* a later load appends */
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, "- name: e4(Tensor self) -> Tensor\n  view: nope\n", "more.yaml", NULL),
                     OPR_ERR_PARSE);
    ck_assert_msg(strncmp(opr_last_error(), "more.yaml:2:9: ", 15) == 0, "%s", opr_last_error());
    ck_assert_ptr_null(strstr(opr_last_error(), "see opr_registry_errors")); /* only one error this time */
    const char *all = errors_since(ctx, before);
    ck_assert_int_eq(count_lines(all), 4);
    ck_assert_int_eq(strncmp(all, errs, strlen(errs)), 0);
    assert_has(all + strlen(errs), "more.yaml:2:9: ", "errors");
    free(errs);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_load_from_file)
{
    const char *base = getenv("TMPDIR");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/opreg_yaml_XXXXXX", base && base[0] ? base : "/tmp");
    int fd = mkstemp(path);
    ck_assert_msg(fd >= 0, "mkstemp: %s", strerror(errno));
    static const char text[] =
        "- name: file_op(Tensor self, Tensor other) -> Tensor\n"
        "  shape: broadcast(self, other)\n"
        "- name: file_bad(Tensor self) -> Tensor\n"
        "  shape: sizes(self) +\n";
    ck_assert_int_eq(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);

    opr_ctx *ctx = bare_ctx();
    int n = -1;
    ck_assert_int_eq(opr_registry_load_yaml(ctx, path, &n), OPR_ERR_PARSE);
    ck_assert_int_eq(n, 1);
    char where[PATH_MAX + 32];
    snprintf(where, sizeof where, "%s:4:23: ", path); /* "  shape: sizes(self) +" ends at col 22 */
    ck_assert_msg(strncmp(opr_last_error(), where, strlen(where)) == 0, "'%s' does not start with '%s'",
                  opr_last_error(), where);
    assert_has(opr_last_error(), "unexpected end", "error");
    const opr_op *op = opr_op_find(ctx, "file_op");
    ck_assert_ptr_nonnull(op);
    ck_assert_int_eq(opr_op_num_args(op), 2);
    ck_assert_ptr_null(opr_op_find(ctx, "file_bad"));
    assert_has(opr_registry_errors(ctx), where, "opr_registry_errors");

    /* a file that cannot be read */
    unlink(path);
    ck_assert_int_eq(opr_registry_load_yaml(ctx, path, &n), OPR_ERR_IO);
    ck_assert_int_eq(n, 0);
    assert_has(opr_last_error(), path, "error");
    ck_assert_int_eq(opr_registry_load_yaml(ctx, NULL, &n), OPR_ERR_INVALID);
    ck_assert_int_eq(opr_registry_load_yaml(NULL, path, &n), OPR_ERR_INVALID);
    tu_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ hostile definitions */

/* Each of these once crashed, leaked or hit undefined behaviour (their inputs are in
 * tests/fuzz/regress/yaml too); each must now be an error with a position. */

START_TEST(test_sample_shape_overflow)
{
    /* 2^31 * 2^31 elements: the buffer size wrapped, and make_tensor wrote past it */
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(self)\n"
                     "  samples: [{self: [2147483648, 2147483648]}]\n",
                     "yb", "t.yaml:5:20: ", "too many elements", NULL);
    /* 2^65 wraps to 0: the count itself overflowed */
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(self)\n"
                     "  samples: [{self: {shape: [4294967296, 4294967296, 2]}}]\n",
                     "yb", "t.yaml:5:28: ", "too many elements", NULL);
    /* in a tensor list as well */
    expect_bad_entry("- name: yb(Tensor[] xs) -> Tensor\n  shape: \"[1]\"\n"
                     "  samples: [{xs: [[2], [4611686018427387904, 4]]}]\n",
                     "yb", "t.yaml:5:24: ", "too many elements", NULL);
}
END_TEST

START_TEST(test_sample_range_bounds)
{
    /* a bound that is not a scalar was read as NULL */
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(self)\n"
                     "  samples: [{self: {shape: [2], range: [[0], 1]}}]\n",
                     "yb", "t.yaml:5:41: ", "a range bound must be a number", "?");
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(self)\n"
                     "  samples: [{self: {shape: [2], range: [0, one]}}]\n",
                     "yb", "t.yaml:5:44: ", "a range bound must be a number", "one");
    /* values drawn from these would not convert to i64 */
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(self)\n"
                     "  samples: [{self: {shape: [2], range: [1e300, 1]}}]\n",
                     "yb", "t.yaml:5:41: ", "a range bound must be a number", "1e300");
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(self)\n"
                     "  samples: [{self: {shape: [2], range: [0, .nan]}}]\n",
                     "yb", "t.yaml:5:44: ", "a range bound must be a number", ".nan");
}
END_TEST

/* ATen's spellings the pointwise ops need: `*` before keyword-only arguments (skipped:
 * every argument stays positional), `str?` (None or a string), a formula calling an
 * overload by its dotted name, and sample values that are nan, inf, -0.0 or beyond
 * +-2^53 (an i64 tensor refuses what it cannot hold exactly, when the sample is made). */
START_TEST(test_aten_spellings)
{
    const char *text =
        "- name: yk.Tensor_mode(Tensor self, Tensor other, *, str? mode) -> Tensor\n"
        "  shape: broadcast(self, other)\n"
        "  dtypes: [f32, f64, i64]\n"
        "  self: yk.Tensor_mode(grad, other, mode)\n"
        "  samples: [{self: [2], other: [2], mode: None},"
        " {self: {shape: [4], values: [nan, inf, -0.0, 1e300]}, other: {shape: [4], values: [-inf, 2, 3, 4]}, mode: trunc},"
        " {self: {shape: [1], dtype: i64, values: [1e300]}, other: {shape: [1], dtype: i64, values: [1]}, mode: trunc}]\n";
    opr_ctx *ctx = bare_ctx();
    int n = -1;
    ck_assert_msg(opr_registry_load_yaml_string(ctx, text, "k.yaml", &n) == OPR_OK, "%s", opr_last_error());
    const opr_op *op = opr_op_find(ctx, "yk.Tensor_mode");
    ck_assert_ptr_nonnull(op);
    ck_assert_int_eq(opr_op_num_args(op), 3);
    ck_assert_str_eq(opr_op_arg_type(op, 2), "str?");
    opr_value args[8];
    opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS];
    int nargs = 0, nowned = 0;
    ck_assert_msg(opr_op_sample_args(op, 0, OPR_F64, OPR_CPU, 1, args, &nargs, owned, &nowned) == OPR_OK, "%s",
                  opr_last_error());
    ck_assert_int_eq(args[2].kind, OPR_V_NONE);
    for (int i = 0; i < nowned; i++) opr_tensor_release(owned[i]);
    ck_assert_msg(opr_op_sample_args(op, 1, OPR_F64, OPR_CPU, 1, args, &nargs, owned, &nowned) == OPR_OK, "%s",
                  opr_last_error());
    ck_assert_str_eq(args[2].u.s, "trunc");
    double *v = tu_to_f64(args[0].u.t);
    ck_assert(isnan(v[0]) && isinf(v[1]) && v[1] > 0 && v[2] == 0 && signbit(v[2]) && v[3] == 1e300);
    free(v);
    for (int i = 0; i < nowned; i++) opr_tensor_release(owned[i]);
    ck_assert_int_eq(opr_op_sample_args(op, 2, OPR_I64, OPR_CPU, 1, args, &nargs, owned, &nowned), OPR_ERR_INVALID);
    assert_has(opr_last_error(), "in an i64 tensor", "error");
    tu_ctx_free(ctx);
    expect_bad_entry("- name: yb(Tensor self, *) -> Tensor\n  shape: sizes(self)\n", "yb", "t.yaml:3:", "after '*'", NULL);
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(self)\n"
                     "  samples: [{self: {shape: [2], values: [1, one]}}]\n",
                     "yb", "t.yaml:5:", "a value must be a number", "one");
}
END_TEST

START_TEST(test_sample_duplicate_key)
{
    /* the second tensor replaced the first, which leaked */
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(self)\n  samples: [{self: [2], self: [3]}]\n", "yb",
                     "t.yaml:5:25: ", "duplicate key", "self");
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(self)\n"
                     "  samples: [{self: {shape: [2], shape: [3]}}]\n",
                     "yb", "t.yaml:5:33: ", "duplicate key", "shape");
    /* and in the mappings of a fused derivative entry */
    expect_bad_entry("- name: yb(Tensor self, Tensor other) -> Tensor\n  shape: broadcast(self, other)\n"
                     "  self, other: {self: grad, other: grad, self: neg(grad)}\n",
                     "yb", "t.yaml:5:42: ", "duplicate key", "self");
}
END_TEST

START_TEST(test_shape_and_shapes)
{
    /* both keys set op->shapes[0]: the first expression leaked */
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: sizes(self)\n  shapes: [sizes(self)]\n", "yb",
                     "t.yaml:5:3: ", "the output shapes are already given", "shapes");
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  shape: dynamic\n  shapes: [sizes(self)]\n", "yb",
                     "t.yaml:5:3: ", "the output shapes are already given", "shapes");
}
END_TEST

START_TEST(test_formula_call_binding)
{
    /* a call leaving out a required argument: costing it read the missing slot */
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  view: contiguous\n  self: sum_to(grad)\n", "yb",
                     "t.yaml:5:9: ", "sum_to() needs argument", "size");
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  view: contiguous\n  self: mul(grad, scale=2)\n", "yb",
                     "t.yaml:5:9: ", "mul() has no argument named", "scale");
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  view: contiguous\n  self: neg(grad, grad)\n", "yb",
                     "t.yaml:5:9: ", "neg() takes fewer arguments", NULL);
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  view: contiguous\n  self: mul(grad, self=grad)\n", "yb",
                     "t.yaml:5:9: ", "mul() gets this argument twice", "self");
    /* nested, and in a `let` */
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  view: contiguous\n"
                     "  self: {let: {g: neg(grad)}, self: \"mul(g, sum_to(g))\"}\n",
                     "yb", "t.yaml:5:45: ", "sum_to() needs argument", "size");
    expect_bad_entry("- name: yb(Tensor self) -> Tensor\n  view: contiguous\n  self: {let: {g: mul(grad)}, self: g}\n", "yb",
                     "t.yaml:5:19: ", "mul() needs argument", "other");

    /* an op defined after the formula is checked when the plan links it: an error, not
     * a crash, and the same each time */
    opr_ctx *ctx = bare_ctx();
    int n = -1;
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx,
                                                   "- name: yl(Tensor self) -> Tensor\n  view: contiguous\n  self: ylater(grad)\n"
                                                   "- name: ylater(Tensor self, Tensor other) -> Tensor\n  shape: sizes(self)\n",
                                                   "late.yaml", &n),
                     OPR_OK);
    ck_assert_int_eq(n, 2);
    const opr_op *yl = opr_op_find(ctx, "yl");
    ck_assert_ptr_nonnull(yl);
    opr_tensor *x = opr_tensor_new(ctx, OPR_F32, 2, (int64_t[]){2, 3}, OPR_CPU);
    opr_value args[1] = {opr_v_tensor(x)};
    const char *rg[1] = {"self"};
    char buf[512];
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(opr_plan_explain(yl, args, 1, rg, 1, buf, sizeof buf), OPR_ERR_PARSE);
        assert_has(opr_last_error(), "late.yaml:3:9: ", "error");
        assert_has(opr_last_error(), "ylater() needs argument 'other'", "error");
    }
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_matmul_shape_0d)
{
    /* matmul_shape read the last dimension of a 0-d tensor: shape[-1] */
    opr_ctx *ctx = bare_ctx();
    int n = -1;
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx,
                                                   "- name: ym(Tensor self) -> Tensor\n  view: contiguous\n"
                                                   "  self: reshape(grad, matmul_shape(self, self))\n",
                                                   "m.yaml", &n),
                     OPR_OK);
    const opr_op *ym = opr_op_find(ctx, "ym");
    ck_assert_ptr_nonnull(ym);
    const char *rg[1] = {"self"};
    char buf[512];
    for (int ndim = 0; ndim < 2; ndim++) {
        /* 0-d, then 1-d: a vector with itself is a valid (0-d) product */
        opr_tensor *x = opr_tensor_new(ctx, OPR_F32, ndim, (int64_t[]){3}, OPR_CPU);
        opr_value args[1] = {opr_v_tensor(x)};
        int rc = opr_plan_explain(ym, args, 1, rg, 1, buf, sizeof buf);
        if (ndim == 0) {
            ck_assert_int_eq(rc, OPR_ERR_INVALID);
            assert_has(opr_last_error(), "matmul: both arguments need at least one dimension", "error");
        } else {
            ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
        }
        opr_tensor_release(x);
    }
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_diag_shape_rank)
{
    /* costing a formula evaluates the shapes of the ops it calls without their checks:
     * diag_shape read shape[0] and shape[1] of whatever it was given */
    opr_ctx *ctx = bare_ctx();
    int n = -1;
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx,
                                                   "- name: yg(Tensor self) -> Tensor\n  shape: sizes(self)\n"
                                                   "  self: reshape(diag(grad), sizes(self))\n",
                                                   "g.yaml", &n),
                     OPR_OK);
    const opr_op *yg = opr_op_find(ctx, "yg");
    ck_assert_ptr_nonnull(yg);
    const char *rg[1] = {"self"};
    char buf[512];
    static const int64_t shape[3] = {2, 2, 2};
    for (int ndim = 0; ndim <= 3; ndim++) {
        opr_tensor *x = opr_tensor_new(ctx, OPR_F32, ndim, shape, OPR_CPU);
        opr_value args[1] = {opr_v_tensor(x)};
        int rc = opr_plan_explain(yg, args, 1, rg, 1, buf, sizeof buf);
        if (ndim == 1 || ndim == 2) {
            ck_assert_msg(rc == OPR_OK, "%d-d: %s", ndim, opr_last_error());
        } else {
            ck_assert_int_eq(rc, OPR_ERR_INVALID);
            assert_has(opr_last_error(), "diag_shape: expected a 1-d or 2-d tensor", "error");
        }
        opr_tensor_release(x);
    }
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_index_empty_list)
{
    /* indexing the sizes of a 0-d tensor failed with whatever message came before */
    opr_ctx *ctx = bare_ctx();
    int n = -1;
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx,
                                                   "- name: yi(Tensor self) -> Tensor\n  view: contiguous\n"
                                                   "  check:\n    - sizes(self)[-1] > 0\n",
                                                   "i.yaml", &n),
                     OPR_OK);
    opr_tensor *x = opr_tensor_new(ctx, OPR_F32, 0, NULL, OPR_CPU);
    opr_value args[1] = {opr_v_tensor(x)};
    opr_tensor *r = NULL;
    /* a failure first, so that a stale message would show */
    ck_assert_ptr_null(opr_op_find(ctx, "no_such_op"));
    ck_assert_int_eq(opr_call(opr_op_find(ctx, "yi"), args, 1, &r, 1), OPR_ERR_INVALID);
    assert_has(opr_last_error(), "index into an empty list", "error");
    opr_tensor_release(x);
    tu_ctx_free(ctx);
}
END_TEST

/* Nesting the expression parser accepts (its limit is 256 levels). */
#define EXPR_DEPTH_OK 200

/* "(((...)))" with `levels` brackets around sizes(self), as a shape. */
static char *nested_shape_entry(int levels, const char *open, const char *close)
{
    size_t lo = strlen(open), lc = strlen(close), len = 128 + (size_t)levels * (lo + lc);
    char *text = malloc(len);
    ck_assert_ptr_nonnull(text);
    size_t k = (size_t)snprintf(text, len, "- name: yd(Tensor self) -> Tensor\n  shape: \"");
    for (int i = 0; i < levels; i++, k += lo) memcpy(text + k, open, lo);
    k += (size_t)snprintf(text + k, len - k, "sizes(self)");
    for (int i = 0; i < levels; i++, k += lc) memcpy(text + k, close, lc);
    snprintf(text + k, len - k, "\"\n");
    return text;
}

START_TEST(test_expr_depth_limit)
{
    int n = -1;
    /* brackets add recursion but no node; lists and calls add both */
    static const struct { const char *open, *close; } kinds[] = {{"(", ")"}, {"[", "]"}, {"reduce(", ")"}};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        static const int levels[] = {200, 300, 900};
        for (int l = 0; l < 3; l++) {
            opr_ctx *ctx = bare_ctx();
            char *text = nested_shape_entry(levels[l], kinds[k].open, kinds[k].close);
            int rc = opr_registry_load_yaml_string(ctx, text, "deep.yaml", &n);
            free(text);
            if (levels[l] <= EXPR_DEPTH_OK) { /* within the limit: parsed (and, for these, loaded) */
                ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
                ck_assert_ptr_nonnull(opr_op_find(ctx, "yd"));
            } else {
                ck_assert_int_eq(rc, OPR_ERR_PARSE);
                ck_assert_msg(strncmp(opr_last_error(), "deep.yaml:2:", 12) == 0, "%s", opr_last_error());
                assert_has(opr_last_error(), "expression nested too deeply", "error");
                ck_assert_ptr_null(opr_op_find(ctx, "yd"));
            }
            tu_ctx_free(ctx);
        }
    }
    /* the original crash: 100000 levels overflowed the stack */
    opr_ctx *ctx = bare_ctx();
    char *text = nested_shape_entry(100000, "(", ")");
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, text, "deep.yaml", &n), OPR_ERR_PARSE);
    free(text);
    ck_assert_msg(strncmp(opr_last_error(), "deep.yaml:2:", 12) == 0, "%s", opr_last_error());
    assert_has(opr_last_error(), "expression nested too deeply", "error");
    /* a tree as deep without any bracket: operators in a row */
    static const char *const chains[] = {"1 + ", "-", "!", "- !"};
    for (size_t c = 0; c < sizeof chains / sizeof chains[0]; c++) {
        size_t lc = strlen(chains[c]), len = 128 + 1000 * lc;
        char *text = malloc(len);
        ck_assert_ptr_nonnull(text);
        size_t k = (size_t)snprintf(text, len, "- name: yz(Tensor self) -> Tensor\n  shape: sizes(self)\n  flops: \"");
        for (int i = 0; i < 1000; i++, k += lc) memcpy(text + k, chains[c], lc);
        snprintf(text + k, len - k, "1\"\n");
        ck_assert_int_eq(opr_registry_load_yaml_string(ctx, text, "chain.yaml", &n), OPR_ERR_PARSE);
        free(text);
        assert_has(opr_last_error(), "expression nested too deeply", "error");
        ck_assert_ptr_null(opr_op_find(ctx, "yz"));
    }
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_yaml_deep_nesting)
{
    /* YAML nesting itself: libyaml builds the document without recursion, but takes
     * time quadratic in the depth of flow collections, so deep brackets are refused
     * before it reads them */
    enum { LEVELS = 100000 };
    char *text = malloc(2 * LEVELS + 128);
    ck_assert_ptr_nonnull(text);
    int k = snprintf(text, 128, "- name: yd(Tensor self) -> Tensor\n  shape: sizes(self)\n  samples: ");
    memset(text + k, '[', LEVELS);
    memset(text + k + LEVELS, ']', LEVELS);
    text[k + 2 * LEVELS] = '\0';
    opr_ctx *ctx = bare_ctx();
    int n = -1;
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, text, "deep.yaml", &n), OPR_ERR_PARSE);
    /* the 1001st bracket, 12 columns in */
    ck_assert_msg(strncmp(opr_last_error(), "deep.yaml:3:1012: ", 18) == 0, "%s", opr_last_error());
    assert_has(opr_last_error(), "brackets nested deeper than 1000 levels", "error");
    ck_assert_int_eq(n, 0);
    /* within the limit the document is read, and the loader reads a fixed depth of it */
    text[k + 900] = '\0';
    memset(text + k + 450, ']', 450);
    ck_assert_int_eq(opr_registry_load_yaml_string(ctx, text, "deep.yaml", &n), OPR_ERR_PARSE);
    ck_assert_msg(strncmp(opr_last_error(), "deep.yaml:3:13: ", 16) == 0, "%s", opr_last_error());
    assert_has(opr_last_error(), "each sample is a mapping", "error");
    ck_assert_int_eq(n, 0);
    free(text);
    tu_ctx_free(ctx);
}
END_TEST

#if OPREG_ALLOC_HOOK
START_TEST(test_allocation_failure)
{
    /* every kind of key, so that every allocation of the loader is reached: for each N
     * the Nth allocation fails, and the load must end in OPR_ERR_NOMEM with nothing of
     * the entry registered (its fused kernel slot included), or succeed whole */
    static const char text[] =
        "- name: yf(Tensor self, Tensor other, float alpha=1.5, int[] dims=[0], str mode=\"x\", int? k=None)"
        " -> (Tensor out, Tensor aux)\n"
        "  dtypes: [f32, f64]\n"
        "  check: [alpha > 0, dim(self) >= 0]\n"
        "  shapes:\n"
        "    - broadcast(self, other)\n"
        "    - \"[numel(self)]\"\n"
        "  dtypes_out: [T, i64]\n"
        "  flops: 2 * numel(self)\n"
        "  self: mul(grads[0], alpha)\n"
        "  other: {let: {g: \"neg(grads[0])\"}, other: \"sum_to(g, sizes(other))\"}\n"
        "  self, other: {kernel: yf_backward, needs: {self: [other], other: [self]},"
        " flops: {self: numel(self), other: numel(other)}}\n"
        "  samples: [{self: [2, 3], other: {shape: [3], range: [0, 1]}, alpha: 2, dims: [1, 0]}, {self: [2], other: [2]}]\n";
    opr_ctx *ctx = bare_ctx();
    int nops = opr_op_count(ctx), n = -1, rc = OPR_ERR_NOMEM;
    long attempt;
    for (attempt = 0; attempt < 100000; attempt++) {
        alloc_hook_arm(attempt);
        rc = opr_registry_load_yaml_string(ctx, text, "oom.yaml", &n);
        alloc_hook_disarm();
        if (!alloc_hook_fired()) break; /* every allocation succeeded: done */
        if (rc == OPR_OK) continue; /* the failed allocation had a fallback: checked below, once */
        ck_assert_msg(rc == OPR_ERR_NOMEM, "allocation %ld failed: expected OPR_ERR_NOMEM, got %s (%s)", attempt,
                      opr_status_name(rc), opr_last_error());
        assert_has(opr_last_error(), "out of memory", "error");
        ck_assert_int_eq(n, 0);
        ck_assert_int_eq(opr_op_count(ctx), nops);
        ck_assert_ptr_null(opr_op_find(ctx, "yf"));
        ck_assert_ptr_null(opr_op_find(ctx, "yf_backward"));
    }
    ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    ck_assert_int_gt(attempt, 50); /* the sweep did reach the loader's allocations */
    const opr_op *yf = opr_op_find(ctx, "yf");
    ck_assert_ptr_nonnull(yf);
    ck_assert_int_eq(opr_op_count(ctx), nops + 2);
    ck_assert_int_eq(opr_op_sample_count(yf), 2);
    ck_assert_int_eq(opr_op_grad_candidate_count(yf), 3);
    ck_assert_ptr_nonnull(opr_op_find(ctx, "yf_backward"));
    tu_ctx_free(ctx);
}
END_TEST
#endif

/* ------------------------------------------------------------------ user ops at call time */

START_TEST(test_user_op_without_kernel)
{
    /* with the CPU plugin loaded: the user op is checked, then has no kernel */
    opr_ctx *ctx = tu_ctx();
    int n = -1;
    int rc = opr_registry_load_yaml_string(ctx,
                                           "- name: yk(Tensor self, int n) -> Tensor\n"
                                           "  check: [n > 0, dim(self) == 1]\n"
                                           "  shape: \"[n, size(self, 0)]\"\n",
                                           "yk.yaml", &n);
    ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    ck_assert_int_eq(n, 1);
    const opr_op *yk = opr_op_find(ctx, "yk");
    ck_assert_ptr_nonnull(yk);
    ck_assert(!opr_op_has_kernel(yk, 0));
    float v[3] = {1, 2, 3};
    opr_tensor *a = f32_tensor(ctx, 1, (int64_t[]){3}, v);
    opr_value args[2] = {opr_v_tensor(a), opr_v_int(0)};
    tu_expect_fail(ctx, "yk", args, 2, 1, OPR_ERR_INVALID, "yk: check failed: n > 0");
    args[1] = opr_v_int(2);
    tu_expect_fail(ctx, "yk", args, 2, 1, OPR_ERR_NOT_FOUND, "yk: no kernel for device cpu");
    tu_expect_fail(ctx, "yk", args, 1, 1, OPR_ERR_INVALID, "missing argument 'n'");
    args[1] = opr_v_double(2);
    tu_expect_fail(ctx, "yk", args, 2, 1, OPR_ERR_INVALID, "argument 'n' expects int, got float");
    opr_tensor_release(a);
    tu_ctx_free(ctx);
}
END_TEST

#ifdef OPREG_FIXTURE_DIR
START_TEST(test_user_op_with_fixture_kernel)
{
    /* defined here at run time; its kernel comes from the fx_minor_new fixture plugin */
    opr_ctx *ctx = bare_ctx();
    int n = -1;
    int rc = opr_registry_load_yaml_string(ctx, "- name: fx_triple(Tensor self) -> Tensor\n  shape: sizes(self)\n",
                                           "fx.yaml", &n);
    ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    const opr_op *op = opr_op_find(ctx, "fx_triple");
    ck_assert_ptr_nonnull(op);
    ck_assert(!opr_op_has_kernel(op, 0));
    rc = opr_plugin_load(ctx, OPREG_FIXTURE_DIR "/libfx_minor_new.so");
    ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    ck_assert(opr_op_has_kernel(op, 0));
    double v[4] = {1, -2, 0.5, 4};
    opr_tensor *a = opr_tensor_from_data(ctx, OPR_F64, 2, (int64_t[]){2, 2}, v, OPR_CPU);
    opr_value args[1] = {opr_v_tensor(a)};
    opr_tensor *r = NULL;
    ck_assert_int_eq(opr_call(op, args, 1, &r, 1), OPR_OK);
    ck_assert_int_eq(opr_tensor_dtype(r), OPR_F64);
    double *got = tu_to_f64(r);
    for (int i = 0; i < 4; i++) ck_assert_double_eq(got[i], 3 * v[i]);
    free(got);
    opr_tensor_release(r);
    opr_tensor_release(a);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_str_argument_in_samples_and_backward)
{
    /* A str argument reaches the kernel, a sample that gives it, and the backward
     * formula (the node keeps its own copy: the caller's string is gone by then). */
    opr_ctx *ctx = bare_ctx();
    int n = -1;
    int rc = opr_registry_load_yaml_string(ctx,
        "- name: fx_triple(Tensor self, str mode=\"plain\") -> Tensor\n"
        "  check: [mode == \"triple\" || mode == \"plain\"]\n"
        "  shape: sizes(self)\n"
        "  self: mul(grad, (mode == \"triple\") * 2 + 1)\n"
        "  samples: [{self: [2, 3], mode: triple}]\n", "fx.yaml", &n);
    ck_assert_msg(rc == OPR_OK, "%s", opr_last_error());
    const opr_op *op = opr_op_find(ctx, "fx_triple");
    ck_assert_msg(opr_plugin_load(ctx, OPREG_FIXTURE_DIR "/libfx_minor_new.so") == OPR_OK, "%s", opr_last_error());
    ck_assert_msg(opr_plugin_load(ctx, OPREG_CPU_PLUGIN_FILE) == OPR_OK, "%s", opr_last_error());

    opr_value sargs[2];
    opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS];
    int nargs = 0, nowned = 0;
    ck_assert_int_eq(opr_op_sample_args(op, 0, OPR_F64, OPR_CPU, 1, sargs, &nargs, owned, &nowned), OPR_OK);
    ck_assert_int_eq(nargs, 2);
    ck_assert_int_eq(sargs[1].kind, OPR_V_STRING);
    ck_assert_str_eq(sargs[1].u.s, "triple");
    for (int i = 0; i < nowned; i++) opr_tensor_release(owned[i]);

    double v[2] = {1, -2};
    opr_tensor *a = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){2}, v, OPR_CPU);
    ck_assert(opr_set_requires_grad(a, true) == OPR_OK);
    char *mode = strdup("triple"); /* freed before backward runs */
    opr_value args[2] = {opr_v_tensor(a), opr_v_string(mode)};
    opr_tensor *r = NULL;
    ck_assert_msg(opr_call(op, args, 2, &r, 1) == OPR_OK, "%s", opr_last_error());
    memset(mode, 'x', 6);
    free(mode);
    opr_tensor *s = tu_call1(ctx, "sum", (opr_value[]){opr_v_tensor(r)}, 1);
    ck_assert_msg(opr_backward(s, NULL, NULL) == OPR_OK, "%s", opr_last_error());
    double *g = tu_to_f64(opr_grad(a));
    ck_assert_double_eq(g[0], 3);
    ck_assert_double_eq(g[1], 3);
    free(g);
    opr_tensor_release(s);
    opr_tensor_release(r);
    opr_tensor_release(a);
    tu_ctx_free(ctx);
}
END_TEST
#endif

static Suite *yaml_suite(void)
{
    Suite *s = suite_create("yaml");
    TCase *t = tcase_create("valid");
    tcase_add_test(t, test_builtin_yaml_is_clean);
    tcase_add_test(t, test_user_ops_load);
    tcase_add_test(t, test_empty_and_comment_only);
    tcase_add_test(t, test_user_op_without_kernel);
#ifdef OPREG_FIXTURE_DIR
    tcase_add_test(t, test_user_op_with_fixture_kernel);
    tcase_add_test(t, test_str_argument_in_samples_and_backward);
#endif
    suite_add_tcase(s, t);
    t = tcase_create("structure");
    tcase_add_test(t, test_bad_yaml_syntax);
    tcase_add_test(t, test_root_not_a_sequence);
    tcase_add_test(t, test_entry_not_a_mapping);
    tcase_add_test(t, test_missing_name);
    tcase_add_test(t, test_missing_shape);
    tcase_add_test(t, test_unknown_key);
    suite_add_tcase(s, t);
    t = tcase_create("schema");
    tcase_add_test(t, test_schema_unknown_type);
    tcase_add_test(t, test_schema_missing_arrow);
    tcase_add_test(t, test_schema_bad_default);
    tcase_add_test(t, test_schema_duplicate_arg);
    suite_add_tcase(s, t);
    t = tcase_create("expressions");
    tcase_add_test(t, test_expr_unexpected_token);
    tcase_add_test(t, test_expr_unknown_name);
    tcase_add_test(t, test_expr_unknown_function);
    tcase_add_test(t, test_kernel_keys_without_kernel);
    tcase_add_test(t, test_wrong_shape_count);
    suite_add_tcase(s, t);
    t = tcase_create("keys");
    tcase_add_test(t, test_duplicate_op_name);
    tcase_add_test(t, test_unknown_dtype);
    tcase_add_test(t, test_tolerance_key);
    tcase_add_test(t, test_bad_view_kind);
    tcase_add_test(t, test_errors_accumulate);
    tcase_add_test(t, test_load_from_file);
    suite_add_tcase(s, t);
    t = tcase_create("hostile");
    tcase_add_test(t, test_sample_shape_overflow);
    tcase_add_test(t, test_sample_range_bounds);
    tcase_add_test(t, test_aten_spellings);
    tcase_add_test(t, test_sample_duplicate_key);
    tcase_add_test(t, test_shape_and_shapes);
    tcase_add_test(t, test_formula_call_binding);
    tcase_add_test(t, test_matmul_shape_0d);
    tcase_add_test(t, test_index_empty_list);
    tcase_add_test(t, test_diag_shape_rank);
    tcase_add_test(t, test_expr_depth_limit);
    tcase_add_test(t, test_yaml_deep_nesting);
#if OPREG_ALLOC_HOOK
    tcase_add_test(t, test_allocation_failure);
#endif
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return tu_run(yaml_suite()); }
