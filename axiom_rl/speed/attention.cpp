// Attention for the training passes on a CPU, float32: softmax(q k^T * scale + mask) v, forward and
// backward (speed/attention.py). ATen's CPU flash attention runs at 35-45 GFLOP/s on a GRPO step's
// shapes (tens to hundreds of queries, a head size of 64) and spends some 20 ms of the benchmark's
// full step, 17 of them in backward; its math path was no faster (docs/benchmarks.md).
//
// The work is split into one task per batch row and K/V head, so a task reads its keys and values
// once for every query head that shares them (grouped-query attention without repeating K and V)
// and owns its rows of the K/V gradients. Each query row stops at its last unmasked key, so causal
// rows do about half the work. The scores run over 16 (AVX-512) or 8 (AVX2) keys at a time from a
// transposed copy of the task's keys; the weighted sums over the head size. The forward saves each
// row's log-sum-exp, and the backward recomputes the probabilities from it, as flash attention does.
//
// The sums run in another order than ATen's, so results agree with F.scaled_dot_product_attention
// to float32 rounding (the tests compare them), not bit for bit; they are the same run after run
// and with any number of threads (every value is summed by one task, in one order). Rows with no
// key to attend give zeros and pass no gradient, as ATen's flash attention does.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "vector_ops.h"

namespace {

// q [B, H, S, D], k and v [B, KVH, SK, D], each given by the strides of its first three dimensions
// (the last is 1). mask: [B or 1, 1, S, SK], true where a query may attend (SK's stride 1), or
// none: then `causal` says whether query i sees keys 0..i (F.scaled_dot_product_attention's
// is_causal) or every key.
struct Problem {
  const float *q, *k, *v;
  int64_t q_stride[3], k_stride[3], v_stride[3];
  const bool* mask;
  int64_t mask_batch, mask_row;
  bool causal;
  int64_t batch, heads, kv_heads, queries, keys, dim;
  float scale;
};

// How many keys query i of batch row b looks at: up to and including its last allowed one.
int64_t extent(const Problem& p, int64_t b, int64_t i) {
  if (p.mask == nullptr) return p.causal ? std::min(i + 1, p.keys) : p.keys;
  const bool* row = p.mask + b * p.mask_batch + i * p.mask_row;
  int64_t e = p.keys;
  while (e > 0 && !row[e - 1]) --e;
  return e;
}

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

#ifdef AXIOM_VECTOR_OPS
using axiom_vec::load;
using axiom_vec::store;

// A task's keys (or values) transposed, [D, SKp] with SKp a whole number of vectors, zero past SK.
void transpose_into(const float* x, int64_t row_stride, int64_t keys, int64_t padded, int64_t dim, float* out) {
  for (int64_t d = 0; d < dim; ++d) {
    float* o = out + d * padded;
    for (int64_t j = 0; j < keys; ++j) o[j] = x[j * row_stride + d];
    std::fill(o + keys, o + padded, 0.0f);
  }
}

// Rows per tile: as many query rows as keep their sums over the head size in registers (32 vector
// registers under AVX-512: 4 rows of up to 4 vectors, 2 of 8, 1 of 16).
template <int VEC>
constexpr int rows_per_tile() {
  return VEC <= 4 ? 4 : VEC == 8 ? 2 : 1;
}

// out[r] = factor[r] * sum over i < count of a[r][i] * b[i * stride, ... + N vectors), for R rows:
// each loaded vector of b serves R rows, and the R x N sums are independent chains of multiply-adds
// (their latency overlaps) that stay in registers.
template <typename I, int R, int N>
__attribute__((always_inline)) inline void rows_times(const float* const* a, const float* b, int64_t stride,
                                                      int64_t count, const float* factor, float* const* out) {
  using V = typename I::V;
  V acc[R][N];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) acc[r][n] = V{};
  for (int64_t i = 0; i < count; ++i) {
    V row[N];
    for (int n = 0; n < N; ++n) row[n] = load<V>(b + i * stride + n * I::lanes);
    for (int r = 0; r < R; ++r) {
      const V ai = I::splat(a[r][i]);
      for (int n = 0; n < N; ++n) acc[r][n] = I::fma(ai, row[n], acc[r][n]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) store<V>(out[r] + n * I::lanes, acc[r][n] * factor[r]);
}

// s[r * padded + j] = dot(x_r, t[:, j]) * scale for R rows and j < width (a whole number of
// vectors; t transposed, [dim, padded], zero past the task's keys), two vectors of keys at a time.
template <typename I, int R>
inline void dots(const float* const* x, const float* t, int64_t padded, int64_t width, int64_t dim, float scale,
                 float* s) {
  float scales[R];
  float* out[R];
  for (int r = 0; r < R; ++r) scales[r] = scale;
  for (int64_t j = 0; j < width; j += 2 * I::lanes) {
    for (int r = 0; r < R; ++r) out[r] = s + r * padded + j;
    if (j + 2 * I::lanes <= width)
      rows_times<I, R, 2>(x, t + j, padded, dim, scales, out);
    else
      rows_times<I, R, 1>(x, t + j, padded, dim, scales, out);
  }
}

// rows[r] = factor[r] * sum over j < count of w[r * padded + j] * m[j * stride, ... + dim): the
// tile's probabilities (or dS) against the task's values (or keys).
template <typename I, int VEC, int R>
__attribute__((always_inline)) inline void weighted_rows(const float* w, int64_t padded, const float* m,
                                                         int64_t stride, int64_t count, const float* factor,
                                                         float* const* rows) {
  const float* a[R];
  for (int r = 0; r < R; ++r) a[r] = w + r * padded;
  rows_times<I, R, VEC>(a, m, stride, count, factor, rows);
}

// A tile: R query rows i0.. of head h in batch row b, their extents and the widest of them.
template <int R>
struct Tile {
  int64_t b, h, i0;
  int64_t extent[R];
  int64_t most;  // the largest extent
  const float* q[R];
};

// Where row r of the tile starts in a [B, S, H, D] tensor (out, grad_out, grad_q), and its place
// in the log-sum-exps [B, H, S].
template <int R>
int64_t row_at(const Problem& p, const Tile<R>& t, int r) {
  return ((t.b * p.queries + t.i0 + r) * p.heads + t.h) * p.dim;
}
template <int R>
int64_t lse_at(const Problem& p, const Tile<R>& t, int r) {
  return (t.b * p.heads + t.h) * p.queries + t.i0 + r;
}

template <int R>
Tile<R> tile(const Problem& p, int64_t b, int64_t h, int64_t i0) {
  Tile<R> t{};
  t.b = b;
  t.h = h;
  t.i0 = i0;
  t.most = 0;
  for (int r = 0; r < R; ++r) {
    t.extent[r] = extent(p, b, i0 + r);
    t.most = std::max(t.most, t.extent[r]);
    t.q[r] = p.q + b * p.q_stride[0] + h * p.q_stride[1] + (i0 + r) * p.q_stride[2];
  }
  return t;
}

// The tile's scores (scaled; -inf where masked or past a row's extent) into s[r * padded, ...
// + width) with width the widest extent rounded up to whole vectors; returns width.
template <typename I, int R>
inline int64_t tile_scores(const Problem& p, const Tile<R>& t, const float* kt, int64_t padded, float* s) {
  const float minus_inf = -std::numeric_limits<float>::infinity();
  const int64_t width = round_up(t.most, I::lanes);
  if (width == 0) return 0;
  dots<I, R>(t.q, kt, padded, width, p.dim, p.scale, s);
  for (int r = 0; r < R; ++r) {
    float* sr = s + r * padded;
    const bool* row = p.mask ? p.mask + t.b * p.mask_batch + (t.i0 + r) * p.mask_row : nullptr;
    if (row)
      for (int64_t j = 0; j < t.extent[r]; ++j)
        if (!row[j]) sr[j] = minus_inf;
    std::fill(sr + t.extent[r], sr + width, minus_inf);
  }
  return width;
}

// Forward over one tile: out [B, S, H, D] rows and their log-sum-exps.
template <typename I, int VEC, int R>
__attribute__((always_inline)) inline void forward_tile(const Problem& p, const Tile<R>& t, const float* kt,
                                                        const float* v, int64_t padded, float* s, float* out,
                                                        float* lse) {
  using V = typename I::V;
  constexpr int64_t L = I::lanes;
  const float minus_inf = -std::numeric_limits<float>::infinity();
  const int64_t width = tile_scores<I, R>(p, t, kt, padded, s);
  float sum[R];
  bool empty[R];
  for (int r = 0; r < R; ++r) {
    float* sr = s + r * padded;
    V most = I::splat(minus_inf);
    for (int64_t j = 0; j < width; j += L) {
      const V x = load<V>(sr + j);
      most = x > most ? x : most;
    }
    const float m = width > 0 ? I::max(most) : minus_inf;
    empty[r] = m == minus_inf;
    V total{};
    for (int64_t j = 0; j < width; j += L) {
      const V x = empty[r] ? V{} : I::exp(load<V>(sr + j) - m);
      store<V>(sr + j, x);
      total += x;
    }
    sum[r] = I::sum(total);
    lse[lse_at(p, t, r)] = empty[r] ? minus_inf : m + std::log(sum[r]);
  }
  float inverse[R];
  float* rows[R];
  for (int r = 0; r < R; ++r) {
    inverse[r] = empty[r] ? 0.0f : 1.0f / sum[r];
    rows[r] = out + row_at(p, t, r);
  }
  weighted_rows<I, VEC, R>(s, padded, v, p.v_stride[2], t.most, inverse, rows);
}

// Backward over one tile: its rows of grad_q, and its terms of the task's grad_k and grad_v rows.
template <typename I, int VEC, int R>
__attribute__((always_inline)) inline void backward_tile(const Problem& p, const Tile<R>& t, const float* kt,
                                                         const float* vt, const float* k, int64_t padded, float* s,
                                                         float* ds, const float* grad_out, const float* out,
                                                         const float* lse, float* grad_q, float* gk, float* gv) {
  using V = typename I::V;
  constexpr int64_t L = I::lanes;
  const float minus_inf = -std::numeric_limits<float>::infinity();
  const int64_t width = tile_scores<I, R>(p, t, kt, padded, s);
  const float* go[R];
  for (int r = 0; r < R; ++r) go[r] = grad_out + row_at(p, t, r);
  if (width > 0) dots<I, R>(go, vt, padded, width, p.dim, 1.0f, ds);  // dP = dO . V
  for (int r = 0; r < R; ++r) {
    float* sr = s + r * padded;
    float* dsr = ds + r * padded;
    const float l = lse[lse_at(p, t, r)];
    const float* o = out + row_at(p, t, r);
    V dot{};
    for (int c = 0; c < VEC; ++c) dot = I::fma(load<V>(go[r] + c * L), load<V>(o + c * L), dot);
    const float delta = I::sum(dot);  // dO . O, which softmax's backward takes from every dP
    for (int64_t j = 0; j < width; j += L) {
      const V probability = l == minus_inf ? V{} : I::exp(load<V>(sr + j) - l);
      store<V>(sr + j, probability);
      // dS, with the scale that both q's and k's gradients take
      store<V>(dsr + j, probability * (load<V>(dsr + j) - delta) * p.scale);
    }
  }
  // grad_q = dS . K
  float one[R];
  float* rows[R];
  for (int r = 0; r < R; ++r) {
    one[r] = 1.0f;
    rows[r] = grad_q + row_at(p, t, r);
  }
  weighted_rows<I, VEC, R>(ds, padded, k, p.k_stride[2], t.most, one, rows);
  // grad_k += dS^T . Q and grad_v += P^T . dO, each row of them read and written once per tile.
  for (int64_t j = 0; j < t.most; ++j) {
    float* gkj = gk + j * p.dim;
    float* gvj = gv + j * p.dim;
    for (int c = 0; c < VEC; ++c) {
      V dk = load<V>(gkj + c * L), dv = load<V>(gvj + c * L);
      for (int r = 0; r < R; ++r) {
        dk = I::fma(I::splat(ds[r * padded + j]), load<V>(t.q[r] + c * L), dk);
        dv = I::fma(I::splat(s[r * padded + j]), load<V>(go[r] + c * L), dv);
      }
      store<V>(gkj + c * L, dk);
      store<V>(gvj + c * L, dv);
    }
  }
}

// The query rows of every head of one task, in tiles of R rows, then one at a time.
template <int R, typename F>
__attribute__((always_inline)) inline void over_tiles(const Problem& p, int64_t b, int64_t kvh, const F& f) {
  const int64_t groups = p.heads / p.kv_heads;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t h = kvh * groups + g;
    int64_t i = 0;
    for (; i + R <= p.queries; i += R) f(tile<R>(p, b, h, i));
    for (; i < p.queries; ++i) f(tile<1>(p, b, h, i));
  }
}

// VEC: the head size in vectors, a constant so that the sums over it stay in registers.
template <typename I, int VEC>
__attribute__((always_inline)) inline void forward_task(const Problem& p, int64_t task, float* out, float* lse,
                                                        std::vector<float>& scratch) {
  constexpr int R = rows_per_tile<VEC>();
  const int64_t b = task / p.kv_heads, kvh = task % p.kv_heads;
  const int64_t padded = round_up(p.keys, I::lanes);
  scratch.resize(p.dim * padded + R * padded);
  float* kt = scratch.data();
  float* s = kt + p.dim * padded;
  transpose_into(p.k + b * p.k_stride[0] + kvh * p.k_stride[1], p.k_stride[2], p.keys, padded, p.dim, kt);
  const float* v = p.v + b * p.v_stride[0] + kvh * p.v_stride[1];
  over_tiles<R>(p, b, kvh, [&](const auto& t) {
    forward_tile<I, VEC>(p, t, kt, v, padded, s, out, lse);
  });
}

template <typename I, int VEC>
__attribute__((always_inline)) inline void backward_task(const Problem& p, int64_t task, const float* grad_out,
                                                         const float* out, const float* lse, float* grad_q,
                                                         float* grad_k, float* grad_v, std::vector<float>& scratch) {
  constexpr int R = rows_per_tile<VEC>();
  const int64_t b = task / p.kv_heads, kvh = task % p.kv_heads;
  const int64_t padded = round_up(p.keys, I::lanes);
  scratch.resize(2 * p.dim * padded + 2 * R * padded);
  float* kt = scratch.data();
  float* vt = kt + p.dim * padded;
  float* s = vt + p.dim * padded;
  float* ds = s + R * padded;
  const float* k = p.k + b * p.k_stride[0] + kvh * p.k_stride[1];
  transpose_into(k, p.k_stride[2], p.keys, padded, p.dim, kt);
  transpose_into(p.v + b * p.v_stride[0] + kvh * p.v_stride[1], p.v_stride[2], p.keys, padded, p.dim, vt);
  float* gk = grad_k + task * p.keys * p.dim;  // [B, KVH, SK, D]: this task's rows, its own
  float* gv = grad_v + task * p.keys * p.dim;
  std::fill(gk, gk + p.keys * p.dim, 0.0f);
  std::fill(gv, gv + p.keys * p.dim, 0.0f);
  over_tiles<R>(p, b, kvh, [&](const auto& t) {
    backward_tile<I, VEC>(p, t, kt, vt, k, padded, s, ds, grad_out, out, lse, grad_q, gk, gv);
  });
}

template <int VEC>
__attribute__((target("avx512f"), flatten)) void forward_avx512(const Problem& p, int64_t begin, int64_t end,
                                                                 float* out, float* lse) {
  std::vector<float> scratch;
  for (int64_t t = begin; t < end; ++t) forward_task<axiom_vec::Avx512, VEC>(p, t, out, lse, scratch);
}
template <int VEC>
__attribute__((target("avx2,fma"), flatten)) void forward_avx2(const Problem& p, int64_t begin, int64_t end,
                                                                float* out, float* lse) {
  std::vector<float> scratch;
  for (int64_t t = begin; t < end; ++t) forward_task<axiom_vec::Avx2, VEC>(p, t, out, lse, scratch);
}
template <int VEC>
__attribute__((target("avx512f"), flatten)) void backward_avx512(const Problem& p, int64_t begin, int64_t end,
                                                                  const float* go, const float* o, const float* l,
                                                                  float* gq, float* gk, float* gv) {
  std::vector<float> scratch;
  for (int64_t t = begin; t < end; ++t) backward_task<axiom_vec::Avx512, VEC>(p, t, go, o, l, gq, gk, gv, scratch);
}
template <int VEC>
__attribute__((target("avx2,fma"), flatten)) void backward_avx2(const Problem& p, int64_t begin, int64_t end,
                                                                 const float* go, const float* o, const float* l,
                                                                 float* gq, float* gk, float* gv) {
  std::vector<float> scratch;
  for (int64_t t = begin; t < end; ++t) backward_task<axiom_vec::Avx2, VEC>(p, t, go, o, l, gq, gk, gv, scratch);
}
#endif

using ForwardFn = void (*)(const Problem&, int64_t, int64_t, float*, float*);
using BackwardFn = void (*)(const Problem&, int64_t, int64_t, const float*, const float*, const float*, float*,
                            float*, float*);
// One instruction set's kernels, by the head size in vectors: 1, 2, 4, 8 or 16 (index log2).
struct Kernels {
  ForwardFn forward[5];
  BackwardFn backward[5];
  int64_t lanes;
};

// The kernels of the instruction set ATen itself runs here (its CPU capability, which
// ATEN_CPU_CAPABILITY may lower: the tests run the AVX2 ones that way), or nullptr.
const Kernels* kernels() {
#ifdef AXIOM_VECTOR_OPS
  static const Kernels avx512{
      {forward_avx512<1>, forward_avx512<2>, forward_avx512<4>, forward_avx512<8>, forward_avx512<16>},
      {backward_avx512<1>, backward_avx512<2>, backward_avx512<4>, backward_avx512<8>, backward_avx512<16>},
      16};
  static const Kernels avx2{
      {forward_avx2<1>, forward_avx2<2>, forward_avx2<4>, forward_avx2<8>, forward_avx2<16>},
      {backward_avx2<1>, backward_avx2<2>, backward_avx2<4>, backward_avx2<8>, backward_avx2<16>},
      8};
  static const Kernels* chosen = axiom_vec::for_capability(&avx512, &avx2);
  return chosen;
#else
  return nullptr;
#endif
}

// Which of a Kernels' entries runs head size `dim`, or -1 for none.
int64_t kernel_index(int64_t dim) {
  if (kernels() == nullptr || dim % kernels()->lanes != 0) return -1;
  for (int64_t i = 0; i < 5; ++i)
    if (dim == kernels()->lanes << i) return i;
  return -1;
}

// Whether a kernel runs attention with head size `dim` on this CPU (head sizes of 1, 2, 4, 8 or 16
// vectors: 16-256 under AVX-512, 8-128 under AVX2).
bool attention_kernel(int64_t dim) { return kernel_index(dim) >= 0; }

// The vector width of the kernels that run here (16 or 8), or 0.
int64_t attention_lanes() { return kernels() ? kernels()->lanes : 0; }

Problem problem(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& mask,
                bool causal, double scale) {
  TORCH_CHECK(kernels() != nullptr, "attention: no kernel for this CPU");
  for (const at::Tensor* t : {&q, &k, &v}) {
    TORCH_CHECK(t->dim() == 4 && t->device().is_cpu() && t->scalar_type() == at::kFloat && t->stride(3) == 1,
                "attention: float32 CPU tensors [batch, heads, positions, head size], the last contiguous");
  }
  const int64_t B = q.size(0), H = q.size(1), S = q.size(2), D = q.size(3), KVH = k.size(1), SK = k.size(2);
  TORCH_CHECK(k.sizes() == v.sizes() && k.size(0) == B && k.size(3) == D, "attention: k and v [B, KVH, SK, D]");
  TORCH_CHECK(KVH > 0 && H % KVH == 0, "attention: the query heads a multiple of the K/V heads");
  TORCH_CHECK(kernel_index(D) >= 0, "attention: no kernel for head size ", D);
  Problem p{};
  p.q = q.data_ptr<float>();
  p.k = k.data_ptr<float>();
  p.v = v.data_ptr<float>();
  for (int d = 0; d < 3; ++d) {
    p.q_stride[d] = q.stride(d);
    p.k_stride[d] = k.stride(d);
    p.v_stride[d] = v.stride(d);
  }
  p.mask = nullptr;
  if (mask.has_value()) {
    const at::Tensor& m = *mask;
    TORCH_CHECK(m.scalar_type() == at::kBool && m.dim() == 4 && (m.size(0) == B || m.size(0) == 1) &&
                    m.size(1) == 1 && m.size(2) == S && m.size(3) == SK && m.stride(3) == 1,
                "attention: a boolean mask [B or 1, 1, S, SK], the last dimension contiguous");
    p.mask = m.data_ptr<bool>();
    p.mask_batch = m.size(0) == 1 ? 0 : m.stride(0);
    p.mask_row = m.stride(2);
  }
  p.causal = causal;
  p.batch = B;
  p.heads = H;
  p.kv_heads = KVH;
  p.queries = S;
  p.keys = SK;
  p.dim = D;
  p.scale = static_cast<float>(scale);
  return p;
}

// (out [B, S, H, D] contiguous, the layout the attention's output projection reads; log-sum-exp [B, H, S]).
std::tuple<at::Tensor, at::Tensor> attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                     const std::optional<at::Tensor>& mask, bool causal,
                                                     double scale) {
  const Problem p = problem(q, k, v, mask, causal, scale);
  at::Tensor out = at::empty({p.batch, p.queries, p.heads, p.dim}, q.options());
  at::Tensor lse = at::empty({p.batch, p.heads, p.queries}, q.options());
  const ForwardFn fn = kernels()->forward[kernel_index(p.dim)];
  float* o = out.data_ptr<float>();
  float* l = lse.data_ptr<float>();
  at::parallel_for(0, p.batch * p.kv_heads, 1, [&](int64_t begin, int64_t end) { fn(p, begin, end, o, l); });
  return {out, lse};
}

// (grad_q [B, S, H, D], grad_k and grad_v [B, KVH, SK, D]), all contiguous, from grad_out [B, S, H, D]
// and the forward's out and log-sum-exp.
std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward(const at::Tensor& grad_out, const at::Tensor& q,
                                                                  const at::Tensor& k, const at::Tensor& v,
                                                                  const std::optional<at::Tensor>& mask,
                                                                  bool causal, double scale, const at::Tensor& out,
                                                                  const at::Tensor& lse) {
  const Problem p = problem(q, k, v, mask, causal, scale);
  const std::vector<int64_t> rows{p.batch, p.queries, p.heads, p.dim};
  TORCH_CHECK(grad_out.sizes() == rows && out.sizes() == rows && grad_out.is_contiguous() && out.is_contiguous() &&
                  grad_out.scalar_type() == at::kFloat && out.scalar_type() == at::kFloat,
              "attention_backward: grad_out and out contiguous float32 [B, S, H, D]");
  TORCH_CHECK(lse.sizes() == std::vector<int64_t>({p.batch, p.heads, p.queries}) && lse.is_contiguous() &&
                  lse.scalar_type() == at::kFloat,
              "attention_backward: lse contiguous float32 [B, H, S]");
  at::Tensor grad_q = at::empty(rows, q.options());
  at::Tensor grad_k = at::empty({p.batch, p.kv_heads, p.keys, p.dim}, q.options());
  at::Tensor grad_v = at::empty_like(grad_k);
  const BackwardFn fn = kernels()->backward[kernel_index(p.dim)];
  const float *go = grad_out.data_ptr<float>(), *o = out.data_ptr<float>(), *l = lse.data_ptr<float>();
  float *gq = grad_q.data_ptr<float>(), *gk = grad_k.data_ptr<float>(), *gv = grad_v.data_ptr<float>();
  at::parallel_for(0, p.batch * p.kv_heads, 1,
                   [&](int64_t begin, int64_t end) { fn(p, begin, end, go, o, l, gq, gk, gv); });
  return {grad_q, grad_k, grad_v};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(axiom_rl, m) {
  m.def("attention_kernel(int head_dim) -> bool", &attention_kernel);  // no tensor argument to dispatch on
  m.def("attention_lanes() -> int", &attention_lanes);
  m.def("attention_forward(Tensor q, Tensor k, Tensor v, Tensor? mask, bool causal, float scale) -> (Tensor, Tensor)",
        &attention_forward);
  m.def(
      "attention_backward(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor? mask, bool causal, float scale, "
      "Tensor out, Tensor lse) -> (Tensor, Tensor, Tensor)",
      &attention_backward);
}
