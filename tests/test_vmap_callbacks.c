/* opr_vmap's contract with its callback (docs/vmap.md, "The call"): an input returned
 * as it is (the identity), batched or not, with or without chunks and on the error
 * path; the callback's status, an opr_status or another value; and a batched tensor
 * used on another thread while its call runs. */
#include "tests/test_util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static opr_ctx *ctx;

static void setup(void) { ctx = tu_ctx(); }
static void teardown(void) { tu_ctx_free(ctx); }

static bool same_f64(const opr_tensor *a, const opr_tensor *b)
{
    if (opr_tensor_numel(a) != opr_tensor_numel(b) || opr_tensor_ndim(a) != opr_tensor_ndim(b)) return false;
    double *x = tu_to_f64(a), *y = tu_to_f64(b);
    bool same = !memcmp(x, y, (size_t)opr_tensor_numel(a) * sizeof *x);
    free(x);
    free(y);
    return same;
}

/* ------------------------------------------------------------------ returning inputs */

typedef struct ident {
    int which[2];   /* out[k] = in[which[k]] */
    opr_status rc;  /* what the callback returns */
    int retain;     /* 0: no reference taken; 1: opr_tensor_retain; 2: through contiguous,
                       which hands a contiguous argument back with a new reference */
} ident;

static opr_status give_inputs_back(void *ud, opr_tensor *const *in, int nin, opr_tensor **out, int nout)
{
    const ident *id = ud;
    (void)nin;
    for (int k = 0; k < nout; k++) {
        opr_tensor *t = in[id->which[k]];
        if (id->retain == 1) opr_tensor_retain(t);
        if (id->retain == 2 && opr_call_by_name(ctx, "contiguous", (opr_value[]){opr_v_tensor(t)}, 1, &t, 1))
            return OPR_ERR_BACKEND;
        out[k] = t;
    }
    return id->rc;
}

START_TEST(identity_gives_the_input_back)
{
    opr_tensor *x = tu_rand(ctx, OPR_F64, 2, (int64_t[]){3, 2}, -1, 1);
    opr_tensor *w = tu_rand(ctx, OPR_F64, 1, (int64_t[]){2}, -1, 1);
    opr_tensor *out[2] = {NULL, NULL};
    ident id = {{0, 0}, OPR_OK, 0};
    /* lambda x: x over the batch, whole and in chunks of one and two samples; the
     * callback taking a reference (itself, or through an op returning its argument)
     * works as well, without a leak (teardown counts the tensors left) */
    for (id.retain = 0; id.retain <= 2; id.retain++)
        for (int64_t chunk = 0; chunk <= 2; chunk++) {
            opr_vmap_opts o = {.struct_size = sizeof o, .chunk_size = chunk};
            ck_assert_msg(opr_vmap(ctx, give_inputs_back, &id, &x, NULL, 1, out, NULL, 1, &o) == OPR_OK, "%s",
                          opr_last_error());
            ck_assert(!opr_tensor_is_batched(out[0]));
            ck_assert(same_f64(out[0], x));
            opr_tensor_release(out[0]);
        }
    id.retain = 0;
    /* the batch moved to another output dim: the transpose */
    ck_assert_msg(opr_vmap(ctx, give_inputs_back, &id, &x, NULL, 1, out, (int[]){1}, 1, NULL) == OPR_OK, "%s",
                  opr_last_error());
    opr_tensor *xt = tu_call1(ctx, "t", (opr_value[]){opr_v_tensor(x)}, 1);
    ck_assert(same_f64(out[0], xt));
    opr_tensor_release(xt);
    opr_tensor_release(out[0]);
    /* an unbatched input from outside: as it is (out_dims -1), or expanded to the batch;
     * given twice, once with a reference of the callback's */
    id = (ident){{1, 1}, OPR_OK, 0};
    ck_assert_msg(opr_vmap(ctx, give_inputs_back, &id, (opr_tensor *[]){x, w}, (int[]){0, -1}, 2, out, (int[]){-1, 0}, 2,
                           NULL) == OPR_OK, "%s", opr_last_error());
    opr_tensor_release(out[0]);
    opr_tensor_release(out[1]);
    id.retain = 1;
    ck_assert_msg(opr_vmap(ctx, give_inputs_back, &id, (opr_tensor *[]){x, w}, (int[]){0, -1}, 2, out, (int[]){-1, 0}, 2,
                           NULL) == OPR_OK, "%s", opr_last_error());
    ck_assert_ptr_eq(out[0], w);
    ck_assert_int_eq(opr_tensor_ndim(out[1]), 2);
    ck_assert_int_eq(opr_tensor_size(out[1], 0), 3);
    opr_tensor *row = opr_tensor_narrow(out[1], 0, 2, 1), *w1 = opr_tensor_reshape(w, (int64_t[]){1, 2}, 2);
    ck_assert(same_f64(row, w1));
    opr_tensor_release(row);
    opr_tensor_release(w1);
    opr_tensor_release(out[0]);
    opr_tensor_release(out[1]);
    /* the error path: an input left in out[] is not released for the callback */
    id = (ident){{0, 1}, OPR_ERR_UNSUPPORTED, 0};
    ck_assert_int_eq(opr_vmap(ctx, give_inputs_back, &id, (opr_tensor *[]){x, w}, (int[]){0, -1}, 2, out, NULL, 2, NULL),
                     OPR_ERR_UNSUPPORTED);
    ck_assert(out[0] == NULL && out[1] == NULL);
    /* the caller's tensors are whole (the leak check of teardown counts the rest) */
    double v[2];
    ck_assert_int_eq(opr_tensor_copy_to_host(w, v, sizeof v), OPR_OK);
    opr_tensor_release(x);
    opr_tensor_release(w);
}
END_TEST

/* ------------------------------------------------------------------ status */

static opr_status return_status(void *ud, opr_tensor *const *in, int nin, opr_tensor **out, int nout)
{
    (void)in; (void)nin; (void)out; (void)nout;
    const int rc = *(const int *)ud;
    if (rc == OPR_ERR_NOT_FOUND) opr_call_by_name(ctx, "no_such_op", NULL, 0, out, 1); /* fails with its message */
    return (opr_status)rc;
}

START_TEST(callback_status)
{
    opr_tensor *x = tu_rand(ctx, OPR_F64, 1, (int64_t[]){3}, -1, 1), *out = NULL;
    /* an opr_status comes back as it is, with the callback's message or one saying there
     * was none */
    int rc = OPR_ERR_NOT_FOUND;
    ck_assert_int_eq(opr_vmap(ctx, return_status, &rc, &x, NULL, 1, &out, NULL, 1, NULL), OPR_ERR_NOT_FOUND);
    ck_assert_msg(strstr(opr_last_error(), "no_such_op") != NULL, "%s", opr_last_error());
    rc = OPR_ERR_MISMATCH;
    ck_assert_int_eq(opr_vmap(ctx, return_status, &rc, &x, NULL, 1, &out, NULL, 1, NULL), OPR_ERR_MISMATCH);
    /* any other value is not an opr_status a caller can switch on: OPR_ERR_BACKEND,
     * the message naming it */
    const int others[] = {-77, 5, -11, 1};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        rc = others[i];
        char want[64];
        snprintf(want, sizeof want, "the callback returned %d", others[i]);
        ck_assert_int_eq(opr_vmap(ctx, return_status, &rc, &x, NULL, 1, &out, NULL, 1, NULL), OPR_ERR_BACKEND);
        ck_assert_msg(strstr(opr_last_error(), want) != NULL, "%s", opr_last_error());
        ck_assert_ptr_null(out);
    }
    opr_tensor_release(x);
}
END_TEST

/* ------------------------------------------------------------------ threads */

typedef struct other_thread {
    opr_tensor *batched;
    int rc;
    char msg[512];
} other_thread;

static void *use_batched(void *arg)
{
    other_thread *o = arg;
    opr_tensor *r = NULL;
    o->rc = opr_call_by_name(ctx, "exp", (opr_value[]){opr_v_tensor(o->batched)}, 1, &r, 1);
    snprintf(o->msg, sizeof o->msg, "%s", opr_last_error());
    opr_tensor_release(r);
    return NULL;
}

static opr_status hand_to_a_thread(void *ud, opr_tensor *const *in, int nin, opr_tensor **out, int nout)
{
    other_thread *o = ud;
    (void)nin; (void)nout;
    o->batched = in[0];
    pthread_t t;
    if (pthread_create(&t, NULL, use_batched, o) || pthread_join(t, NULL)) return OPR_ERR_BACKEND;
    out[0] = in[0];
    return OPR_OK;
}

START_TEST(batched_tensor_on_another_thread)
{
    opr_tensor *x = tu_rand(ctx, OPR_F64, 1, (int64_t[]){3}, -1, 1), *out = NULL;
    other_thread o = {0};
    ck_assert_msg(opr_vmap(ctx, hand_to_a_thread, &o, &x, NULL, 1, &out, NULL, 1, NULL) == OPR_OK, "%s",
                  opr_last_error());
    ck_assert_int_eq(o.rc, OPR_ERR_INVALID);
    ck_assert_msg(strstr(o.msg, "still running on another thread") != NULL && !strstr(o.msg, "has returned"), "%s",
                  o.msg);
    opr_tensor_release(out);
    opr_tensor_release(x);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vmap_callbacks");
    TCase *tc = tcase_create("vmap_callbacks");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, identity_gives_the_input_back);
    tcase_add_test(tc, callback_status);
    tcase_add_test(tc, batched_tensor_on_another_thread);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
