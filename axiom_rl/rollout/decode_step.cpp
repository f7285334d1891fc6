// axiom-rl's decode step for a CPU: one new token per row through every layer, written with the
// same ATen calls as `_forward` in fast.py (float32, one query token, the additive-mask branch of
// `_attend`), in the same order and with the same arguments. The same kernels therefore run on the
// same data and the logits come out bit for bit as from Python; what this file saves is Python's
// own cost around each of the some 800 calls a step makes, views included (parsing arguments,
// wrapping results), which at these sizes is a large part of a token step. native.py builds it
// and checks it against the Python step.
//
// Keep it in step with `_forward`, `_rms`, `_rotate`, `_store` and `_attend`: the tests compare
// the two bit for bit.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <cmath>
#include <optional>

namespace {

// The signature of mkldnn::_linear_pointwise, which cpu_matmul.linear_packed calls.
using LinearPointwise = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                   c10::string_view, c10::List<std::optional<at::Scalar>>,
                                   std::optional<c10::string_view>);

// F.linear, or cpu_matmul.linear_packed (oneDNN, weights packed once per rollout) when `onednn`.
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b, bool onednn) {
  if (!onednn) return at::linear(x, w, b);
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
                             .typed<LinearPointwise>();
  return op.call(x, w, b, "none", c10::List<std::optional<at::Scalar>>(), std::optional<c10::string_view>(""));
}

// `_rms` for float32: F.rms_norm(x, (d,), w, eps).
at::Tensor rms(const at::Tensor& x, const at::Tensor& w, double eps) {
  return at::rms_norm(x, {x.size(-1)}, w, eps);
}

at::Tensor decode_step(const at::Tensor& ids,        // [N, 1] the newest token of each row
                       const at::Tensor& positions,  // [N, 1] its rotary position
                       const at::Tensor& cache_k,    // [L, N, kvh, T, hd], written at slot `start`
                       const at::Tensor& cache_v,
                       int64_t start,
                       const at::Tensor& mask,  // [N, 1, 1, start + 1] additive bias, 0 or -inf
                       const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& embed,
                       const at::Tensor& norm, const at::Tensor& lm_head,
                       at::TensorList weights,  // per layer: ln1, wqkv, wo, ln2, wgu, wdown
                       const c10::List<std::optional<at::Tensor>>& qkv_bias,  // per layer
                       int64_t h, int64_t kvh, int64_t hd, double eps, bool onednn) {
  TORCH_CHECK(ids.dim() == 2 && ids.size(1) == 1, "decode_step takes one token per row");
  TORCH_CHECK(weights.size() == 6 * qkv_bias.size(), "decode_step: 6 weights per layer");
  const int64_t n = ids.size(0), s = 1, end = start + s;
  const std::optional<at::Tensor> no_bias;
  const double scale = std::pow(static_cast<double>(hd), -0.5);  // Python's hd**-0.5
  at::Tensor x = at::embedding(embed, ids);                         // [N, 1, d]
  const at::Tensor c = at::index(cos, {positions}).unsqueeze(1);    // [N, 1, 1, hd]
  const at::Tensor si = at::index(sin, {positions}).unsqueeze(1);
  for (int64_t i = 0; i < static_cast<int64_t>(qkv_bias.size()); ++i) {
    const at::Tensor* w = &weights[6 * i];
    at::Tensor y = rms(x, w[0], eps);
    const at::Tensor qkv = linear(y, w[1], qkv_bias.get(i), onednn);
    const auto qk_v = qkv.split_with_sizes({(h + kvh) * hd, kvh * hd}, -1);
    // q and k rotated together: x * cos + roll(x) * sin, sin's first half negated (_rotate).
    at::Tensor qk = qk_v[0].view({n, s, h + kvh, hd}).transpose(1, 2);
    qk = at::add(at::mul(qk, c), at::mul(qk.roll({hd / 2}, {-1}), si));
    const at::Tensor layer_k = cache_k.select(0, i), layer_v = cache_v.select(0, i);
    layer_k.slice(2, start, end).copy_(qk.slice(1, h));
    layer_v.slice(2, start, end).copy_(qk_v[1].view({n, s, kvh, hd}).transpose(1, 2));
    const at::Tensor keys = layer_k.slice(2, 0, end), values = layer_v.slice(2, 0, end);
    // The query heads that share each K/V head side by side: two grouped matmuls (_attend).
    const at::Tensor q = qk.slice(1, 0, h).reshape({n, kvh, h / kvh, hd});
    const at::Tensor scores = at::matmul(q, keys.transpose(-1, -2)).mul_(scale).add_(mask);
    const at::Tensor att = at::matmul(scores.softmax(-1), values).view({n, h, 1, hd});
    x = at::add(x, linear(att.transpose(1, 2).reshape({n, s, h * hd}), w[2], no_bias, onednn));
    y = rms(x, w[3], eps);
    const auto gate_up = linear(y, w[4], no_bias, onednn).chunk(2, -1);
    x = at::add(x, linear(at::mul(at::silu(gate_up[0]), gate_up[1]), w[5], no_bias, onednn));
  }
  return linear(rms(x.select(1, -1), norm, eps), lm_head, no_bias, onednn);  // [N, V]
}

}  // namespace

TORCH_LIBRARY(axiom_rl, m) {
  m.def(
      "decode_step(Tensor ids, Tensor positions, Tensor(a!) cache_k, Tensor(b!) cache_v, int start, "
      "Tensor mask, Tensor cos, Tensor sin, Tensor embed, Tensor norm, Tensor lm_head, Tensor[] weights, "
      "Tensor?[] qkv_bias, int heads, int kv_heads, int head_dim, float eps, bool onednn) -> Tensor");
}

// For every backend: oneDNN's packed weights are tensors of their own kind (MkldnnCPU).
TORCH_LIBRARY_IMPL(axiom_rl, CompositeExplicitAutograd, m) { m.impl("decode_step", decode_step); }
