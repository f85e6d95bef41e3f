/* The GPT demo's options and run (see gpt_demo.h). */
#include "gpt_demo.h"

#include "gpt_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct demo_opts {
    gpt_config cfg;
    gpt_train_opts train;
    const char *text;
    int sample_chars;
    double temperature;
} demo_opts;

void gpt_demo_options_help(FILE *out)
{
    fprintf(out,
            "  --steps N         training steps (default 100; more steps, better samples)\n"
            "  --batch N         sequences per step (default 16)\n"
            "  --context N       characters per sequence, the model's block size (default 64)\n"
            "  --layers N        transformer blocks (default 2)\n"
            "  --heads N         attention heads (default 4)\n"
            "  --embd N          embedding width, a multiple of --heads (default 128)\n"
            "  --lr X            AdamW learning rate (default 0.003)\n"
            "  --weight-decay X  AdamW weight decay (default 0.01)\n"
            "  --dropout X       dropout probability in training (default 0)\n"
            "  --dtype T         f32 or f64 (default f32)\n"
            "  --seed N          seeds the weights, the batches, the dropout masks and the sample\n"
            "                    (default 1337)\n"
            "  --log-every N     print the loss and tokens/s every N steps (default 10)\n"
            "  --sample N        characters to generate after training (default 240; 0: none)\n"
            "  --temperature X   sampling temperature (default 0.8)\n"
            "  --text PATH       training text (default: Shakespeare's sonnets shipped with opreg,\n"
            "                    examples/data/sonnets.txt; also $OPREG_GPT_TEXT)\n"
            "Started by mpirun -np N (N > 1), it trains data-parallel: every rank runs its share of\n"
            "each batch (--batch must divide by N), the gradients are averaged in buckets while the\n"
            "backward runs (opr_ddp_backward), and rank 0 prints the group's loss and global tokens/s.\n");
}

/* The shipped text: $OPREG_GPT_TEXT, the installed share/opreg/data next to the running
 * program's prefix, then the source tree's copy this was built from. */
static const char *default_text(char *buf, size_t len)
{
    const char *env = getenv("OPREG_GPT_TEXT");
    if (env && env[0]) return env;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(buf, len, "%s/../share/opreg/data/sonnets.txt", exe);
            if (access(buf, R_OK) == 0) return buf;
        }
    }
#ifdef OPREG_GPT_TEXT_SOURCE
    return OPREG_GPT_TEXT_SOURCE;
#else
    return "examples/data/sonnets.txt";
#endif
}

static int parse(int argc, char **argv, demo_opts *o, const char *prog)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strncmp(a, "--", 2) && !v) {
            fprintf(stderr, "%s: %s needs a value\n", prog, a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--model") || !strcmp(a, "--plugin")) continue;
        else if (!strcmp(a, "--steps")) o->train.steps = atoi(v);
        else if (!strcmp(a, "--batch")) o->train.batch = atoi(v);
        else if (!strcmp(a, "--context")) o->cfg.block_size = atoi(v);
        else if (!strcmp(a, "--layers")) o->cfg.n_layer = atoi(v);
        else if (!strcmp(a, "--heads")) o->cfg.n_head = atoi(v);
        else if (!strcmp(a, "--embd")) o->cfg.n_embd = atoi(v);
        else if (!strcmp(a, "--lr")) o->train.lr = atof(v);
        else if (!strcmp(a, "--weight-decay")) o->train.weight_decay = atof(v);
        else if (!strcmp(a, "--dropout")) o->cfg.dropout = atof(v);
        else if (!strcmp(a, "--seed")) o->train.seed = strtoull(v, NULL, 0);
        else if (!strcmp(a, "--log-every")) o->train.log_every = atoi(v);
        else if (!strcmp(a, "--sample")) o->sample_chars = atoi(v);
        else if (!strcmp(a, "--temperature")) o->temperature = atof(v);
        else if (!strcmp(a, "--text")) o->text = v;
        else if (!strcmp(a, "--dtype")) {
            if (opr_dtype_parse(v, &o->cfg.dtype) || (o->cfg.dtype != OPR_F32 && o->cfg.dtype != OPR_F64)) {
                fprintf(stderr, "%s: --dtype %s: f32 or f64\n", prog, v);
                return 2;
            }
        } else {
            fprintf(stderr, "%s: unknown option %s (see --help)\n", prog, a);
            return 2;
        }
    }
    if (o->train.steps < 1 || o->train.steps > 10000000 || o->train.batch < 1 || o->train.batch > 65536 ||
        o->cfg.block_size < 1 || o->cfg.block_size > 65536 || o->cfg.n_layer < 1 || o->cfg.n_layer > 256 ||
        o->cfg.n_head < 1 || o->cfg.n_embd < 1 || o->cfg.n_embd > 65536 || o->cfg.n_embd % o->cfg.n_head ||
        !(o->train.lr > 0) || !(o->train.weight_decay >= 0) || !(o->cfg.dropout >= 0 && o->cfg.dropout < 1) ||
        o->train.log_every < 0 || o->sample_chars < 0 || o->sample_chars > 1000000 || !(o->temperature > 0)) {
        fprintf(stderr,
                "%s: out of range: --steps 1..10000000, --batch 1..65536, --context 1..65536, --layers 1..256,\n"
                "  --embd 1..65536 and a multiple of --heads, --lr > 0, --weight-decay >= 0, --dropout in [0, 1),\n"
                "  --log-every >= 0, --sample 0..1000000, --temperature > 0\n",
                prog);
        return 2;
    }
    return 0;
}

int gpt_demo_run(opr_ctx *ctx, int argc, char **argv, const char *prog)
{
    char text_buf[4200];
    demo_opts o = {
        .cfg = {.n_layer = 2, .n_head = 4, .n_embd = 128, .block_size = 64, .dtype = OPR_F32},
        .train = {.steps = 100, .batch = 16, .lr = 3e-3, .weight_decay = 0.01, .seed = 1337, .log_every = 10},
        .sample_chars = 240,
        .temperature = 0.8,
    };
    o.text = default_text(text_buf, sizeof text_buf);
    int rc = parse(argc, argv, &o, prog);
    if (rc) return rc;
    gpt_text text;
    if (gpt_text_load(o.text, &text)) {
        fprintf(stderr, "%s: %s (--text PATH or $OPREG_GPT_TEXT names another)\n", prog, gpt_error());
        return 1;
    }
    o.cfg.vocab_size = text.vocab_size;
    /* under a launcher (mpirun sets these), data parallel over the world */
    opr_group world = {.id = 0, .rank = 0, .size = 1};
    const char *launched = getenv("OMPI_COMM_WORLD_SIZE") ? getenv("OMPI_COMM_WORLD_SIZE") : getenv("PMI_SIZE");
    if (launched && atoi(launched) > 1 && opr_dist_world(ctx, &world)) {
        fprintf(stderr, "%s: started by a launcher, but: %s\n", prog, opr_last_error());
        gpt_text_free(&text);
        return 1;
    }
    if (o.train.batch % world.size) {
        fprintf(stderr, "%s: --batch %d does not split over %d ranks\n", prog, o.train.batch, world.size);
        gpt_text_free(&text);
        return 2;
    }
    const bool lead = world.rank == 0; /* the one that prints */
    if (!lead) {
        o.train.log_every = 0;
        o.sample_chars = 0;
    }
    opr_manual_seed(ctx, o.train.seed); /* the dropout masks (--dropout) */
    gpt_model *m = gpt_model_new(ctx, &o.cfg, o.train.seed, OPR_CPU);
    /* each step's loss, then (data parallel) its time and its step check's
     * (gpt_train_opts.step_us, check_us) */
    double *losses = m ? malloc(3 * (size_t)o.train.steps * sizeof *losses) : NULL;
    if (!m || !losses) {
        fprintf(stderr, "%s: %s\n", prog, m ? "out of memory" : gpt_error());
        gpt_model_free(m);
        gpt_text_free(&text);
        return 1;
    }
    o.train.losses = losses;
    if (world.size > 1) {
        o.train.step_us = losses + o.train.steps;
        o.train.check_us = losses + 2 * o.train.steps;
        o.train.rank = world.rank;
        o.train.ranks = world.size;
        if (opr_ddp_new(ctx, &world, m->params, m->n_params, NULL, &o.train.ddp)) {
            fprintf(stderr, "%s: data parallel: %s\n", prog, opr_last_error());
            free(losses);
            gpt_model_free(m);
            gpt_text_free(&text);
            return 1;
        }
    }
    if (lead) printf("%s: character-level GPT on %s (%lld characters, %d distinct)\n"
           "  %d layers, %d heads, width %d, context %d: %lld parameters, %s on cpu\n"
           "  %d AdamW steps (lr %g, weight decay %g) of %d sequences, seed %llu\n",
           prog, o.text, (long long)text.n, text.vocab_size, o.cfg.n_layer, o.cfg.n_head, o.cfg.n_embd,
           o.cfg.block_size, (long long)gpt_model_numel(m), opr_dtype_name(o.cfg.dtype), o.train.steps, o.train.lr,
           o.train.weight_decay, o.train.batch, (unsigned long long)o.train.seed);
    if (lead && world.size > 1)
        printf("  data parallel: %d ranks (MPI), %d of the %d sequences each, gradients averaged in %d bucket(s)\n",
               world.size, o.train.batch / world.size, o.train.batch, opr_ddp_bucket_count(o.train.ddp));
    fflush(stdout);
    double rate = 0;
    rc = 1;
    if (gpt_train(m, &text, &o.train, &rate)) {
        fprintf(stderr, "%s: training: %s\n", prog, gpt_error());
        goto out;
    }
    if (lead)
        printf("trained: loss %.4f -> %.4f, %.0f tokens/s over the run%s\n", losses[0], losses[o.train.steps - 1], rate,
               world.size > 1 ? " (all ranks)" : "");
    if (lead && o.train.ddp) { /* the last step's reductions: how much ran while the backward did */
        int n;
        const opr_ddp_event *ev = opr_ddp_events(o.train.ddp, &n);
        double backward_done = 0, comm = 0, overlapped = 0, start[64] = {0};
        for (int i = 0; i < n; i++)
            if (ev[i].kind == OPR_DDP_BACKWARD_DONE) backward_done = ev[i].t_us;
        for (int i = 0; i < n; i++) {
            if (ev[i].kind == OPR_DDP_BUCKET_STARTED && ev[i].index < 64) start[ev[i].index] = ev[i].t_us;
            if (ev[i].kind == OPR_DDP_BUCKET_DONE && ev[i].index < 64) {
                double s = start[ev[i].index], e = ev[i].t_us;
                comm += e - s;
                overlapped += fmax(0, fmin(backward_done, e) - s); /* in flight while the backward ran */
            }
        }
        printf("data parallel, last step: gradients reduced over %.2f ms, %.0f%% of it while the backward ran\n",
               comm / 1000, comm > 0 ? 100 * overlapped / comm : 0);
        /* the members' step check per step, against the step, over the second half of
         * the steps (the first ones warm up) */
        const int from = o.train.steps / 2, k = o.train.steps - from;
        const double check = gpt_median(o.train.check_us + from, k), step = gpt_median(o.train.step_us + from, k);
        printf("data parallel: the members' step check took %.0f us per step (median of %d steps), %.2f%% of a "
               "step (%.1f ms)\n", check, k, step > 0 ? 100 * check / step : 0, step / 1000);
    }
    if (o.sample_chars > 0) {
        char *sample = malloc((size_t)o.sample_chars + 1);
        if (!sample || gpt_sample(m, &text, o.train.seed, o.sample_chars, o.temperature, sample)) {
            fprintf(stderr, "%s: sampling: %s\n", prog, sample ? gpt_error() : "out of memory");
            free(sample);
            goto out;
        }
        printf("sample (temperature %g, seed %llu):\n%s\n", o.temperature, (unsigned long long)o.train.seed, sample);
        free(sample);
    }
    rc = o.train.steps == 1 || losses[o.train.steps - 1] < losses[0] ? 0 : 1;
    if (rc) fprintf(stderr, "%s: the loss did not go down\n", prog);
out:
    opr_ddp_free(o.train.ddp);
    free(losses);
    gpt_model_free(m);
    gpt_text_free(&text);
    return rc;
}
