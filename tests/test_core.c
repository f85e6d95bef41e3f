/* Core layer: tensors, views, copies, memory statistics, DLPack, errors, grad state. */
#include "test_util.h"

#include <dlpack/dlpack.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static opr_ctx *bare_ctx(void)
{
    opr_ctx_opts o = {.struct_size = sizeof o, .skip_plugin_discovery = true};
    opr_ctx *ctx = opr_ctx_new(&o);
    ck_assert_msg(ctx != NULL, "%s", opr_last_error());
    return ctx;
}

START_TEST(tensor_from_data_round_trip)
{
    opr_ctx *ctx = bare_ctx();
    const int64_t shape[2] = {2, 3};
    const double src[6] = {1, 2, 3, 4, 5, 6};
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_F64, 2, shape, src, OPR_CPU);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(opr_tensor_ndim(t), 2);
    ck_assert_int_eq(opr_tensor_size(t, -1), 3);
    ck_assert_int_eq(opr_tensor_stride(t, 0), 3);
    ck_assert_int_eq(opr_tensor_numel(t), 6);
    ck_assert(opr_tensor_is_contiguous(t));
    double back[6];
    ck_assert_int_eq(opr_tensor_copy_to_host(t, back, sizeof back), OPR_OK);
    ck_assert_mem_eq(back, src, sizeof src);
    /* a too-small buffer is refused and says the sizes */
    ck_assert_int_eq(opr_tensor_copy_to_host(t, back, 8), OPR_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "need 48"));
    opr_tensor *z = opr_tensor_new(ctx, OPR_I64, 2, shape, OPR_CPU);
    int64_t zeros[6] = {1, 1, 1, 1, 1, 1};
    ck_assert_int_eq(opr_tensor_copy_to_host(z, zeros, sizeof zeros), OPR_OK);
    for (int i = 0; i < 6; i++) ck_assert_int_eq(zeros[i], 0);
    /* as doubles: from any dtype, of a transposed view too, and a short buffer refused */
    const float fsrc[6] = {1.5f, -2, 3, 4, 5, 6.25f};
    opr_tensor *f = opr_tensor_from_data(ctx, OPR_F32, 2, shape, fsrc, OPR_CPU), *ft = opr_tensor_transpose(f, 0, 1);
    double d[6];
    ck_assert_int_eq(opr_tensor_copy_to_host_f64(ft, d, 6), OPR_OK);
    const double want[6] = {1.5, 4, -2, 5, 3, 6.25};
    for (int i = 0; i < 6; i++) ck_assert_double_eq(d[i], want[i]);
    ck_assert_int_eq(opr_tensor_copy_to_host_f64(z, d, 6), OPR_OK);
    ck_assert_double_eq(d[5], 0);
    ck_assert_int_eq(opr_tensor_copy_to_host_f64(f, d, 5), OPR_ERR_INVALID);
    ck_assert_str_eq(opr_last_error(), "opr_tensor_copy_to_host_f64: room for 5 values, need 6");
    opr_tensor_release(ft);
    opr_tensor_release(f);
    opr_tensor_release(z);
    opr_tensor_release(t);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(tensor_rejects_bad_shapes)
{
    opr_ctx *ctx = bare_ctx();
    const int64_t neg[2] = {2, -1};
    ck_assert_ptr_null(opr_tensor_new(ctx, OPR_F32, 2, neg, OPR_CPU));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "negative size"));
    ck_assert_ptr_null(opr_tensor_new(ctx, OPR_F32, OPR_MAX_DIMS + 1, neg, OPR_CPU));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "ndim"));
    ck_assert_ptr_null(opr_tensor_new(ctx, (opr_dtype)42, 0, NULL, OPR_CPU));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "invalid dtype"));
    ck_assert_ptr_null(opr_tensor_new(ctx, OPR_F32, 0, NULL, (opr_device){5, 0}));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "unknown device"));
    ck_assert_ptr_null(opr_tensor_new(NULL, OPR_F32, 0, NULL, OPR_CPU));
    const int64_t huge[3] = {1LL << 40, 1LL << 40, 1LL << 40};
    ck_assert_ptr_null(opr_tensor_new(ctx, OPR_F32, 3, huge, OPR_CPU));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "too large"));
    tu_ctx_free(ctx);
}
END_TEST

/* Values of t in logical order as doubles. */
static void expect_values(const opr_tensor *t, const double *want, int n)
{
    ck_assert_int_eq(opr_tensor_numel(t), n);
    double *got = tu_to_f64(t);
    for (int i = 0; i < n; i++) ck_assert_msg(got[i] == want[i], "element %d: got %g want %g", i, got[i], want[i]);
    free(got);
}

START_TEST(views_share_storage)
{
    opr_ctx *ctx = bare_ctx();
    const int64_t shape[2] = {2, 3};
    const double src[6] = {0, 1, 2, 3, 4, 5};
    opr_tensor *t = opr_tensor_from_data(ctx, OPR_F64, 2, shape, src, OPR_CPU);

    opr_tensor *tt = opr_tensor_transpose(t, 0, 1);
    ck_assert(opr_tensor_shares_storage(t, tt));
    ck_assert(!opr_tensor_is_contiguous(tt));
    expect_values(tt, (double[]){0, 3, 1, 4, 2, 5}, 6);

    const int perm[2] = {1, 0};
    opr_tensor *p = opr_tensor_permute(t, perm, 2);
    expect_values(p, (double[]){0, 3, 1, 4, 2, 5}, 6);

    opr_tensor *nr = opr_tensor_narrow(t, 1, 1, 2);
    ck_assert_int_eq(opr_tensor_offset(nr), 1);
    expect_values(nr, (double[]){1, 2, 4, 5}, 4);

    const int64_t eshape[3] = {2, 2, 3};
    opr_tensor *ex = opr_tensor_expand(t, eshape, 3);
    ck_assert_int_eq(opr_tensor_stride(ex, 0), 0);
    expect_values(ex, (double[]){0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}, 12);

    opr_tensor *dg = opr_tensor_diagonal(t, 1, 0, 1);
    expect_values(dg, (double[]){1, 5}, 2);

    opr_tensor *un = opr_tensor_unsqueeze(t, 1);
    ck_assert_int_eq(opr_tensor_ndim(un), 3);
    ck_assert_int_eq(opr_tensor_size(un, 1), 1);
    opr_tensor *sq = opr_tensor_squeeze(un, OPR_ALL_DIMS);
    ck_assert_int_eq(opr_tensor_ndim(sq), 2);

    const int64_t flat[1] = {-1};
    opr_tensor *v = opr_tensor_view_shape(t, flat, 1);
    ck_assert(opr_tensor_shares_storage(t, v));
    ck_assert_int_eq(opr_tensor_size(v, 0), 6);
    /* a transposed tensor cannot be flattened without a copy: view refuses, reshape copies */
    ck_assert_ptr_null(opr_tensor_view_shape(tt, flat, 1));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "without a copy"));
    opr_tensor *rs = opr_tensor_reshape(tt, flat, 1);
    ck_assert(!opr_tensor_shares_storage(t, rs));
    expect_values(rs, (double[]){0, 3, 1, 4, 2, 5}, 6);
    /* a narrowed view can be split along the kept run without copying */
    const int64_t split[3] = {2, 2, 1};
    opr_tensor *rs2 = opr_tensor_reshape(nr, split, 3);
    ck_assert(opr_tensor_shares_storage(t, rs2));
    expect_values(rs2, (double[]){1, 2, 4, 5}, 4);

    opr_tensor *c = opr_tensor_contiguous(tt);
    ck_assert(opr_tensor_is_contiguous(c));
    opr_tensor *c2 = opr_tensor_contiguous(t);
    ck_assert_ptr_eq(c2, t); /* already contiguous: same tensor */

    /* writing through a view shows in the base */
    const double nine[4] = {9, 9, 9, 9};
    ck_assert_int_eq(opr_tensor_copy_from_host(nr, nine, sizeof nine), OPR_OK);
    expect_values(t, (double[]){0, 9, 9, 3, 9, 9}, 6);

    opr_tensor *all[] = {tt, p, nr, ex, dg, un, sq, v, rs, rs2, c, c2, t};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(view_errors_are_reported)
{
    opr_ctx *ctx = bare_ctx();
    const int64_t shape[2] = {2, 3};
    opr_tensor *t = opr_tensor_new(ctx, OPR_F32, 2, shape, OPR_CPU);
    ck_assert_ptr_null(opr_tensor_transpose(t, 0, 2));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "dim 2 out of range"));
    ck_assert_ptr_null(opr_tensor_narrow(t, 1, 2, 2));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "out of range"));
    const int perm[2] = {0, 0};
    ck_assert_ptr_null(opr_tensor_permute(t, perm, 2));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "repeated"));
    const int64_t bad[2] = {4, 3};
    ck_assert_ptr_null(opr_tensor_expand(t, bad, 2));
    const int64_t five[1] = {5};
    ck_assert_ptr_null(opr_tensor_reshape(t, five, 1));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "elements"));
    ck_assert_ptr_null(opr_tensor_transpose(NULL, 0, 1));
    opr_tensor_release(t);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(memory_stats_are_exact)
{
    opr_ctx *ctx = bare_ctx();
    opr_mem_stats s0 = {.struct_size = sizeof s0}, s = {.struct_size = sizeof s};
    ck_assert_int_eq(opr_memory_stats(ctx, OPR_CPU, &s0), OPR_OK);
    const int64_t a_shape[2] = {10, 7}, b_shape[1] = {3};
    opr_tensor *a = opr_tensor_new(ctx, OPR_F32, 2, a_shape, OPR_CPU);  /* 280 bytes */
    opr_tensor *b = opr_tensor_new(ctx, OPR_F64, 1, b_shape, OPR_CPU);  /* 24 bytes */
    opr_memory_stats(ctx, OPR_CPU, &s);
    ck_assert_uint_eq(s.current_bytes - s0.current_bytes, 304);
    ck_assert_uint_eq(s.n_allocs - s0.n_allocs, 2);
    opr_tensor *v = opr_tensor_transpose(a, 0, 1); /* views allocate nothing */
    opr_memory_stats(ctx, OPR_CPU, &s);
    ck_assert_uint_eq(s.current_bytes - s0.current_bytes, 304);
    opr_tensor_release(a); /* still held by the view */
    opr_memory_stats(ctx, OPR_CPU, &s);
    ck_assert_uint_eq(s.current_bytes - s0.current_bytes, 304);
    opr_tensor_release(v);
    opr_memory_stats(ctx, OPR_CPU, &s);
    ck_assert_uint_eq(s.current_bytes - s0.current_bytes, 24);
    ck_assert_uint_eq(s.peak_bytes - s0.current_bytes, 304);
    opr_memory_reset_peak(ctx, OPR_CPU);
    opr_memory_stats(ctx, OPR_CPU, &s);
    ck_assert_uint_eq(s.peak_bytes, s.current_bytes);
    opr_tensor_release(b);
    opr_memory_stats(ctx, OPR_CPU, &s);
    ck_assert_uint_eq(s.current_bytes, s0.current_bytes);
    ck_assert_int_eq(opr_memory_stats(ctx, (opr_device){3, 0}, &s), OPR_ERR_INVALID);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(memory_stats_count_op_outputs)
{
    opr_ctx *ctx = tu_ctx();
    const int64_t shape[2] = {64, 32};
    opr_tensor *x = tu_rand(ctx, OPR_F32, 2, shape, -1, 1);
    opr_tensor *y = tu_rand(ctx, OPR_F32, 2, shape, -1, 1);
    opr_mem_stats s0 = {.struct_size = sizeof s0}, s = {.struct_size = sizeof s};
    opr_memory_stats(ctx, OPR_CPU, &s0);
    opr_value args[2] = {opr_v_tensor(x), opr_v_tensor(y)};
    opr_tensor *z = tu_call1(ctx, "add", args, 2);
    opr_memory_stats(ctx, OPR_CPU, &s);
    ck_assert_uint_eq(s.current_bytes - s0.current_bytes, 64 * 32 * 4);
    opr_tensor_release(z);
    opr_memory_stats(ctx, OPR_CPU, &s);
    ck_assert_uint_eq(s.current_bytes, s0.current_bytes);
    opr_tensor_release(x);
    opr_tensor_release(y);
    tu_ctx_free(ctx);
}
END_TEST

static int dl_deleted;
static void count_delete(DLManagedTensor *m) { (void)m; dl_deleted++; }

START_TEST(dlpack_round_trip_is_zero_copy)
{
    opr_ctx *ctx = bare_ctx();
    const int64_t shape[2] = {3, 4};
    opr_tensor *t = tu_rand(ctx, OPR_F32, 2, shape, -1, 1);
    opr_tensor *tt = opr_tensor_transpose(t, 0, 1);
    DLManagedTensor *m = opr_tensor_to_dlpack(tt);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(m->dl_tensor.ndim, 2);
    ck_assert_int_eq(m->dl_tensor.shape[0], 4);
    ck_assert_int_eq(m->dl_tensor.strides[0], 1);
    ck_assert_int_eq(m->dl_tensor.dtype.code, kDLFloat);
    ck_assert_int_eq(m->dl_tensor.device.device_type, kDLCPU);
    opr_tensor_release(tt); /* the capsule keeps the data alive */
    opr_tensor *back = opr_tensor_from_dlpack(ctx, m);
    ck_assert_ptr_nonnull(back);
    ck_assert_ptr_eq(opr_tensor_data(back), (char *)opr_tensor_data(t));
    double *a = tu_to_f64(back), *b = tu_to_f64(t);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) ck_assert(a[i * 3 + j] == b[j * 4 + i]);
    free(a);
    free(b);
    opr_tensor_release(back); /* runs the exporter's deleter */
    opr_tensor_release(t);

    /* foreign memory: imported without copying, its deleter runs at release */
    float buf[6] = {1, 2, 3, 4, 5, 6};
    int64_t fshape[1] = {6};
    DLManagedTensor foreign = {.dl_tensor = {.data = buf, .device = {kDLCPU, 0}, .ndim = 1,
                                             .dtype = {kDLFloat, 32, 1}, .shape = fshape, .byte_offset = 8},
                               .deleter = count_delete};
    fshape[0] = 4;
    dl_deleted = 0;
    opr_tensor *f = opr_tensor_from_dlpack(ctx, &foreign);
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_eq(opr_tensor_data(f), &buf[2]);
    expect_values(f, (double[]){3, 4, 5, 6}, 4);
    opr_tensor_release(f);
    ck_assert_int_eq(dl_deleted, 1);

    DLManagedTensor odd = foreign;
    odd.dl_tensor.dtype = (DLDataType){kDLComplex, 64, 1};
    ck_assert_ptr_null(opr_tensor_from_dlpack(ctx, &odd));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "unsupported dtype"));
    odd.dl_tensor.dtype = (DLDataType){kDLFloat, 32, 1};
    odd.dl_tensor.device.device_type = kDLCUDA;
    ck_assert_ptr_null(opr_tensor_from_dlpack(ctx, &odd));
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "no loaded backend"));
    ck_assert_int_eq(dl_deleted, 1); /* refused imports leave ownership with the caller */
    tu_ctx_free(ctx);
}
END_TEST

static void *other_thread_error(void *arg)
{
    (void)arg;
    ck_assert_str_eq(opr_last_error(), "");
    opr_tensor_transpose(NULL, 0, 1);
    return NULL;
}

START_TEST(last_error_is_thread_local)
{
    opr_tensor_narrow(NULL, 0, 0, 0);
    char mine[256];
    snprintf(mine, sizeof mine, "%s", opr_last_error());
    ck_assert_ptr_nonnull(strstr(mine, "narrow"));
    pthread_t th;
    pthread_create(&th, NULL, other_thread_error, NULL);
    pthread_join(th, NULL);
    ck_assert_str_eq(opr_last_error(), mine);
    ck_assert_str_eq(opr_status_name(OPR_ERR_ABI), "OPR_ERR_ABI");
}
END_TEST

START_TEST(dtype_and_device_names)
{
    opr_dtype dt;
    ck_assert_int_eq(opr_dtype_parse("float64", &dt), OPR_OK);
    ck_assert_int_eq(dt, OPR_F64);
    ck_assert_int_eq(opr_dtype_parse("f7", &dt), OPR_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "unknown dtype 'f7'"));
    ck_assert_str_eq(opr_dtype_name(OPR_BOOL), "bool");
    ck_assert_uint_eq(opr_dtype_size(OPR_I64), 8);
    opr_ctx *ctx = bare_ctx();
    opr_device d;
    ck_assert_int_eq(opr_device_parse(ctx, "cpu", &d), OPR_OK);
    ck_assert_int_eq(d.type, 0);
    ck_assert_int_eq(opr_device_parse(ctx, "cpu:1", &d), OPR_ERR_NOT_FOUND);
    ck_assert_int_eq(opr_device_parse(ctx, "tpu:0", &d), OPR_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "'tpu'"));
    ck_assert_int_eq(opr_device_parse(ctx, "cpu:x", &d), OPR_ERR_INVALID);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(grad_state)
{
    opr_ctx *ctx = bare_ctx();
    const int64_t shape[1] = {3};
    opr_tensor *f = opr_tensor_new(ctx, OPR_F32, 1, shape, OPR_CPU);
    opr_tensor *i = opr_tensor_new(ctx, OPR_I64, 1, shape, OPR_CPU);
    ck_assert_int_eq(opr_set_requires_grad(f, true), OPR_OK);
    ck_assert(opr_requires_grad(f));
    ck_assert_int_eq(opr_set_requires_grad(i, true), OPR_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(opr_last_error(), "floating"));
    ck_assert_ptr_null(opr_grad(f));
    ck_assert(opr_grad_mode_enabled());
    ck_assert(opr_grad_mode_set(false));
    ck_assert(!opr_grad_mode_enabled());
    opr_grad_mode_set(true);
    opr_tensor_release(f);
    opr_tensor_release(i);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(large_blocks_are_cached_and_reported_as_reserved)
{
    opr_ctx *ctx = bare_ctx();
    const int64_t shape[1] = {1 << 18}; /* 1 MiB of f32 */
    opr_mem_stats s0 = {.struct_size = sizeof s0}, s = {.struct_size = sizeof s};
    opr_memory_stats(ctx, OPR_CPU, &s0);
    opr_tensor *a = opr_tensor_new(ctx, OPR_F32, 1, shape, OPR_CPU);
    void *first = opr_tensor_data(a);
    opr_tensor_release(a);
    opr_memory_stats(ctx, OPR_CPU, &s);
    ck_assert_uint_eq(s.current_bytes, s0.current_bytes);           /* no tensor holds it */
    ck_assert_uint_ge(s.reserved_bytes - s0.reserved_bytes, 1u << 20); /* but the cache does */
    opr_tensor *b = opr_tensor_new(ctx, OPR_F32, 1, shape, OPR_CPU);
    ck_assert_ptr_eq(opr_tensor_data(b), first);                   /* and hands it out again */
    opr_memory_stats(ctx, OPR_CPU, &s);
    ck_assert_uint_eq(s.current_bytes - s0.current_bytes, 1u << 20);
    ck_assert_uint_eq(s.reserved_bytes, s.current_bytes);
    opr_tensor_release(b);
    tu_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("core");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, tensor_from_data_round_trip);
    tcase_add_test(tc, tensor_rejects_bad_shapes);
    tcase_add_test(tc, views_share_storage);
    tcase_add_test(tc, view_errors_are_reported);
    tcase_add_test(tc, memory_stats_are_exact);
    tcase_add_test(tc, memory_stats_count_op_outputs);
    tcase_add_test(tc, large_blocks_are_cached_and_reported_as_reserved);
    tcase_add_test(tc, dlpack_round_trip_is_zero_copy);
    tcase_add_test(tc, last_error_is_thread_local);
    tcase_add_test(tc, dtype_and_device_names);
    tcase_add_test(tc, grad_state);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
