/* The host/device paths of the core, run against the emulated CUDA plugin
 * (tests/gpu_emu: the CUDA kernels on a CPU stand-in runtime, device "cuda", two
 * ordinals here through OPREG_GPUEMU_DEVICES): moving tensors between devices, the
 * error for inputs on different devices, DLPack export and import of device tensors,
 * memory statistics, autograd on the device, running out of device memory, and the
 * emulator's own guarantee that host code touching device memory is caught.
 *
 * On a machine with a real CUDA device the real plugin takes the name "cuda" first and
 * these tests run on it instead. */
#include "tests/test_util.h"

#include <dlpack/dlpack.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static opr_device cuda_dev(opr_ctx *ctx, int ordinal)
{
    char name[16];
    snprintf(name, sizeof name, "cuda:%d", ordinal);
    opr_device d;
    ck_assert_msg(opr_device_parse(ctx, name, &d) == OPR_OK, "%s: %s", name, opr_last_error());
    return d;
}

/* A tensor of dtype dt on dev holding v[0..numel) (exactly representable values). */
static opr_tensor *from_values(opr_ctx *ctx, opr_dtype dt, int ndim, const int64_t *shape, const double *v,
                               opr_device dev)
{
    unsigned char raw[64 * 8];
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    ck_assert(n <= 64);
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case OPR_F32: ((float *)raw)[i] = (float)v[i]; break;
        case OPR_F64: ((double *)raw)[i] = v[i]; break;
        case OPR_I64: ((int64_t *)raw)[i] = (int64_t)v[i]; break;
        case OPR_BOOL: raw[i] = v[i] != 0; break;
        case OPR_F16: ((uint16_t *)raw)[i] = opr_f16_from_float((float)v[i]); break;
        case OPR_I32: ((int32_t *)raw)[i] = (int32_t)v[i]; break;
        default: ((uint16_t *)raw)[i] = opr_bf16_from_float((float)v[i]); break;
        }
    }
    opr_tensor *t = opr_tensor_from_data(ctx, dt, ndim, shape, raw, dev);
    ck_assert_msg(t != NULL, "%s", opr_last_error());
    return t;
}

/* -3, -2.5, -2, ... in dtype dt on dev. */
static opr_tensor *seq(opr_ctx *ctx, opr_dtype dt, int ndim, const int64_t *shape, opr_device dev)
{
    double v[64];
    for (int i = 0; i < 64; i++) v[i] = i * 0.5 - 3.0;
    return from_values(ctx, dt, ndim, shape, v, dev);
}

static void assert_same_values(const opr_tensor *a, const opr_tensor *b)
{
    ck_assert_int_eq(opr_tensor_numel(a), opr_tensor_numel(b));
    double *x = tu_to_f64(a), *y = tu_to_f64(b);
    for (int64_t i = 0; i < opr_tensor_numel(a); i++)
        ck_assert_msg(x[i] == y[i] || (isnan(x[i]) && isnan(y[i])), "element %lld: %g vs %g", (long long)i, x[i], y[i]);
    free(x);
    free(y);
}

START_TEST(test_plugin_and_device)
{
    opr_ctx *ctx = tu_ctx();
    opr_device d;
    ck_assert_msg(opr_device_parse(ctx, "cuda", &d) == OPR_OK, "%s", opr_last_error());
    ck_assert_int_eq(opr_device_type_ordinals(ctx, d.type), 2);
    ck_assert(opr_op_has_kernel(opr_op_find(ctx, "mm"), d.type));
    ck_assert(opr_op_has_kernel(opr_op_find(ctx, "lerp"), d.type));
    tu_ctx_free(ctx);
}
END_TEST

/* cpu -> cuda:0 -> cuda:1 -> cpu keeps every value, for every dtype and for a
 * non-contiguous source, and device memory is given back. */
START_TEST(test_to_round_trip)
{
    opr_ctx *ctx = tu_ctx();
    const opr_device c0 = cuda_dev(ctx, 0), c1 = cuda_dev(ctx, 1);
    const int64_t shape[2] = {3, 5};
    const opr_dtype dts[] = {OPR_F32, OPR_F64, OPR_I64, OPR_BOOL, OPR_F16, OPR_BF16, OPR_I32};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        double v[15];
        for (int k = 0; k < 15; k++) v[k] = (k * 7 % 15) - 7 + 0.25 * (k % 3);
        opr_tensor *h = from_values(ctx, dts[i], 2, shape, v, OPR_CPU);
        opr_tensor *ht = opr_tensor_transpose(h, 0, 1); /* strided source */
        opr_tensor *g0 = opr_tensor_to(ht, c0);
        ck_assert_msg(g0 != NULL, "%s", opr_last_error());
        ck_assert_int_eq(opr_tensor_device(g0).type, c0.type);
        opr_tensor *g0t = opr_tensor_transpose(g0, 0, 1); /* strided on the device */
        opr_tensor *g1 = opr_tensor_to(g0t, c1);
        ck_assert_msg(g1 != NULL, "%s", opr_last_error());
        opr_tensor_release(g0t);
        ck_assert_int_eq(opr_tensor_device(g1).index, 1);
        opr_tensor *back = opr_tensor_to(g1, OPR_CPU);
        assert_same_values(h, back); /* transposed twice */
        opr_tensor_release(back);
        opr_tensor_release(g1);
        opr_tensor_release(g0);
        opr_tensor_release(ht);
        opr_tensor_release(h);
    }
    opr_mem_stats st = {.struct_size = sizeof st};
    ck_assert_int_eq(opr_memory_stats(ctx, c0, &st), OPR_OK);
    ck_assert_uint_eq(st.current_bytes, 0);
    ck_assert_uint_gt(st.peak_bytes, 0);
    ck_assert_uint_ge(st.reserved_bytes, st.peak_bytes);
    tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_mixed_devices_refused)
{
    opr_ctx *ctx = tu_ctx();
    const int64_t shape[1] = {4};
    opr_tensor *h = seq(ctx, OPR_F32, 1, shape, OPR_CPU);
    opr_tensor *g0 = seq(ctx, OPR_F32, 1, shape, cuda_dev(ctx, 0));
    opr_tensor *g1 = seq(ctx, OPR_F32, 1, shape, cuda_dev(ctx, 1));
    opr_value a[2] = {opr_v_tensor(h), opr_v_tensor(g0)};
    tu_expect_fail(ctx, "add", a, 2, 1, OPR_ERR_INVALID, "cpu");
    ck_assert_msg(strstr(opr_last_error(), "cuda:0") != NULL, "%s", opr_last_error());
    opr_value b[2] = {opr_v_tensor(g0), opr_v_tensor(g1)};
    tu_expect_fail(ctx, "add", b, 2, 1, OPR_ERR_INVALID, "cuda:1");
    /* the same inputs on one device work */
    opr_value c[2] = {opr_v_tensor(g0), opr_v_tensor(g0)};
    opr_tensor *sum = tu_call1(ctx, "add", c, 2);
    ck_assert_int_eq(opr_tensor_device(sum).type, opr_tensor_device(g0).type);
    opr_tensor_release(sum);
    opr_tensor_release(g1);
    opr_tensor_release(g0);
    opr_tensor_release(h);
    tu_ctx_free(ctx);
}
END_TEST

/* Export names the device; import gives a tensor over the same device memory. */
START_TEST(test_dlpack_device_tensor)
{
    opr_ctx *ctx = tu_ctx();
    const opr_device c1 = cuda_dev(ctx, 1);
    const int64_t shape[2] = {4, 6};
    opr_tensor *g = seq(ctx, OPR_F32, 2, shape, c1);
    opr_tensor *view = opr_tensor_narrow(g, 1, 2, 3); /* an offset and a stride */
    DLManagedTensor *m = opr_tensor_to_dlpack(view);
    ck_assert_msg(m != NULL, "%s", opr_last_error());
    ck_assert_int_eq(m->dl_tensor.device.device_type, kDLCUDA);
    ck_assert_int_eq(m->dl_tensor.device.device_id, 1);
    ck_assert_int_eq(m->dl_tensor.ndim, 2);
    ck_assert_int_eq(m->dl_tensor.strides[0], 6);
    ck_assert_uint_eq(m->dl_tensor.byte_offset, 2 * sizeof(float));
    opr_tensor *imported = opr_tensor_from_dlpack(ctx, m);
    ck_assert_msg(imported != NULL, "%s", opr_last_error());
    ck_assert_int_eq(opr_tensor_device(imported).type, c1.type);
    ck_assert_int_eq(opr_tensor_device(imported).index, 1);
    ck_assert_ptr_eq(opr_tensor_data(imported), opr_tensor_data(view));
    assert_same_values(view, imported);
    /* an op on the imported tensor runs on the device */
    opr_value a[1] = {opr_v_tensor(imported)};
    opr_tensor *n = tu_call1(ctx, "neg", a, 1);
    double *v = tu_to_f64(n), *w = tu_to_f64(view);
    for (int i = 0; i < 12; i++) ck_assert(v[i] == -w[i]);
    free(v);
    free(w);
    opr_tensor_release(n);
    opr_tensor_release(imported); /* runs the exporter's deleter: its reference goes */
    opr_tensor_release(view);
    opr_tensor_release(g);

    /* a context without the device cannot import it */
    opr_tensor *g2 = seq(ctx, OPR_F32, 2, shape, c1);
    DLManagedTensor *m2 = opr_tensor_to_dlpack(g2);
    ck_assert(m2 != NULL);
    opr_tensor_release(g2);
    setenv("OPREG_PLUGIN_PATH", getenv("OPREG_CPU_ONLY_PLUGIN_PATH"), 1);
    opr_ctx *cpu_only = tu_ctx();
    ck_assert_ptr_null(opr_tensor_from_dlpack(cpu_only, m2));
    ck_assert_msg(strstr(opr_last_error(), "device type 2") != NULL, "%s", opr_last_error());
    tu_ctx_free(cpu_only);
    m2->deleter(m2); /* still ours after the failed import; releases the tensor */
    tu_ctx_free(ctx);
}
END_TEST

/* matmul, relu and a broadcast add, backward on the device, against the CPU. */
START_TEST(test_autograd_on_device)
{
    opr_ctx *ctx = tu_ctx();
    const opr_device c0 = cuda_dev(ctx, 0);
    const int64_t xs[2] = {5, 4}, ws[2] = {4, 3}, bs[1] = {3};
    tu_seed(7);
    opr_tensor *hx = tu_rand(ctx, OPR_F64, 2, xs, -1, 1), *hw = tu_rand(ctx, OPR_F64, 2, ws, -1, 1);
    opr_tensor *hb = tu_rand(ctx, OPR_F64, 1, bs, -1, 1);
    opr_tensor *grads[2][3];
    for (int side = 0; side < 2; side++) {
        const opr_device dev = side ? c0 : OPR_CPU;
        opr_tensor *x = opr_tensor_to(hx, dev), *w = opr_tensor_to(hw, dev), *b = opr_tensor_to(hb, dev);
        opr_tensor *leaves[3] = {x, w, b};
        for (int i = 0; i < 3; i++) opr_set_requires_grad(leaves[i], true);
        opr_value a1[2] = {opr_v_tensor(x), opr_v_tensor(w)};
        opr_tensor *y = tu_call1(ctx, "matmul", a1, 2);
        opr_value a2[2] = {opr_v_tensor(y), opr_v_tensor(b)};
        opr_tensor *z = tu_call1(ctx, "add", a2, 2);
        opr_value a3[1] = {opr_v_tensor(z)};
        opr_tensor *r = tu_call1(ctx, "relu", a3, 1);
        opr_value a4[1] = {opr_v_tensor(r)};
        opr_tensor *s = tu_call1(ctx, "sum", a4, 1);
        ck_assert_msg(opr_backward(s, NULL, NULL) == OPR_OK, "%s", opr_last_error());
        for (int i = 0; i < 3; i++) {
            ck_assert_ptr_nonnull(opr_grad(leaves[i]));
            ck_assert_int_eq(opr_tensor_device(opr_grad(leaves[i])).type, dev.type);
            grads[side][i] = opr_tensor_to(opr_grad(leaves[i]), OPR_CPU);
        }
        opr_tensor *all[] = {s, r, z, y, x, w, b};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) opr_tensor_release(all[i]);
    }
    for (int i = 0; i < 3; i++) {
        double *p = tu_to_f64(grads[0][i]), *q = tu_to_f64(grads[1][i]);
        for (int64_t k = 0; k < opr_tensor_numel(grads[0][i]); k++)
            ck_assert_msg(fabs(p[k] - q[k]) <= 1e-12, "grad %d element %lld: cpu %g, device %g", i, (long long)k, p[k], q[k]);
        free(p);
        free(q);
        opr_tensor_release(grads[0][i]);
        opr_tensor_release(grads[1][i]);
    }
    opr_tensor_release(hx);
    opr_tensor_release(hw);
    opr_tensor_release(hb);
    tu_ctx_free(ctx);
}
END_TEST

/* Out of device memory is an error naming the device; nothing leaks and the device
 * keeps working. */
START_TEST(test_out_of_device_memory)
{
    setenv("OPREG_GPUEMU_MEMORY_MB", "16", 1);
    opr_ctx *ctx = tu_ctx();
    const opr_device c0 = cuda_dev(ctx, 0);
    const int64_t big[1] = {8 << 20}; /* 32 MiB of f32 */
    ck_assert_ptr_null(opr_tensor_new(ctx, OPR_F32, 1, big, c0));
    ck_assert_msg(strstr(opr_last_error(), "cuda") != NULL, "%s", opr_last_error());
    const int64_t small[1] = {4};
    opr_tensor *t = seq(ctx, OPR_F32, 1, small, c0);
    opr_value a[1] = {opr_v_tensor(t)};
    opr_tensor *e = tu_call1(ctx, "exp", a, 1);
    opr_tensor_release(e);
    opr_tensor_release(t);
    tu_ctx_free(ctx);
    unsetenv("OPREG_GPUEMU_MEMORY_MB");
}
END_TEST

/* The emulator maps device memory inaccessible to host code: reading a device
 * tensor's data pointer on the host aborts with a message instead of reading. */
START_TEST(test_host_access_to_device_memory_is_caught)
{
    opr_ctx *ctx = tu_ctx();
    const int64_t shape[1] = {4};
    opr_tensor *t = seq(ctx, OPR_F32, 1, shape, cuda_dev(ctx, 0));
    volatile float *p = opr_tensor_data(t);
    printf("%f\n", (double)p[0]); /* must not return */
}
END_TEST

static Suite *gpu_emu_suite(void)
{
    Suite *s = suite_create("gpu_emu");
    TCase *t = tcase_create("device");
    tcase_add_test(t, test_plugin_and_device);
    tcase_add_test(t, test_to_round_trip);
    tcase_add_test(t, test_mixed_devices_refused);
    tcase_add_test(t, test_dlpack_device_tensor);
    tcase_add_test(t, test_autograd_on_device);
    tcase_add_test(t, test_out_of_device_memory);
    suite_add_tcase(s, t);
    t = tcase_create("emulator");
    tcase_add_test_raise_signal(t, test_host_access_to_device_memory_is_caught, SIGABRT);
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return tu_run(gpu_emu_suite()); }
