/* The ResNet example (examples/resnet) against torchvision's ResNet class with the same
 * weights (oracle/resnet.py): ResNet(BasicBlock, [1, 1, 1, 1], num_classes=4), width 64.
 *   - f64, training mode, one batch: the loss, the gradient of every parameter and every
 *     running statistic after the forward, within 1e-10 (relative to 1 + |reference|);
 *   - f32: the losses of three SGD steps (lr 0.01, momentum 0.9, weight decay 1e-4) from the same
 *     weights, within 1e-5;
 *   - with the backbone frozen, the graph holds the head only and saves exactly what the
 *     head's gradients read (opr_plan_saved_bytes of its calls); with the stages before
 *     layer4 frozen, the convolutions whose inputs do not require grad save those inputs
 *     and no weight.
 * The comparison with torchvision is left out (with the reason printed) without a
 * python3 that has torch and torchvision; the frozen cases need neither. */
#include "oracle_files.h"
#include "test_util.h"

#include "resnet/resnet_model.h"
#include "resnet/resnet_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef OPREG_ORACLE_DIR
#error "OPREG_ORACLE_DIR must name tests/oracle"
#endif

#define MAXT 96

static const resnet_config cfg64 = {.blocks = {1, 1, 1, 1}, .width = 64, .num_classes = 4, .in_channels = 3,
                                    .bn_momentum = 0.1, .bn_eps = 1e-5, .dtype = OPR_F64};

static void expect_close(const of_recs *rs, const char *name, const opr_tensor *t, double tol)
{
    of_expect_close_case(rs, "resnet", name, t, tol, OF_NAN_FAILS);
}

START_TEST(resnet_matches_torchvision)
{
    opr_ctx *ctx = tu_ctx();
    resnet_model *m = resnet_model_new(ctx, &cfg64, 5, OPR_CPU);
    ck_assert_msg(m != NULL, "%s", resnet_error());
    /* the inputs: the weights as built, then the batches */
    const char *names[MAXT];
    opr_tensor *ts[MAXT];
    char keys[MAXT][96];
    int n = 0;
    for (int i = 0; i < m->n_params; i++) names[n] = m->param_names[i], ts[n++] = m->params[i];
    for (int i = 0; i < m->n_buffers; i++) names[n] = m->buffer_names[i], ts[n++] = m->buffers[i];
    opr_tensor *batch[8];
    for (int k = 0; k < 4; k++) {
        ck_assert(!resnet_batch(ctx, OPR_F64, OPR_CPU, 77, k * 8, k ? 8 : 4, &batch[2 * k], &batch[2 * k + 1]));
        snprintf(keys[2 * k], sizeof keys[0], "x%d", k);
        snprintf(keys[2 * k + 1], sizeof keys[0], "y%d", k);
        names[n] = keys[2 * k], ts[n++] = batch[2 * k];
        names[n] = keys[2 * k + 1], ts[n++] = batch[2 * k + 1];
    }
    ck_assert(n <= MAXT);
    of_recs rs;
    of_run(OPREG_ORACLE_DIR, "resnet", names, ts, n, &rs);

    /* f64: loss, gradients, running statistics */
    opr_tensor *loss = NULL;
    ck_assert_msg(!resnet_model_forward(m, batch[0], batch[1], true, &loss, NULL), "%s", resnet_error());
    ck_assert_msg(!opr_backward(loss, NULL, NULL), "%s", opr_last_error());
    expect_close(&rs, "loss", loss, 1e-10);
    for (int i = 0; i < m->n_params; i++) {
        char key[128];
        snprintf(key, sizeof key, "g.%s", m->param_names[i]);
        ck_assert_msg(opr_grad(m->params[i]) != NULL, "no gradient for %s", m->param_names[i]);
        expect_close(&rs, key, opr_grad(m->params[i]), 1e-10);
    }
    for (int i = 0; i < m->n_buffers; i++) {
        char key[128];
        snprintf(key, sizeof key, "b.%s", m->buffer_names[i]);
        expect_close(&rs, key, m->buffers[i], 1e-10);
    }
    opr_tensor_release(loss);
    resnet_model_free(m);

    /* f32: three SGD steps from the same weights (the same draws, rounded) */
    resnet_config c32 = cfg64;
    c32.dtype = OPR_F32;
    m = resnet_model_new(ctx, &c32, 5, OPR_CPU);
    ck_assert_msg(m != NULL, "%s", resnet_error());
    resnet_sgd opt;
    ck_assert(!resnet_sgd_init(&opt, m, 0.01, 0.9, 1e-4));
    double losses[3];
    for (int k = 1; k <= 3; k++) {
        opr_tensor *x32 = NULL;
        ck_assert(!opr_call(opr_op_find(ctx, "to"), (opr_value[]){opr_v_tensor(batch[2 * k]), opr_v_string("f32")}, 2, &x32, 1));
        ck_assert_msg(!resnet_model_forward(m, x32, batch[2 * k + 1], true, &loss, NULL), "%s", resnet_error());
        ck_assert_msg(!opr_backward(loss, NULL, NULL), "%s", opr_last_error());
        ck_assert(!opr_tensor_copy_to_host_f64(loss, &losses[k - 1], 1));
        ck_assert(!resnet_sgd_step(&opt, m));
        opr_tensor_release(loss);
        opr_tensor_release(x32);
    }
    opr_tensor *l32 = opr_tensor_from_data(ctx, OPR_F64, 1, (int64_t[]){3}, losses, OPR_CPU);
    expect_close(&rs, "losses32", l32, 1e-5);
    printf("resnet: f64 loss and %d gradients match torchvision; f32 SGD losses %.6f %.6f %.6f match\n", m->n_params,
           losses[0], losses[1], losses[2]);
    opr_tensor_release(l32);
    resnet_sgd_free(&opt);
    resnet_model_free(m);
    for (int k = 0; k < 8; k++) opr_tensor_release(batch[k]);
    of_recs_free(&rs);
    tu_ctx_free(ctx);
}
END_TEST

/* Per-op totals of a graph (opr_autograd_walk); the convolutions one by one. */
typedef struct walk_sum {
    int nodes, convs, norms, pools;
    uint64_t saved;
    uint64_t conv_saved[8];
    char conv_plan[8][96];
} walk_sum;

static void sum_node(void *ud, const opr_node_info *info)
{
    walk_sum *w = ud;
    w->nodes++;
    if (!strcmp(info->op, "convolution")) {
        if (w->convs < 8) {
            w->conv_saved[w->convs] = info->saved_bytes;
            snprintf(w->conv_plan[w->convs], sizeof w->conv_plan[0], "%s", info->plan);
        }
        w->convs++;
    }
    w->norms += !strcmp(info->op, "native_batch_norm");
    w->pools += !strcmp(info->op, "max_pool2d_with_indices") || !strcmp(info->op, "_adaptive_avg_pool2d");
    w->saved += info->saved_bytes;
}

/* The width-16 model of the frozen tests, f32, with only the parameters whose names
 * start with one of `trainable` requiring grad. */
static resnet_model *partly_frozen(opr_ctx *ctx, const char *const *trainable, int n_trainable)
{
    resnet_config c = cfg64;
    c.width = 16;
    c.dtype = OPR_F32;
    resnet_model *m = resnet_model_new(ctx, &c, 3, OPR_CPU);
    ck_assert_msg(m != NULL, "%s", resnet_error());
    for (int i = 0; i < m->n_params; i++) {
        bool trains = false;
        for (int k = 0; k < n_trainable; k++) trains |= !strncmp(m->param_names[i], trainable[k], strlen(trainable[k]));
        if (!trains) ck_assert(!opr_set_requires_grad(m->params[i], false));
    }
    return m;
}

/* Fine-tuning the head of a frozen backbone: no node of the backbone is recorded, and the
 * graph saves exactly what the head's gradients read, however large the activations
 * behind it: the features fc reads for its weight's gradient, and the logits and
 * targets of the loss (the bytes opr_plan_saved_bytes gives for those two calls). */
START_TEST(frozen_backbone_saves_only_the_head)
{
    opr_ctx *ctx = tu_ctx();
    resnet_model *m = partly_frozen(ctx, (const char *[]){"fc."}, 1);
    opr_tensor *x, *y, *loss = NULL;
    const int n = 16;
    ck_assert(!resnet_batch(ctx, OPR_F32, OPR_CPU, 9, 0, n, &x, &y));
    ck_assert_msg(!resnet_model_forward(m, x, y, true, &loss, NULL), "%s", resnet_error());
    walk_sum w = {0};
    ck_assert_int_ge(opr_autograd_walk(loss, sum_node, &w), 1);
    const uint64_t head_in = (uint64_t)n * (uint64_t)(m->cfg.width << 3) * 4, logits = (uint64_t)n * 4 * 4,
                   targets = (uint64_t)n * 8;
    ck_assert_msg(w.convs == 0 && w.norms == 0 && w.pools == 0, "the frozen backbone recorded %d convolutions, %d batch norms, %d pools",
                  w.convs, w.norms, w.pools);
    uint64_t planned = 0;
    ck_assert_msg(!resnet_head_saved_bytes(m, n, &planned), "%s", resnet_error());
    ck_assert_msg(planned == head_in + logits + targets, "the head's plans save %llu bytes; its gradients read %llu",
                  (unsigned long long)planned, (unsigned long long)(head_in + logits + targets));
    ck_assert_msg(w.saved == planned, "%d nodes saved %llu bytes; the head's gradients read %llu", w.nodes,
                  (unsigned long long)w.saved, (unsigned long long)planned);
    ck_assert(!opr_backward(loss, NULL, NULL));
    ck_assert(opr_grad(resnet_model_tensor(m, "fc.weight", false)) != NULL);
    ck_assert(opr_grad(resnet_model_tensor(m, "conv1.weight", false)) == NULL);
    printf("resnet, frozen backbone: %d node(s) recorded, %llu bytes saved\n", w.nodes, (unsigned long long)w.saved);
    opr_tensor_release(loss);
    opr_tensor_release(x);
    opr_tensor_release(y);
    resnet_model_free(m);
    tu_ctx_free(ctx);
}
END_TEST

/* Fine-tuning the last stage and the head: the first convolutions of layer4 (its first
 * conv and the downsample) get inputs that do not require grad, so they compute their
 * weights' gradients only and save their inputs and nothing else (PyTorch's convolution
 * saves input and weight whatever is asked); the second conv, whose input requires
 * grad, saves both. */
START_TEST(frozen_stages_save_no_weight_for_frozen_inputs)
{
    opr_ctx *ctx = tu_ctx();
    resnet_model *m = partly_frozen(ctx, (const char *[]){"layer4.", "fc."}, 2);
    opr_tensor *x, *y, *loss = NULL;
    const int n = 4;
    ck_assert(!resnet_batch(ctx, OPR_F32, OPR_CPU, 9, 0, n, &x, &y));
    ck_assert_msg(!resnet_model_forward(m, x, y, true, &loss, NULL), "%s", resnet_error());
    walk_sum w = {0};
    ck_assert_int_ge(opr_autograd_walk(loss, sum_node, &w), 1);
    /* layer4.0: conv1, conv2 and downsample.0; layer3's output (the frozen input) is
     * [n, 4 width, 2, 2] for 32x32 images, the weights of conv1 [8 width, 4 width, 3, 3] */
    ck_assert_int_eq(w.convs, 3);
    const int64_t wd = m->cfg.width;
    const uint64_t frozen_in = (uint64_t)(n * 4 * wd * 2 * 2) * 4, conv2_w = (uint64_t)(8 * wd * 8 * wd * 9) * 4,
                   conv2_in = (uint64_t)(n * 8 * wd * 1 * 1) * 4;
    int input_only = 0, both = 0;
    for (int i = 0; i < w.convs; i++) {
        if (w.conv_saved[i] == frozen_in) input_only++;
        else if (w.conv_saved[i] == conv2_in + conv2_w) both++;
        else ck_abort_msg("convolution node %d (plan %s) saved %llu bytes; expected %llu (its frozen input) or %llu", i,
                          w.conv_plan[i], (unsigned long long)w.conv_saved[i], (unsigned long long)frozen_in,
                          (unsigned long long)(conv2_in + conv2_w));
    }
    ck_assert_int_eq(input_only, 2);
    ck_assert_int_eq(both, 1);
    ck_assert(!opr_backward(loss, NULL, NULL));
    ck_assert(opr_grad(resnet_model_tensor(m, "layer4.0.conv1.weight", false)) != NULL);
    ck_assert(opr_grad(resnet_model_tensor(m, "layer3.0.conv1.weight", false)) == NULL);
    opr_tensor_release(loss);
    opr_tensor_release(x);
    opr_tensor_release(y);
    resnet_model_free(m);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    /* the frozen tests need no oracle; the comparison with torchvision does */
    char why[256], cmd[600], skip[400] = "";
    if (!of_find_python(why, sizeof why)) {
        snprintf(skip, sizeof skip, "no python3 with torch (tried %s)", why);
    } else {
        snprintf(cmd, sizeof cmd, "'%s' -c 'import torchvision' >/dev/null 2>&1", of_python());
        if (system(cmd) != 0) snprintf(skip, sizeof skip, "%s has torch but not torchvision (Debian: python3-torchvision)", of_python());
    }
    Suite *s = suite_create("resnet");
    TCase *tc = tcase_create("resnet");
    tcase_set_timeout(tc, 600);
    if (skip[0]) printf("SKIP resnet_matches_torchvision: %s\n", skip);
    else tcase_add_test(tc, resnet_matches_torchvision);
    tcase_add_test(tc, frozen_backbone_saves_only_the_head);
    tcase_add_test(tc, frozen_stages_save_no_weight_for_frozen_inputs);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
