// RMSNorm, y = weight * (x / sqrt(mean(x^2) + eps)) over each row's last dimension, and its
// backward, each in one pass over memory: the training passes' norms (speed/rms_norm.py).
// transformers runs a norm as six element-wise calls forward (pow, mean, add, rsqrt and two
// products) and autograd some fifteen backward, each a pass over [tokens, hidden] and a fresh
// tensor; a Qwen2 layer has two norms, and a GRPO step runs each three times (reference, policy,
// backward). Here a row is read once for its sum of squares and once to write it out, in cache.
//
// The sums run in another order than ATen's (vector accumulators, then across lanes), so the
// results agree with transformers' to float32 rounding, not bit for bit. The weight's gradient is
// summed over fixed blocks of rows and then block by block in order, so it does not depend on the
// number of threads.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

namespace {
// Rows [begin, end) of the forward: y and each row's 1 / sqrt(mean(x^2) + eps).
using ForwardFn = void (*)(const float* x, const float* weight, float* y, float* rstd, int64_t dim, float eps,
                           int64_t begin, int64_t end);
// Rows [begin, end) of the backward: grad_x, and where grad_weight is not null, the sum over these
// rows of grad * x * rstd added into grad_weight.
using BackwardFn = void (*)(const float* grad, const float* x, const float* weight, const float* rstd, float* grad_x,
                            float* grad_weight, int64_t dim, int64_t begin, int64_t end);
struct Kernels {
  ForwardFn forward;
  BackwardFn backward;
  int64_t lanes;
};
}  // namespace

#include "vector_ops.h"

#ifdef AXIOM_VECTOR_OPS
#define AXIOM_RMS_NORM_KERNELS 1

namespace {
using axiom_vec::Avx2;
using axiom_vec::Avx512;
using axiom_vec::load;
using axiom_vec::store;

// Σ a[i] * b[i] over a row: four independent vector accumulators (the FMA latency), then the lanes.
template <typename I>
float row_dot(const float* a, const float* b, int64_t dim) {
  using V = typename I::V;
  constexpr int64_t lanes = I::lanes;
  V acc[4] = {I::splat(0.0f), I::splat(0.0f), I::splat(0.0f), I::splat(0.0f)};
  int64_t i = 0;
  for (; i + 4 * lanes <= dim; i += 4 * lanes)
    for (int u = 0; u < 4; ++u) acc[u] = I::fma(load<V>(a + i + u * lanes), load<V>(b + i + u * lanes), acc[u]);
  for (; i + lanes <= dim; i += lanes) acc[0] = I::fma(load<V>(a + i), load<V>(b + i), acc[0]);
  float total = I::sum((acc[0] + acc[1]) + (acc[2] + acc[3]));
  for (; i < dim; ++i) total += a[i] * b[i];
  return total;
}

template <typename I>
void forward_rows(const float* x, const float* weight, float* y, float* rstd, int64_t dim, float eps, int64_t begin,
                  int64_t end) {
  using V = typename I::V;
  constexpr int64_t lanes = I::lanes;
  for (int64_t row = begin; row < end; ++row) {
    const float* xr = x + row * dim;
    float* yr = y + row * dim;
    // As transformers: the mean of the squares, plus eps, its reciprocal square root; then x times
    // it, times the weight (two roundings, in that order).
    const float r = 1.0f / std::sqrt(row_dot<I>(xr, xr, dim) / static_cast<float>(dim) + eps);
    rstd[row] = r;
    const V rv = I::splat(r);
    int64_t i = 0;
    for (; i + lanes <= dim; i += lanes) store<V>(yr + i, load<V>(weight + i) * (load<V>(xr + i) * rv));
    for (; i < dim; ++i) yr[i] = weight[i] * (xr[i] * r);
  }
}

// With x̂ = x r and the gradient into x̂, ĝ = grad * weight:
//   grad_x = r (ĝ - x̂ (Σ ĝ x̂) / dim),   grad_weight += grad * x̂.
template <typename I>
void backward_rows(const float* grad, const float* x, const float* weight, const float* rstd, float* grad_x,
                   float* grad_weight, int64_t dim, int64_t begin, int64_t end) {
  using V = typename I::V;
  constexpr int64_t lanes = I::lanes;
  for (int64_t row = begin; row < end; ++row) {
    const float *gr = grad + row * dim, *xr = x + row * dim;
    float* gxr = grad_x + row * dim;
    const float r = rstd[row];
    const V rv = I::splat(r);
    // Σ ĝ x̂ = r Σ grad * weight * x: the sum in vector accumulators, r after.
    V acc[2] = {I::splat(0.0f), I::splat(0.0f)};
    int64_t i = 0;
    for (; i + 2 * lanes <= dim; i += 2 * lanes)
      for (int u = 0; u < 2; ++u) {
        const int64_t j = i + u * lanes;
        acc[u] = I::fma(load<V>(gr + j) * load<V>(weight + j), load<V>(xr + j), acc[u]);
      }
    for (; i + lanes <= dim; i += lanes) acc[0] = I::fma(load<V>(gr + i) * load<V>(weight + i), load<V>(xr + i), acc[0]);
    float dot = I::sum(acc[0] + acc[1]);
    for (; i < dim; ++i) dot += gr[i] * weight[i] * xr[i];
    const float c = dot * r / static_cast<float>(dim);  // (Σ ĝ x̂) / dim
    const V cv = I::splat(c);
    for (i = 0; i + lanes <= dim; i += lanes) {
      const V g = load<V>(gr + i), xh = load<V>(xr + i) * rv;
      store<V>(gxr + i, rv * (g * load<V>(weight + i) - xh * cv));
      if (grad_weight) store<V>(grad_weight + i, I::fma(g, xh, load<V>(grad_weight + i)));
    }
    for (; i < dim; ++i) {
      const float g = gr[i], xh = xr[i] * r;
      gxr[i] = r * (g * weight[i] - xh * c);
      if (grad_weight) grad_weight[i] += g * xh;
    }
  }
}

// flatten: the loops and the instruction set's helpers inlined into one function per set.
__attribute__((target("avx512f"), flatten)) void forward_avx512(const float* x, const float* w, float* y, float* rs,
                                                                 int64_t dim, float eps, int64_t b, int64_t e) {
  forward_rows<Avx512>(x, w, y, rs, dim, eps, b, e);
}
__attribute__((target("avx2,fma"), flatten)) void forward_avx2(const float* x, const float* w, float* y, float* rs,
                                                                int64_t dim, float eps, int64_t b, int64_t e) {
  forward_rows<Avx2>(x, w, y, rs, dim, eps, b, e);
}
__attribute__((target("avx512f"), flatten)) void backward_avx512(const float* g, const float* x, const float* w,
                                                                  const float* rs, float* gx, float* gw, int64_t dim,
                                                                  int64_t b, int64_t e) {
  backward_rows<Avx512>(g, x, w, rs, gx, gw, dim, b, e);
}
__attribute__((target("avx2,fma"), flatten)) void backward_avx2(const float* g, const float* x, const float* w,
                                                                 const float* rs, float* gx, float* gw, int64_t dim,
                                                                 int64_t b, int64_t e) {
  backward_rows<Avx2>(g, x, w, rs, gx, gw, dim, b, e);
}

}  // namespace
#endif

namespace {

// The kernels of the instruction set ATen runs here (its CPU capability), or nullptr.
const Kernels* kernels() {
#ifdef AXIOM_RMS_NORM_KERNELS
  static const Kernels avx512{forward_avx512, backward_avx512, 16}, avx2{forward_avx2, backward_avx2, 8};
  static const Kernels* chosen = axiom_vec::for_capability(&avx512, &avx2);
  return chosen;
#else
  return nullptr;
#endif
}

// The vector width of the kernels that run here (16 or 8), or 0 where none does.
int64_t rms_norm_lanes() { return kernels() ? kernels()->lanes : 0; }

// Rows per block of the weight's gradient: each block's partial sum is one task's, so the sum does
// not depend on how many threads share the blocks.
constexpr int64_t kBlockRows = 64;

// Work per task worth a thread of its own (elements), as ATen's grain.
constexpr int64_t kGrain = 32768;

int64_t checked_rows(const at::Tensor& x, const at::Tensor& weight, const char* what) {
  TORCH_CHECK(kernels() != nullptr, what, ": no kernel for this CPU");
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == at::kFloat && x.is_contiguous() && x.dim() >= 1,
              what, ": x a contiguous float32 CPU tensor");
  TORCH_CHECK(weight.device().is_cpu() && weight.scalar_type() == at::kFloat && weight.is_contiguous() &&
                  weight.dim() == 1 && weight.size(0) == x.size(-1),
              what, ": weight a contiguous float32 CPU vector of x's last dimension");
  return x.size(-1) == 0 ? 0 : x.numel() / x.size(-1);
}

// (y, like x; rstd [rows], 1 / sqrt(mean(x^2) + eps) of each row).
std::tuple<at::Tensor, at::Tensor> rms_norm_forward(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const int64_t rows = checked_rows(x, weight, "rms_norm_forward"), dim = x.size(-1);
  at::Tensor y = at::empty_like(x);
  at::Tensor rstd = at::empty({rows}, x.options());
  const ForwardFn fn = kernels()->forward;
  const float *xp = x.data_ptr<float>(), *wp = weight.data_ptr<float>();
  float *yp = y.data_ptr<float>(), *rp = rstd.data_ptr<float>();
  const float e = static_cast<float>(eps);
  at::parallel_for(0, rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(dim, 1)),
                   [&](int64_t begin, int64_t end) { fn(xp, wp, yp, rp, dim, e, begin, end); });
  return {y, rstd};
}

// (grad_x, like x; grad_weight [dim], or an empty tensor where not asked).
std::tuple<at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor& grad, const at::Tensor& x,
                                                     const at::Tensor& weight, const at::Tensor& rstd,
                                                     bool weight_grad) {
  const int64_t rows = checked_rows(x, weight, "rms_norm_backward"), dim = x.size(-1);
  TORCH_CHECK(grad.sizes() == x.sizes() && grad.is_contiguous() && grad.scalar_type() == at::kFloat,
              "rms_norm_backward: grad a contiguous float32 tensor like x");
  TORCH_CHECK(rstd.numel() == rows && rstd.is_contiguous() && rstd.scalar_type() == at::kFloat,
              "rms_norm_backward: rstd a contiguous float32 tensor of x's rows");
  at::Tensor grad_x = at::empty_like(x);
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  at::Tensor partial = weight_grad ? at::zeros({blocks, dim}, x.options()) : at::Tensor();
  const BackwardFn fn = kernels()->backward;
  const float *gp = grad.data_ptr<float>(), *xp = x.data_ptr<float>(), *wp = weight.data_ptr<float>(),
              *rp = rstd.data_ptr<float>();
  float* gxp = grad_x.data_ptr<float>();
  float* pp = weight_grad ? partial.data_ptr<float>() : nullptr;
  at::parallel_for(0, blocks, std::max<int64_t>(1, kGrain / std::max<int64_t>(kBlockRows * dim, 1)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t b = begin; b < end; ++b)
                       fn(gp, xp, wp, rp, gxp, pp ? pp + b * dim : nullptr, dim, b * kBlockRows,
                          std::min(rows, (b + 1) * kBlockRows));
                   });
  if (!weight_grad) return {grad_x, at::empty({0}, x.options())};
  // The blocks' partial sums in order (a fixed order, whatever the threads).
  at::Tensor grad_weight = at::zeros({dim}, x.options());
  float* gw = grad_weight.data_ptr<float>();
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t i = 0; i < dim; ++i) gw[i] += pp[b * dim + i];
  return {grad_x, grad_weight};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(axiom_rl, m) {
  m.def("rms_norm_lanes() -> int", &rms_norm_lanes);  // no tensor argument to dispatch on
  m.def("rms_norm_forward(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)", &rms_norm_forward);
  m.def("rms_norm_backward(Tensor grad, Tensor x, Tensor weight, Tensor rstd, bool weight_grad) -> (Tensor, Tensor)",
        &rms_norm_backward);
}
