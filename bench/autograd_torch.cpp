// The libtorch side of the autograd benchmark: the same steps as autograd.c (mul + sum +
// backward on small f32 tensors; an MLP with frozen middle layers) as loops the C driver
// times, interleaved with opreg's and PyTorch's. Built as a small static library the C
// driver calls, so one run of one binary prints the whole table.
#include "autograd_torch.h"

// ATen and c10 headers only, not <torch/torch.h> (see dispatch_torch.cpp): Tensor's
// backward(), set_requires_grad() and mutable_grad() are declared in TensorBody.h and
// dispatch to the autograd kernels registered by libtorch_cpu.
#include <ATen/ops/from_blob.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/sum.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <ATen/core/Tensor.h>
#include <torch/version.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

void set_err(char *err, size_t len, const char *what)
{
    if (err && len) std::snprintf(err, len, "%s", what);
}

std::string config_value(const std::string &s, const std::string &key)
{
    size_t p = s.find(key);
    if (p == std::string::npos) return "";
    p += key.size();
    size_t e = s.find_first_of(",\n", p);
    return s.substr(p, e == std::string::npos ? std::string::npos : e - p);
}

at::Tensor from_floats(const float *p, at::IntArrayRef shape)
{
    return at::from_blob(const_cast<float *>(p), shape, at::kFloat).clone();
}

} // namespace

struct bat_mulsum {
    at::Tensor x, y;
};

struct bat_mlp {
    std::vector<at::Tensor> w, b;
    std::vector<bool> trainable;
    at::Tensor x;

    at::Tensor forward() const
    {
        at::Tensor h = x;
        for (size_t l = 0; l < w.size(); l++) {
            h = at::linear(h, w[l], b[l]);
            if (l + 1 < w.size()) h = at::relu(h);
        }
        return at::sum(h);
    }
    void clear_grads() const
    {
        for (size_t l = 0; l < w.size(); l++)
            if (trainable[l]) {
                w[l].mutable_grad().reset();
                b[l].mutable_grad().reset();
            }
    }
};

extern "C" {

int bat_init(int threads, char *info, size_t info_len, char *err, size_t err_len)
{
    try {
        at::set_num_threads(threads);
        std::string par = at::get_parallel_info();
        std::string cfg = at::show_config();
        std::string backend = config_value(par, "ATen parallel backend: ");
        std::string blas = config_value(cfg, "BLAS_INFO=");
        std::snprintf(info, info_len, "%s (C++ API), parallel backend %s, BLAS_INFO=%s, intra-op threads %d",
                      "libtorch " TORCH_VERSION, backend.empty() ? "?" : backend.c_str(),
                      blas.empty() ? "?" : blas.c_str(), at::get_num_threads());
        return 0;
    } catch (const std::exception &e) {
        set_err(err, err_len, e.what());
        return -1;
    }
}

bat_mulsum *bat_mulsum_new(const float *x, const float *y, int n, float *grad_out, char *err, size_t err_len)
{
    try {
        auto *s = new bat_mulsum;
        s->x = from_floats(x, {n});
        s->x.set_requires_grad(true);
        s->y = from_floats(y, {n});
        if (grad_out) {
            at::Tensor loss = at::sum(at::mul(s->x, s->y));
            loss.backward();
            at::Tensor g = s->x.grad().contiguous();
            std::memcpy(grad_out, g.data_ptr<float>(), sizeof(float) * static_cast<size_t>(n));
            s->x.mutable_grad().reset();
        }
        return s;
    } catch (const std::exception &e) {
        set_err(err, err_len, e.what());
        return nullptr;
    }
}

int bat_mulsum_run(bat_mulsum *s, long iters, char *err, size_t err_len)
{
    try {
        for (long i = 0; i < iters; i++) {
            at::Tensor loss = at::sum(at::mul(s->x, s->y));
            loss.backward();
            s->x.mutable_grad().reset(); // x.grad = None, as opr_zero_grad drops the gradient
        }
        return 0;
    } catch (const std::exception &e) {
        set_err(err, err_len, e.what());
        return -1;
    }
}

void bat_mulsum_free(bat_mulsum *s)
{
    delete s;
}

bat_mlp *bat_mlp_new(int nlayers, const int64_t *widths, int64_t batch, const float *x, const float *const *w,
                     const float *const *b, const bool *trainable, char *err, size_t err_len)
{
    try {
        auto *m = new bat_mlp;
        m->x = from_floats(x, {batch, widths[0]});
        for (int l = 0; l < nlayers; l++) {
            m->w.push_back(from_floats(w[l], {widths[l + 1], widths[l]}));
            m->b.push_back(from_floats(b[l], {widths[l + 1]}));
            m->trainable.push_back(trainable[l]);
            if (trainable[l]) {
                m->w.back().set_requires_grad(true);
                m->b.back().set_requires_grad(true);
            }
        }
        return m;
    } catch (const std::exception &e) {
        set_err(err, err_len, e.what());
        return nullptr;
    }
}

int bat_mlp_step_grads(bat_mlp *m, int n, const int *layers, float *const *dw, double *loss, char *err, size_t err_len)
{
    try {
        m->clear_grads();
        at::Tensor l = m->forward();
        *loss = l.item<double>();
        l.backward();
        for (int i = 0; i < n; i++) {
            at::Tensor g = m->w.at(static_cast<size_t>(layers[i])).grad();
            if (!g.defined()) {
                set_err(err, err_len, "no gradient reached a layer that requires grad");
                return -1;
            }
            g = g.contiguous();
            std::memcpy(dw[i], g.data_ptr<float>(), sizeof(float) * static_cast<size_t>(g.numel()));
        }
        m->clear_grads();
        return 0;
    } catch (const std::exception &e) {
        set_err(err, err_len, e.what());
        return -1;
    }
}

int bat_mlp_run(bat_mlp *m, long iters, char *err, size_t err_len)
{
    try {
        for (long i = 0; i < iters; i++) {
            m->forward().backward();
            m->clear_grads();
        }
        return 0;
    } catch (const std::exception &e) {
        set_err(err, err_len, e.what());
        return -1;
    }
}

void bat_mlp_free(bat_mlp *m)
{
    delete m;
}

} // extern "C"
