// The libtorch side of the dispatch benchmark: the same operations as dispatch.c
// (add on two small f32 tensors, mm on two square f32 matrices), timed with the same
// method (bench_timing.h). Built as a small static library that the C driver calls,
// so one run of one binary prints the whole table.
#include "bench_torch.h"

// ATen and c10 headers only, not <torch/torch.h>: the same calls (torch::add and
// torch::NoGradGuard are at::add and c10::NoGradGuard) for a fraction of the compile
// time, which matters as the benchmark is part of the default build.
#include <ATen/ops/add.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/mm.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <torch/version.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <string>

namespace {

void set_err(char *err, size_t len, const char *what)
{
    if (err && len) std::snprintf(err, len, "%s", what);
}

// Returns the text after "key" up to the end of its line in s, or "".
std::string config_value(const std::string &s, const std::string &key)
{
    size_t p = s.find(key);
    if (p == std::string::npos) return "";
    p += key.size();
    size_t e = s.find_first_of(",\n", p);
    return s.substr(p, e == std::string::npos ? std::string::npos : e - p);
}

// Both guards live for one timed repetition (set up outside the per-call loop).
struct mode_guard {
    std::optional<c10::NoGradGuard> no_grad;
    std::optional<c10::InferenceMode> inference;
    explicit mode_guard(bt_mode m)
    {
        if (m == BT_NO_GRAD) no_grad.emplace();
        if (m == BT_INFERENCE) inference.emplace();
    }
};

at::Tensor from_floats(const float *p, at::IntArrayRef shape)
{
    return at::from_blob(const_cast<float *>(p), shape, at::kFloat).clone();
}

struct timed_state {
    at::Tensor a, b;
    bt_mode mode;
    bool is_mm;
    std::string error;
};

int body(void *p, long iters)
{
    auto *s = static_cast<timed_state *>(p);
    try {
        mode_guard g(s->mode);
        if (s->is_mm) {
            for (long i = 0; i < iters; i++) {
                at::Tensor out = at::mm(s->a, s->b);
                (void)out;
            }
        } else {
            for (long i = 0; i < iters; i++) {
                at::Tensor out = at::add(s->a, s->b);
                (void)out;
            }
        }
    } catch (const std::exception &e) {
        s->error = e.what();
        return 1;
    }
    return 0;
}

int time_op(bool is_mm, const float *a, const float *b, int n, bt_mode mode,
            const bench_opts *o, bench_result *res, char *err, size_t err_len)
{
    try {
        timed_state s;
        s.mode = mode;
        s.is_mm = is_mm;
        {
            // Inputs made under the same mode as the calls (inference tensors for
            // InferenceMode, as an inference-only caller would have).
            mode_guard g(mode);
            if (is_mm) {
                s.a = from_floats(a, {n, n});
                s.b = from_floats(b, {n, n});
            } else {
                s.a = from_floats(a, {n});
                s.b = from_floats(b, {n});
            }
        }
        *res = bench_measure(body, &s, o);
        if (res->ns < 0) {
            set_err(err, err_len, s.error.c_str());
            return -1;
        }
        return 0;
    } catch (const std::exception &e) {
        set_err(err, err_len, e.what());
        return -1;
    }
}

} // namespace

extern "C" {

const char *bt_mode_name(bt_mode mode)
{
    switch (mode) {
    case BT_PLAIN: return "plain";
    case BT_NO_GRAD: return "NoGradGuard";
    case BT_INFERENCE: return "InferenceMode";
    default: return "?";
    }
}

int bt_init(int threads, char *info, size_t info_len, char *err, size_t err_len)
{
    try {
        at::set_num_threads(threads);
        std::string par = at::get_parallel_info();
        std::string cfg = at::show_config();
        std::string backend = config_value(par, "ATen parallel backend: ");
        std::string blas = config_value(cfg, "BLAS_INFO=");
        std::snprintf(info, info_len,
                      "%s (C++ API), parallel backend %s, BLAS_INFO=%s, intra-op threads %d",
                      "libtorch " TORCH_VERSION, backend.empty() ? "?" : backend.c_str(),
                      blas.empty() ? "?" : blas.c_str(), at::get_num_threads());
        return 0;
    } catch (const std::exception &e) {
        set_err(err, err_len, e.what());
        return -1;
    }
}

int bt_add_once(const float *a, const float *b, int n, float *out, char *err, size_t err_len)
{
    try {
        c10::NoGradGuard g;
        at::Tensor r = at::add(from_floats(a, {n}), from_floats(b, {n})).contiguous();
        std::memcpy(out, r.data_ptr<float>(), sizeof(float) * static_cast<size_t>(n));
        return 0;
    } catch (const std::exception &e) {
        set_err(err, err_len, e.what());
        return -1;
    }
}

int bt_mm_once(const float *a, const float *b, int n, float *out, char *err, size_t err_len)
{
    try {
        c10::NoGradGuard g;
        at::Tensor r = at::mm(from_floats(a, {n, n}), from_floats(b, {n, n})).contiguous();
        std::memcpy(out, r.data_ptr<float>(), sizeof(float) * static_cast<size_t>(n) * static_cast<size_t>(n));
        return 0;
    } catch (const std::exception &e) {
        set_err(err, err_len, e.what());
        return -1;
    }
}

int bt_time_add(const float *a, const float *b, int n, bt_mode mode, const bench_opts *o,
                bench_result *res, char *err, size_t err_len)
{
    return time_op(false, a, b, n, mode, o, res, err, err_len);
}

int bt_time_mm(const float *a, const float *b, int n, bt_mode mode, const bench_opts *o,
               bench_result *res, char *err, size_t err_len)
{
    return time_op(true, a, b, n, mode, o, res, err, err_len);
}

} // extern "C"
