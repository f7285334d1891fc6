// Rotary position embedding of the queries and keys, and its backward, in one pass each: the
// training passes' RoPE (speed/rotary.py). transformers computes q * cos + rotate_half(q) * sin
// for q and for k as eight element-wise calls and a concatenation each, and autograd's backward as
// as many again, every one a pass over [batch, heads, positions, head size] and a fresh tensor.
//
// With each head's vector split into halves lo and hi (rotate_half(x) = [-x_hi, x_lo]):
//   forward   out_lo = x_lo c_lo - x_hi s_lo,   out_hi = x_hi c_hi + x_lo s_hi
//   backward  in_lo  = g_lo c_lo + g_hi s_hi,   in_hi  = g_hi c_hi - g_lo s_lo
// Every product and sum is rounded once, as ATen's calls round it (the library is built with
// -ffp-contract=off, so no multiply-add is fused), and autograd sums each half's two terms the same
// way: the same bits as transformers' forward and autograd's backward (tests/test_rotary.py).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <tuple>

namespace {

struct Problem {
  const float* x;
  float* out;
  int64_t x_stride[3], out_stride[3];
  const float *cos, *sin;
  int64_t cs_stride[2];  // batch (0: one row of positions for every batch), position
  int64_t batch, heads, positions, dim;
};

// One head's vector: `backward` picks the second formula above.
template <bool backward>
inline void rotate_vector(const float* __restrict x, float* __restrict o, const float* __restrict c,
                          const float* __restrict sn, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    if (backward) {
      o[i] = x[i] * c[i] + x[half + i] * sn[half + i];
      o[half + i] = x[half + i] * c[half + i] - x[i] * sn[i];
    } else {
      o[i] = x[i] * c[i] - x[half + i] * sn[i];
      o[half + i] = x[half + i] * c[half + i] + x[i] * sn[half + i];
    }
  }
}

// (batch, position) pairs [begin, end), every head of each: one cos and sin row a pair.
template <bool backward>
void rotate_rows(const Problem& p, int64_t begin, int64_t end) {
  const int64_t half = p.dim / 2;
  for (int64_t r = begin; r < end; ++r) {
    const int64_t b = r / p.positions, s = r % p.positions;
    const float* x = p.x + b * p.x_stride[0] + s * p.x_stride[2];
    float* o = p.out + b * p.out_stride[0] + s * p.out_stride[2];
    const float* c = p.cos + b * p.cs_stride[0] + s * p.cs_stride[1];
    const float* sn = p.sin + b * p.cs_stride[0] + s * p.cs_stride[1];
    for (int64_t h = 0; h < p.heads; ++h)
      rotate_vector<backward>(x + h * p.x_stride[1], o + h * p.out_stride[1], c, sn, half);
  }
}

// The same loops vectorized by the compiler for the wider instruction sets (each value still
// rounded alike: element-wise products and sums give the same bits at any width).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target("avx512f"), flatten)) void rotate_avx512(const Problem& p, bool bw, int64_t b, int64_t e) {
  bw ? rotate_rows<true>(p, b, e) : rotate_rows<false>(p, b, e);
}
__attribute__((target("avx2"), flatten)) void rotate_avx2(const Problem& p, bool bw, int64_t b, int64_t e) {
  bw ? rotate_rows<true>(p, b, e) : rotate_rows<false>(p, b, e);
}
#endif

void rotate(const Problem& p, bool backward) {
  const int64_t rows = p.batch * p.positions;
  auto body = [&](int64_t begin, int64_t end) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    if (__builtin_cpu_supports("avx512f")) return rotate_avx512(p, backward, begin, end);
    if (__builtin_cpu_supports("avx2")) return rotate_avx2(p, backward, begin, end);
#endif
    backward ? rotate_rows<true>(p, begin, end) : rotate_rows<false>(p, begin, end);
  };
  at::parallel_for(0, rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(p.heads * p.dim, 1)), body);
}

void check(const at::Tensor& t, const char* what, int64_t dims) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat && t.dim() == dims && t.stride(-1) == 1, what,
              ": a float32 CPU tensor of ", dims, " dimensions, the last contiguous");
}

// x [B, H, S, D] rotated by cos and sin [B or 1, S, D], into a tensor laid out as x.
at::Tensor rotated(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool backward) {
  check(x, "rotary", 4);
  check(cos, "rotary: cos", 3);
  check(sin, "rotary: sin", 3);
  const int64_t B = x.size(0), S = x.size(2), D = x.size(3);
  TORCH_CHECK(D % 2 == 0, "rotary: an even head size");
  TORCH_CHECK(cos.sizes() == sin.sizes() && cos.strides() == sin.strides(), "rotary: cos and sin alike");
  TORCH_CHECK((cos.size(0) == B || cos.size(0) == 1) && cos.size(1) == S && cos.size(2) == D,
              "rotary: cos and sin [batch or 1, positions, head size]");
  at::Tensor out = at::empty_like(x);  // x's layout, as ATen's element-wise calls give
  Problem p{};
  p.x = x.data_ptr<float>();
  p.out = out.data_ptr<float>();
  for (int d = 0; d < 3; ++d) {
    p.x_stride[d] = x.stride(d);
    p.out_stride[d] = out.stride(d);
  }
  p.cos = cos.data_ptr<float>();
  p.sin = sin.data_ptr<float>();
  p.cs_stride[0] = cos.size(0) == 1 ? 0 : cos.stride(0);
  p.cs_stride[1] = cos.stride(1);
  p.batch = B;
  p.heads = x.size(1);
  p.positions = S;
  p.dim = D;
  rotate(p, backward);
  return out;
}

std::tuple<at::Tensor, at::Tensor> rotary_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                                  const at::Tensor& sin) {
  return {rotated(q, cos, sin, false), rotated(k, cos, sin, false)};
}

std::tuple<at::Tensor, at::Tensor> rotary_backward(const at::Tensor& grad_q, const at::Tensor& grad_k,
                                                   const at::Tensor& cos, const at::Tensor& sin) {
  return {rotated(grad_q, cos, sin, true), rotated(grad_k, cos, sin, true)};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(axiom_rl, m) {
  m.def("rotary_forward(Tensor q, Tensor k, Tensor cos, Tensor sin) -> (Tensor, Tensor)", &rotary_forward);
  m.def("rotary_backward(Tensor grad_q, Tensor grad_k, Tensor cos, Tensor sin) -> (Tensor, Tensor)",
        &rotary_backward);
}
