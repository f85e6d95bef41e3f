/* opreg demo --model resnet: options, the run and its report. */
#include "resnet_demo.h"

#include "resnet_data.h"
#include "resnet_train.h"
#include "saved_table.h"

#include <stdlib.h>
#include <string.h>

typedef struct demo_opts {
    int steps, batch, width, blocks, test, log_every;
    double lr;
    unsigned long long seed;
} demo_opts;

static const demo_opts defaults = {.steps = 400, .batch = 32, .width = 16, .blocks = 1, .test = 512, .log_every = 50,
                                   .lr = 0.03, .seed = 1};

void resnet_demo_options_help(FILE *out)
{
    fprintf(out,
            "  --steps N       training steps (default %d)\n"
            "  --batch N       images per step (default %d)\n"
            "  --width N       channels of the first stage; stage s has N << s (default %d; torchvision's 64)\n"
            "  --blocks N      BasicBlocks per stage (default %d; resnet18 has 2)\n"
            "  --lr X          SGD learning rate, falling linearly to 0; momentum 0.9, weight decay 1e-4 (default %g)\n"
            "  --test N        held-out images to measure the accuracy on (default %d)\n"
            "  --seed N        weights and data (default %llu)\n"
            "  --log-every N   print the loss every N steps (default %d)\n",
            defaults.steps, defaults.batch, defaults.width, defaults.blocks, defaults.lr, defaults.test, defaults.seed,
            defaults.log_every);
}

static int parse(int argc, char **argv, const char *prog, demo_opts *o)
{
    *o = defaults;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--model") || !strcmp(a, "--plugin") || !strcmp(a, "--yaml")) { i++; continue; }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: %s needs a value (or is not an option; see --help)\n", prog, a);
            return 2;
        }
        char *end;
        const char *v = argv[++i];
        long long n = strtoll(v, &end, 10);
        const bool is_int = *v && !*end;
        if (!strcmp(a, "--lr")) {
            o->lr = strtod(v, &end);
            if (!*v || *end || !(o->lr > 0)) goto bad;
            continue;
        }
        int *field = !strcmp(a, "--steps") ? &o->steps : !strcmp(a, "--batch") ? &o->batch : !strcmp(a, "--width") ? &o->width
                   : !strcmp(a, "--blocks") ? &o->blocks : !strcmp(a, "--test") ? &o->test
                   : !strcmp(a, "--log-every") ? &o->log_every : NULL;
        if (!strcmp(a, "--seed")) {
            if (!is_int || n < 0) goto bad;
            o->seed = (unsigned long long)n;
            continue;
        }
        if (!field) {
            fprintf(stderr, "%s: unknown option %s (see --help)\n", prog, a);
            return 2;
        }
        if (!is_int || n < (field == &o->log_every || field == &o->test ? 0 : 1) || n > 1 << 20) goto bad;
        *field = (int)n;
        continue;
    bad:
        fprintf(stderr, "%s: %s: bad value '%s'\n", prog, a, v);
        return 2;
    }
    return 0;
}

int resnet_demo_run(opr_ctx *ctx, int argc, char **argv, const char *prog)
{
    demo_opts o;
    int rc = parse(argc, argv, prog, &o);
    if (rc) return rc;
    const resnet_config cfg = {.blocks = {o.blocks, o.blocks, o.blocks, o.blocks}, .width = o.width,
                               .num_classes = RESNET_DATA_CLASSES, .in_channels = 3, .bn_momentum = 0.1, .bn_eps = 1e-5,
                               .dtype = OPR_F32};
    resnet_model *m = resnet_model_new(ctx, &cfg, o.seed, OPR_CPU);
    if (!m) {
        fprintf(stderr, "%s: %s\n", prog, resnet_error());
        return 1;
    }
    int64_t numel = 0;
    for (int i = 0; i < m->n_params; i++) numel += opr_tensor_numel(m->params[i]);
    printf("ResNet of BasicBlocks (%d per stage, widths %d-%d), %lld parameters, f32 on the cpu;\n"
           "%d steps of %d generated 32x32 images (4 shapes), SGD lr %g (falling linearly to 0) momentum 0.9\n",
           o.blocks, o.width, o.width << 3, (long long)numel, o.steps, o.batch, o.lr);
    double *losses = calloc((size_t)o.steps, sizeof *losses);
    saved_table table = {.n = 0};
    const resnet_train_opts to = {.steps = o.steps, .batch = o.batch, .lr = o.lr, .momentum = 0.9, .weight_decay = 1e-4,
                                  .decay = true, .data_seed = o.seed + 1, .log_every = o.log_every, .losses = losses, .walk = saved_table_collect,
                                  .walk_ud = &table};
    double rate = 0, acc = 0;
    opr_status st = losses ? resnet_train(m, &to, &rate) : OPR_ERR_NOMEM;
    if (!st && o.test) st = resnet_accuracy(m, o.seed + 2, 0, o.test, &acc);
    if (st) {
        fprintf(stderr, "%s: %s%s\n", prog, opr_status_name(st), resnet_error()[0] ? resnet_error() : opr_last_error());
        free(losses);
        resnet_model_free(m);
        return 1;
    }
    saved_table_print(&table, "per op, the first training step (the registry's choice against saving every input):");
    const bool defaults_used = o.steps == defaults.steps && o.batch == defaults.batch && o.width == defaults.width &&
                               o.blocks == defaults.blocks && o.lr == defaults.lr && o.test == defaults.test;
    printf("\n%.0f images/s; loss %.4f -> %.4f", rate, losses[0], losses[o.steps - 1]);
    if (o.test) printf("; test accuracy %.1f%% on %d held-out images", 100 * acc, o.test);
    if (defaults_used) printf(" (target %.0f%%)", 100 * RESNET_DEMO_TARGET);
    printf("\n");
    const bool ok = defaults_used ? acc >= RESNET_DEMO_TARGET : losses[o.steps - 1] < losses[0];
    free(losses);
    resnet_model_free(m);
    return ok ? 0 : 1;
}
