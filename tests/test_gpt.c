/* The character-level GPT example (examples/gpt/) against PyTorch 1.13:
 *   layers        each model_* functional on a small input against PyTorch's values
 *                 (F.gelu both forms, F.layer_norm, F.cross_entropy with ignore_index,
 *                 masked softmax attention, computed in f64 with torch 1.13 and written
 *                 down here; embedding's padding_idx gradient and dropout's masks by hand)
 *   bad input     the functionals and the model refuse bad arguments with a message
 *   reproducible  the same seed gives the same losses, another seed other losses (with
 *                 dropout: the same opr_manual_seed, the same losses)
 *   losses        the first 20 training losses of a small configuration, f64, against
 *                 tests/gpt_reference.py (the same model, weights and batches in
 *                 PyTorch, AdamW included), within 1e-6 relative
 *
 * The last needs a python3 with torch ($OPREG_PYTHON when set, else python3 on PATH,
 * then /usr/bin/python3). Without one the other tests run, the reason is printed and
 * the suite exits 77 (ctest's skip). */
#include "test_util.h"

#include "gpt/gpt_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef OPREG_GPT_TEXT
#error "OPREG_GPT_TEXT must name examples/data/sonnets.txt"
#endif
#ifndef OPREG_GPT_REFERENCE
#error "OPREG_GPT_REFERENCE must name tests/gpt_reference.py"
#endif

#define STEPS 20
static char python[256];
static opr_ctx *ctx;
static gpt_ops ops;

static void setup(void)
{
    ctx = tu_ctx();
    ck_assert_int_eq(gpt_ops_init(ctx, &ops), OPR_OK);
}

static void teardown(void) { tu_ctx_free(ctx); }

static opr_tensor *f64_tensor(int nd, const int64_t *shape, const double *v)
{
    return opr_tensor_from_data(ctx, OPR_F64, nd, shape, v, OPR_CPU);
}

static void expect_values(opr_tensor *t, const double *want, int n, const char *what)
{
    ck_assert_msg(t != NULL, "%s: %s", what, gpt_error());
    ck_assert_int_eq(opr_tensor_numel(t), n);
    double *got = tu_to_f64(t);
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= 1e-12 * (1 + fabs(want[i])), "%s[%d]: %.17g, PyTorch %.17g", what, i,
                      got[i], want[i]);
    free(got);
    opr_tensor_release(t);
}

START_TEST(layers_match_pytorch)
{
    opr_tensor *x = f64_tensor(1, (int64_t[]){5}, (double[]){-2, -0.5, 0, 1, 3});
    expect_values(model_gelu(&ops, x, "tanh"),
                  (double[]){-0.045402305912224938, -0.15428599017485606, 0, 0.84119199060827676, 2.9963626079182268}, 5,
                  "gelu tanh");
    expect_values(model_gelu(&ops, x, "none"),
                  (double[]){-0.04550026389635842, -0.15426876936299344, 0, 0.841344746068543, 2.99595030590511}, 5,
                  "gelu none");

    opr_tensor *a = f64_tensor(2, (int64_t[]){2, 3}, (double[]){1, 2, 4, 0, 0, 3});
    opr_tensor *w = f64_tensor(1, (int64_t[]){3}, (double[]){1, 2, 0.5});
    opr_tensor *b = f64_tensor(1, (int64_t[]){3}, (double[]){0, 1, -1});
    expect_values(model_layer_norm(&ops, a, (int64_t[]){3}, 1, w, b, 1e-5),
                  (double[]){-1.0690415314502979, 0.46547923427485083, -0.33184904284356409, -0.70710501342622367,
                             -0.41421002685244734, -0.29289498657377633},
                  6, "layer_norm");

    opr_tensor *logits = f64_tensor(2, (int64_t[]){2, 3}, (double[]){1, 2, 0.5, -1, 0, 3});
    opr_tensor *target = opr_tensor_from_data(ctx, OPR_I64, 1, (int64_t[]){2}, (int64_t[]){2, 0}, OPR_CPU);
    opr_tensor *t_ign = opr_tensor_from_data(ctx, OPR_I64, 1, (int64_t[]){2}, (int64_t[]){-100, 0}, OPR_CPU);
    expect_values(model_cross_entropy(&ops, logits, target, NULL, "mean", -100, 0), (double[]){3.0151263439326872}, 1,
                  "cross_entropy");
    expect_values(model_cross_entropy(&ops, logits, target, NULL, "sum", -100, 0), (double[]){6.0302526878653744}, 1,
                  "cross_entropy sum");
    expect_values(model_cross_entropy(&ops, logits, target, NULL, "none", -100, 0),
                  (double[]){1.964368784107945, 4.065883903757429}, 2, "cross_entropy none");
    /* an ignored target leaves its row out of the sum and of the mean's count */
    expect_values(model_cross_entropy(&ops, logits, target, NULL, "mean", 0, 0), (double[]){1.964368784107945}, 1,
                  "cross_entropy ignore_index 0");
    expect_values(model_cross_entropy(&ops, logits, t_ign, NULL, "mean", -100, 0), (double[]){4.065883903757429}, 1,
                  "cross_entropy target -100");

    opr_tensor *q = f64_tensor(3, (int64_t[]){1, 3, 2}, (double[]){1, 0, 0, 1, 1, 1});
    opr_tensor *k = f64_tensor(3, (int64_t[]){1, 3, 2}, (double[]){1, 2, 0, 1, 2, 0});
    opr_tensor *v = f64_tensor(3, (int64_t[]){1, 3, 2}, (double[]){1, 0, 0, 2, 3, 1});
    const double causal[6] = {1, 0, 0.66976154932665688, 0.66047690134668613, 1.4279615744391421, 0.56405389982801601};
    expect_values(model_attention(&ops, q, k, v, NULL, 0.0, true), causal, 6, "causal attention");
    /* the same mask spelled out as a float attn_mask */
    opr_tensor *mask = f64_tensor(2, (int64_t[]){3, 3}, (double[]){0, -INFINITY, -INFINITY, 0, 0, -INFINITY, 0, 0, 0});
    expect_values(model_attention(&ops, q, k, v, mask, 0.0, false), causal, 6, "attention with a causal attn_mask");

    opr_tensor *table = f64_tensor(2, (int64_t[]){3, 2}, (double[]){10, 11, 20, 21, 30, 31});
    opr_tensor *idx = opr_tensor_from_data(ctx, OPR_I64, 2, (int64_t[]){2, 2}, (int64_t[]){2, 0, 1, 2}, OPR_CPU);
    opr_tensor *e = model_embedding(&ops, table, idx, -1);
    ck_assert_int_eq(opr_tensor_ndim(e), 3);
    expect_values(e, (double[]){30, 31, 10, 11, 20, 21, 30, 31}, 8, "embedding");

    /* padding_idx 2: the same rows forward; backward of a sum, each row's gradient is
     * the number of times it was picked, except the padding row's, which stays 0 */
    ck_assert_int_eq(opr_set_requires_grad(table, true), OPR_OK);
    opr_tensor *ep = model_embedding(&ops, table, idx, 2);
    ck_assert_msg(ep != NULL, "%s", gpt_error());
    opr_tensor *ones = f64_tensor(3, (int64_t[]){2, 2, 2}, (double[]){1, 1, 1, 1, 1, 1, 1, 1});
    ck_assert_msg(opr_backward(ep, ones, NULL) == OPR_OK, "%s", opr_last_error());
    expect_values(opr_tensor_retain(opr_grad(table)), (double[]){1, 1, 1, 1, 0, 0}, 6, "embedding padding_idx grad");
    expect_values(ep, (double[]){30, 31, 10, 11, 20, 21, 30, 31}, 8, "embedding padding_idx");

    /* dropout off (eval, or p = 0) is the identity; on, every element is 0 or x / (1 - p),
     * and the same seed gives the same mask */
    expect_values(model_dropout(&ops, x, 0.5, false), (double[]){-2, -0.5, 0, 1, 3}, 5, "dropout in eval");
    expect_values(model_dropout(&ops, x, 0, true), (double[]){-2, -0.5, 0, 1, 3}, 5, "dropout p = 0");
    opr_tensor *big = tu_rand(ctx, OPR_F64, 1, (int64_t[]){64}, 1, 2);
    double *in = tu_to_f64(big);
    opr_manual_seed(ctx, 42);
    opr_tensor *d1 = model_dropout(&ops, big, 0.5, true), *d2 = model_dropout(&ops, big, 0.5, true);
    opr_manual_seed(ctx, 42);
    opr_tensor *d3 = model_dropout(&ops, big, 0.5, true);
    ck_assert_msg(d1 && d2 && d3, "%s", gpt_error());
    double *v1 = tu_to_f64(d1), *v2 = tu_to_f64(d2), *v3 = tu_to_f64(d3);
    int zeros = 0, differ = 0;
    for (int i = 0; i < 64; i++) {
        ck_assert_msg(v1[i] == 0 || v1[i] == 2 * in[i], "dropout[%d] = %g of %g", i, v1[i], in[i]);
        ck_assert_msg(v3[i] == v1[i], "dropout[%d]: %g, then %g after the same seed", i, v1[i], v3[i]);
        zeros += v1[i] == 0;
        differ += v2[i] != v1[i];
    }
    /* 64 draws at p = 0.5: 0 or 64 zeros, or two equal masks, have odds 2^-63 */
    ck_assert_msg(zeros > 0 && zeros < 64, "dropout zeroed %d of 64", zeros);
    ck_assert_msg(differ > 0, "two training calls drew the same mask");
    free(in), free(v1), free(v2), free(v3);
    GPT_RELEASE(x, a, w, b, logits, target, t_ign, q, k, v, mask, table, idx, ones, big, d1, d2, d3);
}
END_TEST

static void expect_refused(opr_tensor *t, const char *needle)
{
    ck_assert_msg(t == NULL, "expected a refusal mentioning '%s'", needle);
    ck_assert_msg(strstr(gpt_error(), needle) != NULL, "message '%s' lacks '%s'", gpt_error(), needle);
}

START_TEST(bad_input_is_refused)
{
    opr_tensor *x = tu_rand(ctx, OPR_F64, 2, (int64_t[]){2, 3}, -1, 1);
    opr_tensor *idx_f = tu_rand(ctx, OPR_F64, 1, (int64_t[]){2}, 0, 2);
    opr_tensor *idx_bad = opr_tensor_from_data(ctx, OPR_I64, 1, (int64_t[]){2}, (int64_t[]){0, 7}, OPR_CPU);
    expect_refused(model_layer_norm(&ops, x, (int64_t[]){4}, 1, NULL, NULL, 1e-5), "normalized_shape");
    expect_refused(model_layer_norm(&ops, x, (int64_t[]){1}, 1, NULL, NULL, 1e-5), "normalized_shape");
    expect_refused(model_gelu(&ops, x, "erf"), "approximate");
    expect_refused(model_embedding(&ops, x, idx_f, -1), "'indices' must be i64");
    expect_refused(model_embedding(&ops, x, idx_bad, -1), "index 7 is out of range");
    expect_refused(model_embedding(&ops, x, idx_bad, 2), "padding_idx < size(weight, 0)");
    expect_refused(model_dropout(&ops, x, 1.5, true), "p <= 1");
    expect_refused(model_attention(&ops, x, x, x, NULL, 0.1, false), "dropout_p == 0");
    expect_refused(model_cross_entropy(&ops, x, idx_f, NULL, "mean", -100, 0), "'target' must be i64");
    expect_refused(model_cross_entropy(&ops, x, idx_bad, NULL, "avg", -100, 0), "reduction");
    /* a failure earlier in a chain passes through, its message kept */
    expect_refused(model_gelu(&ops, model_gelu(&ops, x, "erf"), "tanh"), "approximate == \"none\"");

    gpt_config cfg = {.n_layer = 1, .n_head = 3, .n_embd = 8, .block_size = 4, .vocab_size = 5, .dtype = OPR_F64};
    ck_assert_ptr_null(gpt_model_new(ctx, &cfg, 1, OPR_CPU));
    ck_assert_msg(strstr(gpt_error(), "multiple of heads"), "%s", gpt_error());
    cfg.n_head = 2;
    gpt_model *m = gpt_model_new(ctx, &cfg, 1, OPR_CPU);
    ck_assert_msg(m != NULL, "%s", gpt_error());
    opr_tensor *too_long = opr_tensor_new(ctx, OPR_I64, 2, (int64_t[]){1, 5}, OPR_CPU), *loss = NULL;
    ck_assert_int_eq(gpt_model_forward(m, too_long, NULL, false, &loss, NULL), OPR_ERR_INVALID);
    ck_assert_msg(strstr(gpt_error(), "T <= 4"), "%s", gpt_error());
    gpt_model_free(m);
    GPT_RELEASE(x, idx_f, idx_bad, too_long);
}
END_TEST

/* The losses of `steps` training steps of the test configuration, with dropout p
 * (0: none). */
static void train_losses(const gpt_text *text, uint64_t seed, int steps, double p, double *losses)
{
    gpt_config cfg = {.n_layer = 2, .n_head = 2, .n_embd = 32, .block_size = 16, .vocab_size = text->vocab_size,
                      .dropout = p, .dtype = OPR_F64};
    gpt_model *m = gpt_model_new(ctx, &cfg, seed, OPR_CPU);
    ck_assert_msg(m != NULL, "%s", gpt_error());
    gpt_train_opts o = {.steps = steps, .batch = 4, .lr = 3e-3, .weight_decay = 0.01, .seed = seed, .losses = losses};
    ck_assert_msg(gpt_train(m, text, &o, NULL) == OPR_OK, "%s", gpt_error());
    gpt_model_free(m);
}

START_TEST(same_seed_same_losses)
{
    gpt_text text;
    ck_assert_msg(gpt_text_load(OPREG_GPT_TEXT, &text) == OPR_OK, "%s", gpt_error());
    double a[3], b[3], c[3], d1[3], d2[3];
    train_losses(&text, 5, 3, 0, a);
    train_losses(&text, 5, 3, 0, b);
    train_losses(&text, 6, 3, 0, c);
    for (int i = 0; i < 3; i++) ck_assert_msg(a[i] == b[i], "step %d: %.17g then %.17g with the same seed", i + 1, a[i], b[i]);
    ck_assert_msg(a[0] != c[0], "seeds 5 and 6 gave the same first loss %.17g", a[0]);
    ck_assert_msg(a[2] < a[0], "the loss did not go down: %g -> %g", a[0], a[2]);
    /* dropout's masks come from the context's generator: the same opr_manual_seed, the
     * same losses; they differ from the losses without dropout */
    opr_manual_seed(ctx, 9);
    train_losses(&text, 5, 3, 0.2, d1);
    opr_manual_seed(ctx, 9);
    train_losses(&text, 5, 3, 0.2, d2);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(d1[i] == d2[i], "dropout, step %d: %.17g then %.17g with the same seed", i + 1, d1[i], d2[i]);
    ck_assert_msg(d1[0] != a[0], "dropout 0.2 left the first loss at %.17g", a[0]);
    gpt_text_free(&text);
}
END_TEST

START_TEST(losses_match_pytorch)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "'%s' -B '%s' --text '%s' --layers 2 --heads 2 --embd 32 --context 16 --batch 4 --steps %d --lr 3e-3 "
             "--weight-decay 0.01 --seed 1337",
             python, OPREG_GPT_REFERENCE, OPREG_GPT_TEXT, STEPS);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    double want[STEPS];
    int n = 0;
    while (n < STEPS && fscanf(p, " loss %lf", &want[n]) == 1) n++;
    const int status = pclose(p);
    ck_assert_msg(status == 0 && n == STEPS, "%s: status %d after %d losses of %d", cmd, status, n, STEPS);

    gpt_text text;
    ck_assert_msg(gpt_text_load(OPREG_GPT_TEXT, &text) == OPR_OK, "%s", gpt_error());
    double got[STEPS], worst = 0;
    train_losses(&text, 1337, STEPS, 0, got);
    for (int i = 0; i < STEPS; i++) {
        const double rel = fabs(got[i] - want[i]) / fabs(want[i]);
        worst = fmax(worst, rel);
        ck_assert_msg(rel <= 1e-6, "step %d: loss %.17g, PyTorch %.17g (relative difference %.3g)", i + 1, got[i],
                      want[i], rel);
    }
    ck_assert_msg(got[STEPS - 1] < got[0] - 0.5, "the loss barely moved (%g -> %g): a weak test", got[0], got[STEPS - 1]);
    printf("test_gpt: %d losses %.6f .. %.6f agree with PyTorch, largest relative difference %.3g\n", STEPS, got[0],
           got[STEPS - 1], worst);
    gpt_text_free(&text);
}
END_TEST

static bool find_python(char *why, size_t len)
{
    const char *env = getenv("OPREG_PYTHON");
    const char *cands[2] = {"python3", "/usr/bin/python3"};
    if (env && env[0]) cands[0] = env, cands[1] = NULL;
    why[0] = '\0';
    for (int i = 0; i < 2 && cands[i]; i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "'%s' -c 'import torch' >/dev/null 2>&1", cands[i]);
        if (system(cmd) == 0) {
            snprintf(python, sizeof python, "%s", cands[i]);
            return true;
        }
        size_t used = strlen(why);
        snprintf(why + used, len - used, "%s%s", used ? ", " : "", cands[i]);
    }
    return false;
}

int main(void)
{
    char why[1024];
    const bool have_torch = find_python(why, sizeof why);
    Suite *s = suite_create("gpt");
    TCase *tc = tcase_create("gpt");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, layers_match_pytorch);
    tcase_add_test(tc, bad_input_is_refused);
    tcase_add_test(tc, same_seed_same_losses);
    if (have_torch) tcase_add_test(tc, losses_match_pytorch);
    suite_add_tcase(s, tc);
    const int rc = tu_run(s);
    if (!have_torch) {
        printf("test_gpt: SKIPPED the comparison with PyTorch: no python3 with torch (tried %s); install "
               "python3-torch (scripts/setup.sh) or set OPREG_PYTHON\n", why);
        return rc ? rc : 77;
    }
    return rc;
}
