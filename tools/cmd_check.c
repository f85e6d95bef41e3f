/* opreg check: cross-backend conformance. For every op with samples, every dtype the
 * backend runs it in is compared with the CPU plugin in f64 (forward), on the samples
 * and their layout and size variants, and so is every backward candidate x
 * requires-grad mask. Without another backend the CPU plugin is checked against
 * itself, f32 against f64. The work runs in supervised worker processes
 * (check_supervisor.h), one unit per op x backend (check_run.h); this file parses the
 * options and hands the records to the report (check_report.h). */
#include "check_report.h"
#include "check_rerun.h"
#include "check_run.h"
#include "check_supervisor.h"
#include "cli.h"
#include "plugin_probe.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void)
{
    printf("usage: opreg check [--backend NAME[:ORDINAL]] [--ordinals first|all] [--ops LIST]... [--dtype LIST]...\n"
           "                   [--no-backward] [--no-variants] [--no-large] [--perf] [-v] [--format table|json]\n"
           "                   [--junit FILE] [--timeout S] [--no-fork] [--allow-unchecked] [--strict] [--sample N]\n"
           "                   [--variant LABEL] [--rerun-failed REPORT] [--plugin PATH]... [--yaml FILE]...\n\n"
           "Runs every op that has samples in its YAML entry on each loaded backend other than\n"
           "the CPU reference (on its first ordinal; NAME:N runs on ordinal N, --ordinals all on\n"
           "each ordinal, a column per ordinal), in every dtype the op allows, and compares the\n"
           "outputs with the CPU plugin in f64: each sample as written and its layout and size\n"
           "variants (transposed, step-2 slice, storage offset and stride-0 views of each input, size-0\n"
           "and size-1 dims, and a large variant of at least 64k elements, in the first dtype\n"
           "the op takes; --no-variants: the samples alone, --no-large: all but the large\n"
           "variant, which is slow on emulated devices). Then the backward,\n"
           "with opr_gradcheck (see opreg gradcheck): every derivative candidate (formulas, fused\n"
           "kernels, fast variants, and the plan chosen by cost) x requires-grad mask against\n"
           "finite differences in f64 on the CPU, never against another candidate. Without\n"
           "another backend (or with --backend cpu) the CPU plugin is checked against itself:\n"
           "forward f32 against f64, backward in f32 and f64. Outputs have guard regions and\n"
           "inputs are checked unchanged after every kernel call.\n\n"
           "Each op x backend runs in a worker process: a kernel that crashes, aborts or runs\n"
           "past --timeout S seconds (default %d per op x backend) becomes a CRASHED / TIMED OUT\n"
           "row naming the phase it was in, and the run goes on with a fresh worker. --no-fork\n"
           "runs everything in this process (for a debugger).\n\n"
           "Selection: --ops takes a comma-separated list of names or shell globs (e.g.\n"
           "'mm,index_*'), --dtype a comma-separated list of dtypes (f32,f16); both accumulate\n"
           "when repeated; a selection that matches nothing is an error (exit 2). --sample N runs\n"
           "sample N alone, --variant LABEL the variant so labelled alone ('' for the sample as\n"
           "written, which is where the backward runs): each failure's note ends with the\n"
           "options that rerun it. --rerun-failed REPORT reruns exactly the records that failed\n"
           "(fail, unsupported, crashed, timed out) in REPORT, the output of an earlier\n"
           "--format json run: the same op, backend, dtype, sample, variant and candidate (a\n"
           "crashed or timed-out op x backend: all of it), with the same --plugin and --yaml;\n"
           "the report chooses the selection (no --ops, --backend, --dtype, --sample, --variant).\n"
           "A file that is not such a report, or names an op or backend not loaded, exits 2.\n\n"
           "Prints a table (a row per op, a cell per backend; the legend follows it); each FAIL\n"
           "names its culprit (forward kernel, derivative formula, fused backward kernel), and\n"
           "an op whose formula is right on the CPU but calls an op failing on the backend says\n"
           "'depends on failing OP'. -v lists every failure, and per op the dtypes and\n"
           "derivative candidates the backend does not implement. --format json prints one\n"
           "record per op x backend x dtype x sample/variant x candidate instead (schema:\n"
           "docs/conformance.md); --junit FILE also writes JUnit XML, a testcase per op x\n"
           "backend x dtype. --perf adds a table of the large variant's time on each backend\n"
           "against the CPU: its forward, and a forward and backward with each derivative\n"
           "candidate forced (against the CPU's plan chosen by cost). The CPU fallback (opr_cpu_fallback_set) is off, except for the ops\n"
           "a formula of an op only the backend runs calls: an op without a kernel on the\n"
           "backend is n/i, not the CPU's result.\n\n"
           "A call a kernel's supports (ABI 2.2) declines up front is 'declined': counted and\n"
           "listed with its reason, not a failure. Exits 1 if anything failed, crashed or timed\n"
           "out, when a kernel returned OPR_ERR_UNSUPPORTED without declaring it (UNSUPPORTED),\n"
           "and when anything could not be compared (NOT CHECKED) unless --allow-unchecked.\n"
           "--strict also fails on kernels a plugin registered for ops the registry does not\n"
           "define (skipped at load), on ops with a kernel on the backend of which nothing was\n"
           "compared, and on kernels (dtypes, fused backward kernels) no comparison ran. 2 on\n"
           "bad usage.\n", CHECK_TIMEOUT_DEFAULT_S);
}

/* Adds the backend column (device type t on ordinal o); false, having said why, past
 * CHECK_MAX_TYPES of them. */
static bool add_backend(check_cfg *c, int t, int o)
{
    if (c->ntypes == CHECK_MAX_TYPES) {
        fprintf(stderr, "opreg check: more than %d backends (device types x ordinals) to check; choose some with "
                "--backend NAME[:ORDINAL]\n", CHECK_MAX_TYPES);
        return false;
    }
    c->types[c->ntypes] = t;
    c->ordinals[c->ntypes++] = o;
    return true;
}

/* Kernels of the checked devices and of the CPU reference that shadow another
 * plugin's (opreg info lists them all): what runs here, and whether the reference
 * itself was replaced. */
static void print_precedence(opr_ctx *ctx, const int *types, int ntypes)
{
    for (int i = 0; i < opr_op_count(ctx); i++)
        for (int k = -1; k < ntypes; k++) {
            const int t = k < 0 ? 0 : types[k];
            bool seen = t == 0 && k >= 0; /* each device type once (the cpu, --ordinals all) */
            for (int j = 0; j < k; j++) seen = seen || types[j] == t;
            if (seen) continue;
            for (int dt = 0; dt < OPR_DTYPE_COUNT; dt++) {
                opr_kernel_info info = {.struct_size = sizeof info};
                if (opr_op_kernel_info(opr_op_at(ctx, i), t, (opr_dtype)dt, &info) || !info.shadowed) continue;
                const char *op = opr_op_name(opr_op_at(ctx, i)), *dev = opr_device_type_name(ctx, t);
                if (info.overrides)
                    printf("note  %s (%s, %s): plugin %s overrides plugin %s%s\n", op, dev, opr_dtype_name((opr_dtype)dt),
                           info.plugin, info.shadowed, t == 0 ? ": the CPU reference itself is replaced" : "");
                else
                    printf("note  %s (%s, %s): plugin %s runs it; plugin %s's is not used\n", op, dev,
                           opr_dtype_name((opr_dtype)dt), info.plugin, info.shadowed);
            }
        }
}

/* Adds the comma-separated items of list to the ", "-joined selection sel (room len). */
static bool add_items(char *sel, size_t len, const char *list)
{
    size_t used = strlen(sel);
    int n = snprintf(sel + used, len - used, "%s%s", used ? "," : "", list);
    return n >= 0 && (size_t)n < len - used;
}

static bool matches_any(const char *name, const char *globs)
{
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", globs);
    for (char *save = NULL, *g = strtok_r(copy, ",", &save); g; g = strtok_r(NULL, ",", &save))
        if (!fnmatch(g, name, 0)) return true;
    return false;
}

/* Whether --sample and --variant select anything among the selected ops: a repro
 * command with a typo must not run nothing and pass. Builds each candidate variant on
 * the CPU to read its label (only with --variant LABEL). */
static bool selection_exists(const check_cfg *c)
{
    if (c->only_sample < 0 && (!c->only_variant || !c->only_variant[0])) return true;
    for (int o = 0; o < c->nops; o++)
        for (int s = 0; s < opr_op_sample_count(c->ops[o]); s++) {
            if (c->only_sample >= 0 && s != c->only_sample) continue;
            if (!c->only_variant || !c->only_variant[0]) return true;
            for (int v = 1; v < opr_op_sample_variant_count(c->ops[o], s); v++) {
                opr_value args[32];
                opr_tensor *owned[OPR_SAMPLE_MAX_TENSORS];
                int nargs = 0, nowned = 0;
                char label[64] = "";
                opr_op_sample_variant_args(c->ops[o], s, v, OPR_F32, (opr_device){0, 0}, 1, args, &nargs, owned, &nowned,
                                           label, sizeof label);
                for (int k = 0; k < nowned; k++) opr_tensor_release(owned[k]);
                if (!strcmp(label, c->only_variant)) return true;
            }
        }
    return false;
}

typedef struct run_state {
    check_cfg cfg;
    check_report *rep;
} run_state;

static void take_state(const check_record *r, void *data) { check_report_take(((run_state *)data)->rep, r); }
static void run_state_unit(int u, void *data) { check_run_unit(&((run_state *)data)->cfg, u); }
static void describe_state(int u, check_record *r, void *data) { check_describe_unit(&((run_state *)data)->cfg, u, r); }

int cmd_check(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) { usage(); return 0; }
    const char *backend = NULL, *format = "table", *rerun_path = NULL;
    bool every_ordinal = false; /* --ordinals all */
    char ops_sel[1024] = "", dtype_sel[256] = "";
    run_state st = {.cfg = {.backward = true, .variants = true, .large = true, .only_sample = -1}};
    check_report_opts ro = {0};
    check_sup sup = {.timeout_s = CHECK_TIMEOUT_DEFAULT_S};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes_value = !strcmp(a, "--backend") || !strcmp(a, "--ops") || !strcmp(a, "--dtype") ||
                           !strcmp(a, "--format") || !strcmp(a, "--junit") || !strcmp(a, "--timeout") ||
                           !strcmp(a, "--plugin") || !strcmp(a, "--yaml") || !strcmp(a, "--sample") ||
                           !strcmp(a, "--variant") || !strcmp(a, "--rerun-failed") || !strcmp(a, "--ordinals");
        if (takes_value && !v) { fprintf(stderr, "opreg check: %s needs a value (see --help)\n", a); return 2; }
        if (takes_value) i++;
        if (!strcmp(a, "--backend")) backend = v;
        else if (!strcmp(a, "--ordinals")) {
            if (strcmp(v, "first") && strcmp(v, "all")) {
                fprintf(stderr, "opreg check: --ordinals must be first or all, not '%s'\n", v);
                return 2;
            }
            every_ordinal = !strcmp(v, "all");
        }
        else if (!strcmp(a, "--ops")) {
            if (!v[strspn(v, ", ")]) { fprintf(stderr, "opreg check: --ops '%s' names no op\n", v); return 2; } /* not "every op" */
            if (!add_items(ops_sel, sizeof ops_sel, v)) { fprintf(stderr, "opreg check: --ops: too long\n"); return 2; }
        }
        else if (!strcmp(a, "--dtype")) { if (!add_items(dtype_sel, sizeof dtype_sel, v)) { fprintf(stderr, "opreg check: --dtype: too long\n"); return 2; } }
        else if (!strcmp(a, "--format")) format = v;
        else if (!strcmp(a, "--junit")) ro.junit = v;
        else if (!strcmp(a, "--timeout")) {
            char *end;
            sup.timeout_s = strtod(v, &end);
            /* inf is refused, not taken as "none" (that is 0): a typo must not remove the limit */
            if (end == v || *end || !(sup.timeout_s >= 0 && sup.timeout_s <= 1e6)) {
                fprintf(stderr, "opreg check: --timeout: '%s' is not a number of seconds from 0 (no limit) to 1e6\n", v);
                return 2;
            }
        }
        else if (!strcmp(a, "--sample")) {
            char *end;
            long n = strtol(v, &end, 10);
            if (end == v || *end || n < 0 || n > 1000000) { fprintf(stderr, "opreg check: --sample: '%s' is not a sample index\n", v); return 2; }
            st.cfg.only_sample = (int)n;
        }
        else if (!strcmp(a, "--variant")) st.cfg.only_variant = v;
        else if (!strcmp(a, "--rerun-failed")) rerun_path = v;
        else if (!strcmp(a, "--no-backward")) st.cfg.backward = false;
        else if (!strcmp(a, "--no-variants")) st.cfg.variants = false;
        else if (!strcmp(a, "--no-large")) st.cfg.large = false;
        else if (!strcmp(a, "--no-fork")) sup.no_fork = true;
        else if (!strcmp(a, "--allow-unchecked")) ro.allow_unchecked = true;
        else if (!strcmp(a, "--strict")) ro.strict = true;
        else if (!strcmp(a, "--perf")) st.cfg.perf = true;
        else if (!strcmp(a, "-v")) ro.verbose = true;
        else if (strcmp(a, "--plugin") && strcmp(a, "--yaml")) { fprintf(stderr, "opreg check: unknown option '%s' (see --help)\n", a); return 2; }
    }
    if (strcmp(format, "table") && strcmp(format, "json")) {
        fprintf(stderr, "opreg check: --format must be table or json, not '%s'\n", format);
        return 2;
    }
    ro.json = !strcmp(format, "json");
    if (rerun_path && (backend || every_ordinal || ops_sel[0] || dtype_sel[0] || st.cfg.only_sample >= 0 ||
                       st.cfg.only_variant)) {
        fprintf(stderr, "opreg check: --rerun-failed: the report chooses what runs (no --backend, --ordinals, --ops, "
                "--dtype, --sample or --variant with it)\n");
        return 2;
    }
    if (every_ordinal && backend && strchr(backend, ':')) {
        fprintf(stderr, "opreg check: --backend %s names one ordinal; --ordinals all checks each (give one or the "
                "other)\n", backend);
        return 2;
    }
    char copy[256];
    snprintf(copy, sizeof copy, "%s", dtype_sel);
    for (char *save = NULL, *d = strtok_r(copy, ",", &save); d; d = strtok_r(NULL, ",", &save)) {
        opr_dtype dt;
        if (opr_dtype_parse(d, &dt)) { fprintf(stderr, "opreg check: --dtype: unknown dtype '%s'\n", d); return 2; }
        st.cfg.dtype_mask |= 1u << dt;
    }
    opr_ctx *ctx = cli_ctx_new_isolated(argc, argv, PROBE_TIMEOUT_DEFAULT);
    if (!ctx) return 1;
    opr_cpu_fallback_set(ctx, false); /* a backend's own kernels are checked, not the cpu's */
    opr_kernel_guards_set(ctx, true);
    check_cfg *c = &st.cfg;
    c->ctx = ctx;
    int status = 2;
    check_rerun *rerun = NULL;
    if (rerun_path) {
        char why[600];
        if (check_rerun_load(ctx, rerun_path, &rerun, why, sizeof why)) {
            fprintf(stderr, "opreg check: --rerun-failed: %s\n", why);
            goto out;
        }
        if (!rerun->n) {
            if (!ro.json) printf("opreg check: %s names no failed record: nothing to rerun\n", rerun_path);
            else printf("{\"schema\": \"opreg-check\", \"version\": 3, \"backends\": [], \"records\": [], \"perf\": [], "
                        "\"strict\": [], \"summary\": {\"ops\": 0, \"failures\": 0, \"exit_status\": 0}}\n");
            status = 0;
            goto out;
        }
        c->rerun = rerun;
        /* the backends (device type and ordinal) and ops the failures name, in registry order */
        for (int t = 0; t < opr_device_type_count(ctx); t++)
            for (int o = 0; o < opr_device_type_ordinals(ctx, t); o++)
                for (int i = 0; i < rerun->n; i++)
                    if (rerun->recs[i].dev_type == t && rerun->recs[i].ordinal == o) {
                        if (!add_backend(c, t, o)) goto out;
                        break;
                    }
    } else if (backend) {
        opr_device d;
        if (opr_device_parse(ctx, backend, &d)) {
            fprintf(stderr, "opreg check: %s (see opreg info)\n", opr_last_error());
            goto out;
        }
        /* the ordinal validated by opr_device_parse against the device's count */
        for (int o = every_ordinal ? 0 : d.index; o < (every_ordinal ? opr_device_type_ordinals(ctx, d.type) : d.index + 1); o++)
            if (!add_backend(c, d.type, o)) goto out;
    } else {
        for (int t = 1; t < opr_device_type_count(ctx); t++)
            for (int o = 0; o < (every_ordinal ? opr_device_type_ordinals(ctx, t) : 1); o++)
                if (!add_backend(c, t, o)) goto out;
        if (!c->ntypes) add_backend(c, 0, 0);
    }
    c->ops = malloc((size_t)(opr_op_count(ctx) ? opr_op_count(ctx) : 1) * sizeof *c->ops);
    if (!c->ops) { fprintf(stderr, "opreg check: out of memory\n"); status = 1; goto out; }
    for (int i = 0; i < opr_op_count(ctx); i++) {
        const opr_op *op = opr_op_at(ctx, i);
        if (ops_sel[0] && !matches_any(opr_op_name(op), ops_sel)) continue;
        if (opr_op_num_outputs(op) < 1 || opr_op_num_args(op) <= 0) continue; /* fused backward slots */
        bool named = !rerun;
        for (int k = 0; rerun && k < rerun->n; k++) named = named || rerun->recs[k].op == op;
        if (!named) continue;
        c->ops[c->nops++] = op;
    }
    if (!c->nops) {
        fprintf(stderr, "opreg check: --ops '%s' matches no op (see opreg ops)\n", ops_sel);
        goto out;
    }
    if (!selection_exists(c)) {
        if (c->only_variant && c->only_variant[0])
            fprintf(stderr, "opreg check: no selected op has a variant '%s'", c->only_variant);
        else
            fprintf(stderr, "opreg check: no selected op has a sample %d", c->only_sample);
        if (c->only_variant && c->only_variant[0] && c->only_sample >= 0) fprintf(stderr, " in sample %d", c->only_sample);
        fprintf(stderr, " (see a failure's 'rerun it alone' note)\n");
        goto out;
    }
    if (!ro.json)
        printf("opreg check: %s against the CPU plugin in f64%s\n",
               c->ntypes == 1 && c->types[0] == 0 ? "cpu f32" : "each backend",
               c->backward ? ", backward against finite differences in f64" : ", forward only");
    if (!ro.json) print_precedence(ctx, c->types, c->ntypes);
    if (!(st.rep = check_report_new(c, &ro))) { fprintf(stderr, "opreg check: out of memory\n"); status = 1; goto out; }
    sup.nunits = c->nops * c->ntypes;
    sup.run_unit = run_state_unit;
    sup.take = take_state;
    sup.describe_unit = describe_state;
    sup.data = &st;
    if (check_supervise(&sup)) {
        perror("opreg check: starting a worker");
        status = 1;
    } else {
        status = check_report_finish(st.rep);
    }
out:
    check_report_free(st.rep);
    free(c->ops);
    check_rerun_free(rerun);
    opr_ctx_free(ctx);
    return status;
}
