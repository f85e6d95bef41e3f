/* PyTorch scripts as references for suites (oracle_files.h). */
#include "oracle_files.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char python[256];

static bool has_torch(const char *py)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import torch' >/dev/null 2>&1", py);
    return system(cmd) == 0;
}

bool of_find_python(char *why, size_t len)
{
    const char *env = getenv("OPREG_PYTHON");
    const char *cands[2] = {"python3", "/usr/bin/python3"};
    if (env && env[0]) cands[0] = env, cands[1] = NULL; /* set: that interpreter or none */
    size_t used = 0;
    why[0] = '\0';
    for (int i = 0; i < 2; i++) {
        if (!cands[i]) continue;
        if (has_torch(cands[i])) {
            snprintf(python, sizeof python, "%s", cands[i]);
            return true;
        }
        int n = snprintf(why + used, len - used, "%s%s", used ? ", " : "", cands[i]);
        if (n > 0 && (size_t)n < len - used) used += (size_t)n;
    }
    return false;
}

const char *of_python(void)
{
    return python;
}

static void write_tensor(FILE *f, const char *name, const opr_tensor *t)
{
    const opr_dtype dt = opr_tensor_dtype(t);
    ck_assert(dt == OPR_F64 || dt == OPR_I64);
    fprintf(f, "tensor %s %s %d", name, dt == OPR_F64 ? "f64" : "i64", opr_tensor_ndim(t));
    for (int d = 0; d < opr_tensor_ndim(t); d++) fprintf(f, " %lld", (long long)opr_tensor_size(t, d));
    fprintf(f, "\n");
    double *v = tu_to_f64(t);
    for (int64_t i = 0; i < opr_tensor_numel(t); i++) {
        if (dt == OPR_F64) fprintf(f, "%s%.17g", i ? " " : "", v[i]);
        else fprintf(f, "%s%lld", i ? " " : "", (long long)v[i]);
    }
    fprintf(f, "\n");
    free(v);
}

static void read_recs(const char *path, of_recs *rs)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot read %s", path);
    rs->n = 0;
    char word[16], dt[8];
    while (fscanf(f, "%15s", word) == 1) {
        ck_assert_msg(!strcmp(word, "tensor") && rs->n < OF_MAXREC, "%s: bad record '%s'", path, word);
        of_rec *r = &rs->r[rs->n++];
        memset(r, 0, sizeof *r);
        ck_assert_int_eq(fscanf(f, "%63s %7s %d", r->name, dt, &r->ndim), 3);
        ck_assert(r->ndim >= 0 && r->ndim <= OPR_MAX_DIMS);
        r->numel = 1;
        for (int d = 0; d < r->ndim; d++) {
            long long s;
            ck_assert_int_eq(fscanf(f, "%lld", &s), 1);
            r->shape[d] = s;
            r->numel *= s;
        }
        r->v = malloc((size_t)(r->numel ? r->numel : 1) * sizeof(double));
        ck_assert_ptr_nonnull(r->v);
        for (int64_t i = 0; i < r->numel; i++)
            ck_assert_msg(fscanf(f, "%lf", &r->v[i]) == 1, "%s: short record %s", path, r->name);
    }
    fclose(f);
}

void of_recs_free(of_recs *rs)
{
    for (int i = 0; i < rs->n; i++) free(rs->r[i].v);
    rs->n = 0;
}

void of_run(const char *dir, const char *script, const char *const *names, opr_tensor *const *ts, int n, of_recs *out)
{
    ck_assert_msg(python[0], "of_run before of_find_python found a python3 with torch");
    char tmp[] = "/tmp/opreg_oracle_XXXXXX";
    ck_assert_msg(mkdtemp(tmp) != NULL, "mkdtemp failed");
    char in[64], outp[64], err[64], cmd[1400];
    snprintf(in, sizeof in, "%s/in.txt", tmp);
    snprintf(outp, sizeof outp, "%s/out.txt", tmp);
    snprintf(err, sizeof err, "%s/err.txt", tmp);
    FILE *f = fopen(in, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < n; i++) write_tensor(f, names[i], ts[i]);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' -B '%s/%s.py' '%s' '%s' 2>'%s'", python, dir, script, in, outp, err);
    const int rc = system(cmd);
    char msg[2048] = "";
    if (rc != 0) {
        FILE *e = fopen(err, "r");
        if (e) {
            size_t k = fread(msg, 1, sizeof msg - 1, e);
            msg[k] = '\0';
            fclose(e);
        }
    } else {
        read_recs(outp, out);
    }
    unlink(in);
    unlink(outp);
    unlink(err);
    rmdir(tmp);
    ck_assert_msg(rc == 0, "oracle %s.py failed (status %d): %s", script, rc, msg);
}

void of_expect_close_case(const of_recs *rs, const char *what, const char *name, const opr_tensor *t, double tol,
                          of_nan nan)
{
    char at[128] = ""; /* "what: " before each message, or nothing */
    if (what) snprintf(at, sizeof at, "%s: ", what);
    const of_rec *r = NULL;
    for (int i = 0; i < rs->n; i++)
        if (!strcmp(rs->r[i].name, name)) r = &rs->r[i];
    ck_assert_msg(r != NULL, "%sthe oracle wrote no '%s'", at, name);
    ck_assert_msg(t != NULL, "%sno opreg value for '%s'", at, name);
    ck_assert_msg(opr_tensor_ndim(t) == r->ndim, "%s%s is %d-d in opreg, %d-d in torch", at, name, opr_tensor_ndim(t),
                  r->ndim);
    for (int d = 0; d < r->ndim; d++)
        ck_assert_msg(opr_tensor_size(t, d) == r->shape[d], "%s%s dim %d is %lld in opreg, %lld in torch", at, name, d,
                      (long long)opr_tensor_size(t, d), (long long)r->shape[d]);
    double *v = tu_to_f64(t);
    for (int64_t i = 0; i < r->numel; i++) {
        const double a = v[i];
        const bool both_nan = nan == OF_NAN_MATCHES_NAN && isnan(a) && isnan(r->v[i]);
        if (!both_nan && !(fabs(a - r->v[i]) <= tol * (1 + fabs(r->v[i])))) {
            free(v);
            ck_abort_msg("%s%s[%lld] is %.15g in opreg, %.15g in torch", at, name, (long long)i, a, r->v[i]);
        }
    }
    free(v);
}

void of_expect_close(const of_recs *rs, const char *name, const opr_tensor *t, double tol)
{
    of_expect_close_case(rs, NULL, name, t, tol, OF_NAN_FAILS);
}
