// The libtorch side of opreg_bench_gpt: the demo GPT (examples/gpt/gpt_model.h) in C++
// with ATen ops, trained with AdamW written as torch.optim.AdamW's single-tensor update,
// the same weights (SplitMix64, gpt_model.h's order and scale) and batches as opreg's.
#include "gpt_torch.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

namespace {

struct splitmix {
    uint64_t state;
    uint64_t next()
    {
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

// bound 0: filled with `fill`
at::Tensor param(splitmix &rng, std::vector<int64_t> shape, double bound, double fill)
{
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    std::vector<float> v(static_cast<size_t>(n));
    for (auto &x : v) x = static_cast<float>(bound ? (2.0 * rng.uniform() - 1.0) * bound : fill);
    at::Tensor t = at::from_blob(v.data(), shape, at::kFloat).clone();
    t.set_requires_grad(true);
    return t;
}

struct model {
    int L, H, C, T, V;
    std::vector<at::Tensor> p; // wte, wpe, 12 per block, lnf_w, lnf_b, head_w

    model(const bgt_config &c) : L(c.layers), H(c.heads), C(c.embd), T(c.context), V(c.vocab)
    {
        splitmix rng{c.seed};
        const double emb = std::sqrt(3.0), lin = 1.0 / std::sqrt(double(C)), lin4 = 1.0 / std::sqrt(double(4 * C));
        p.push_back(param(rng, {V, C}, emb, 0));
        p.push_back(param(rng, {T, C}, emb, 0));
        for (int l = 0; l < L; l++) {
            p.push_back(param(rng, {C}, 0, 1));
            p.push_back(param(rng, {C}, 0, 0));
            p.push_back(param(rng, {3 * C, C}, lin, 0));
            p.push_back(param(rng, {3 * C}, lin, 0));
            p.push_back(param(rng, {C, C}, lin, 0));
            p.push_back(param(rng, {C}, lin, 0));
            p.push_back(param(rng, {C}, 0, 1));
            p.push_back(param(rng, {C}, 0, 0));
            p.push_back(param(rng, {4 * C, C}, lin, 0));
            p.push_back(param(rng, {4 * C}, lin, 0));
            p.push_back(param(rng, {C, 4 * C}, lin4, 0));
            p.push_back(param(rng, {C}, lin4, 0));
        }
        p.push_back(param(rng, {C}, 0, 1));
        p.push_back(param(rng, {C}, 0, 0));
        p.push_back(param(rng, {V, C}, lin, 0));
    }

    at::Tensor loss(const at::Tensor &idx, const at::Tensor &targets) const
    {
        const int64_t B = idx.size(0), t = idx.size(1), hd = C / H;
        at::Tensor x = at::embedding(p[0], idx) + at::embedding(p[1], at::arange(t, at::kLong));
        at::Tensor causal = at::ones({t, t}, at::kBool).tril();
        for (int l = 0; l < L; l++) {
            const at::Tensor *b = &p[static_cast<size_t>(2 + 12 * l)];
            at::Tensor h = at::layer_norm(x, {C}, b[0], b[1], 1e-5);
            auto qkv = at::linear(h, b[2], b[3]).split(C, 2);
            at::Tensor q = qkv[0].reshape({B, t, H, hd}).transpose(1, 2);
            at::Tensor k = qkv[1].reshape({B, t, H, hd}).transpose(1, 2);
            at::Tensor v = qkv[2].reshape({B, t, H, hd}).transpose(1, 2);
            at::Tensor att = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(hd)));
            att = at::softmax(att.masked_fill(causal.logical_not(), -INFINITY), -1);
            at::Tensor y = at::matmul(att, v).transpose(1, 2).contiguous().reshape({B, t, C});
            x = x + at::linear(y, b[4], b[5]);
            h = at::layer_norm(x, {C}, b[6], b[7], 1e-5);
            x = x + at::linear(at::gelu(at::linear(h, b[8], b[9]), "tanh"), b[10], b[11]);
        }
        const size_t f = static_cast<size_t>(2 + 12 * L);
        at::Tensor logits = at::linear(at::layer_norm(x, {C}, p[f], p[f + 1], 1e-5), p[f + 2]);
        return at::cross_entropy_loss(logits.reshape({B * t, V}), targets.reshape({B * t}));
    }
};

struct adamw {
    double lr = 3e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
    int64_t t = 0;
    std::vector<at::Tensor> m, v;

    void step(std::vector<at::Tensor> &params)
    {
        at::NoGradGuard no_grad;
        if (m.empty())
            for (auto &p : params) {
                m.push_back(at::zeros_like(p));
                v.push_back(at::zeros_like(p));
            }
        t++;
        const double step_size = lr / (1 - std::pow(b1, double(t))), bc2 = std::sqrt(1 - std::pow(b2, double(t)));
        for (size_t i = 0; i < params.size(); i++) {
            at::Tensor &p = params[i];
            const at::Tensor g = p.grad();
            if (!g.defined()) continue;
            p.mul_(1 - lr * wd);
            m[i].mul_(b1).add_(g, 1 - b1);
            v[i].mul_(b2).addcmul_(g, g, 1 - b2);
            p.addcdiv_(m[i], (v[i].sqrt() / bc2).add_(eps), -step_size);
            p.mutable_grad().reset();
        }
    }
};

} // namespace

extern "C" int bgt_train(const bgt_config *c, const int64_t *tokens, int64_t n, double *tokens_per_s, char *err,
                         size_t err_len)
{
    try {
        at::set_num_threads(c->threads);
        model mdl(*c);
        adamw opt;
        splitmix batches{c->seed + 1};
        const int64_t B = c->batch, T = c->context;
        std::vector<int64_t> x(static_cast<size_t>(B * T)), y(static_cast<size_t>(B * T));
        auto one_step = [&]() {
            for (int64_t b = 0; b < B; b++) {
                const int64_t s = static_cast<int64_t>(batches.next() % static_cast<uint64_t>(n - T));
                for (int64_t i = 0; i < T; i++) {
                    x[static_cast<size_t>(b * T + i)] = tokens[s + i];
                    y[static_cast<size_t>(b * T + i)] = tokens[s + i + 1];
                }
            }
            at::Tensor xt = at::from_blob(x.data(), {B, T}, at::kLong).clone();
            at::Tensor yt = at::from_blob(y.data(), {B, T}, at::kLong).clone();
            at::Tensor loss = mdl.loss(xt, yt);
            loss.backward();
            opt.step(mdl.p);
            return loss.item<double>();
        };
        for (int i = 0; i < c->warmup; i++) one_step();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < c->steps; i++) one_step();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        *tokens_per_s = double(c->steps) * double(B * T) / s;
        return 0;
    } catch (const std::exception &e) {
        if (err && err_len) std::snprintf(err, err_len, "%s", e.what());
        return -1;
    }
}
