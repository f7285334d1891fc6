// axiom-rl's decode step for a CPU: one new token per row through every layer, for float32, in
// one call from Python (native.py builds it and checks it against the Python step, rollout/step.py's forward).
// At these sizes a token step's some 800 calls (views included) on a few thousand values each cost
// more around them than in them: Python's parsing and wrapping, then ATen's dispatch, allocation
// and iterator set-up.
//
// With `own_kernels` (the default), the step runs in this file's own loops, except for the linear
// layers, the softmax and SiLU: attention over the cache in `attend_pairs`, which reads it at up to
// three times the speed of ATen's batched matmul at these shapes, and the element-wise work (RMSNorm,
// RoPE, the cache writes, the residual adds) in `fused_step`. They compute the same products, some
// summed in another order, so the logits agree with the Python step's to float32 rounding (about
// 1e-7 relative), not bit for bit. Without it, the step makes the same ATen calls as `_forward`
// (one query token, the additive-mask branch of `_attend`), in the same order and with the same
// arguments, so the same kernels run on the same data and the bits are the same.
//
// The linear layers: F.linear, oneDNN or `linear_panels`, a kernel for the few rows of a decode
// step, which the Python step calls too where native.py packs the weights for it (so the two steps
// still agree bit for bit there).
//
// Keep it in step with `_forward`, `_rms`, `_rotate`, `_store` and `_attend`: the tests compare
// the two bit for bit (own kernels off) and to rounding (on).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <vector>

#include "vector_ops.h"  // copied beside this file by native.py

#if defined(__x86_64__)
#include <xmmintrin.h>  // SSE's streaming stores, in every x86-64 CPU
#endif

// silu(gate) * up for the fused gate and up projections, with ATen's bits (speed/silu_mul.cpp, built
// into the same library); false where it has no kernel for this CPU.
bool silu_mul_rows(const float* gate_up, int64_t rows, int64_t inner, float* out);

namespace {

// The signature of mkldnn::_linear_pointwise, which cpu_matmul.linear_packed calls.
using LinearPointwise = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                   c10::string_view, c10::List<std::optional<at::Scalar>>,
                                   std::optional<c10::string_view>);

// How the step's linear layers run, as native.py's _bind passes them: F.linear, oneDNN
// (cpu_matmul.linear_packed, weights packed once per rollout), or linear_panels below.
enum LinearKind : int64_t { kAten = 0, kOneDnn = 1, kPanels = 2 };

// A second place for one panel's outputs of the kernel below (16 columns): its row r at
// to + r * row_stride, 64-byte aligned, written with streaming stores.
struct Copy {
  float* to;
  int64_t row_stride;
};

at::Tensor linear_panels_copying(const at::Tensor& x, const at::Tensor& packed, const std::optional<at::Tensor>& bias,
                                 int64_t isa, const std::vector<Copy>* copies);

// `copies` (with kPanels alone): where each panel's outputs also go, see linear_kept.
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b, int64_t kind,
                  const std::vector<Copy>* copies = nullptr) {
  if (kind == kAten) return at::linear(x, w, b);
  if (kind == kPanels) return linear_panels_copying(x, w, b, 0, copies);
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
                             .typed<LinearPointwise>();
  return op.call(x, w, b, "none", c10::List<std::optional<at::Scalar>>(), std::optional<c10::string_view>(""));
}

// `_rms` for float32: F.rms_norm(x, (d,), w, eps).
at::Tensor rms(const at::Tensor& x, const at::Tensor& w, double eps) {
  return at::rms_norm(x, {x.size(-1)}, w, eps);
}


// Attention for one query token per row, for each (row, K/V head) pair on its own: the scores of
// the G query heads that share the pair's cached keys, their softmax (ATen's), and the weighted
// sum of the cached values, each cached key and value read once. ATen's batched matmul does the
// same as one small matrix product per pair (G x hd times hd x T), at a fraction of the memory's
// speed at these shapes. The pairs are spread over PyTorch's threads; each pair is summed by one
// thread in a fixed order, so the result does not depend on the number of threads. Compiled for
// x86-64-v4 (AVX-512), v3 (AVX2) and the baseline, picked when the library loads; built with
// -ffp-contract=off and no reassociation, so each clone rounds every product and sum alike, in the
// order written here: the kernels built for each of the three gave the same bits on a test input
// (and with contraction on, other bits).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define AXIOM_TARGETS __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define AXIOM_TARGETS
#endif

constexpr int kLanes = 16;

#ifdef AXIOM_VECTOR_TYPES
typedef float f32x4 __attribute__((vector_size(16)));

// The kLanes partial sums of a dot product folded in halves, (acc[l] + acc[l + 8]), then
// (s8[l] + s8[l + 4]), then (s4[0] + s4[2]) + (s4[1] + s4[3]): the order of the scalar code in
// scores_one_pair, as vector additions: the same bits. GCC compiled that scalar code into some 35
// extracts and single additions a score, more instructions than the products took.
__attribute__((always_inline)) inline float fold_halves(axiom_vec::f32x16 acc) {
  axiom_vec::f32x8 low, high;
  __builtin_memcpy(&low, &acc, sizeof(low));
  __builtin_memcpy(&high, reinterpret_cast<const char*>(&acc) + sizeof(low), sizeof(high));
  const axiom_vec::f32x8 s8 = low + high;
  f32x4 s4_low, s4_high;
  __builtin_memcpy(&s4_low, &s8, sizeof(s4_low));
  __builtin_memcpy(&s4_high, reinterpret_cast<const char*>(&s8) + sizeof(s4_low), sizeof(s4_high));
  const f32x4 s4 = s4_low + s4_high;
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}
#endif

// scores[g, t] = (q[g, :] . keys[t, :]) * scale + mask[t], for one (row, K/V head) pair. Each key
// row is read once for the G query heads that share it; the sum over hd runs in kLanes partial
// sums, folded in halves at the end.
template <int HD>
AXIOM_TARGETS void scores_one_pair(const float* __restrict__ q, const float* __restrict__ keys,
                                   const float* __restrict__ prompt_keys, int64_t prompt_slots,
                                   const float* __restrict__ mask, float* __restrict__ scores, int64_t groups,
                                   int64_t t_len, int64_t key_row_stride, float scale) {
  static_assert(HD % kLanes == 0, "head size a multiple of kLanes");
  for (int64_t t = 0; t < t_len; ++t) {
    const float* __restrict__ k = (t < prompt_slots ? prompt_keys : keys) + t * key_row_stride;
    for (int64_t g = 0; g < groups; ++g) {
      const float* __restrict__ qg = q + g * HD;
#ifdef AXIOM_VECTOR_TYPES
      using axiom_vec::f32x16;
      using axiom_vec::load;
      f32x16 acc = load<f32x16>(qg) * load<f32x16>(k);
      for (int d = kLanes; d < HD; d += kLanes) acc += load<f32x16>(qg + d) * load<f32x16>(k + d);
      const float dot = fold_halves(acc);
#else
      float acc[kLanes];
      for (int l = 0; l < kLanes; ++l) acc[l] = qg[l] * k[l];
      for (int d = kLanes; d < HD; d += kLanes)
        for (int l = 0; l < kLanes; ++l) acc[l] += qg[d + l] * k[d + l];
      float s8[8], s4[4];  // folded in halves, straight-line: a loop here was not unrolled
      for (int l = 0; l < 8; ++l) s8[l] = acc[l] + acc[l + 8];
      for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
      const float dot = (s4[0] + s4[2]) + (s4[1] + s4[3]);
#endif
      scores[g * t_len + t] = dot * scale + mask[t];
    }
  }
}

// out[g, :] = sum over t of probs[g, t] * values[t, :], for one (row, K/V head) pair, the G sums
// kept in registers while the value rows stream past once.
template <int HD>
AXIOM_TARGETS void values_one_pair(const float* __restrict__ probs, const float* __restrict__ values,
                                   const float* __restrict__ prompt_values, int64_t prompt_slots,
                                   float* __restrict__ out, int64_t groups, int64_t t_len, int64_t value_row_stride) {
  for (int64_t g0 = 0; g0 < groups; g0 += 2) {  // two query heads at a time: 2 x HD sums in registers
    const bool pair = g0 + 1 < groups;
    const float* __restrict__ p0 = probs + g0 * t_len;
    const float* __restrict__ p1 = pair ? p0 + t_len : p0;
#ifdef AXIOM_VECTOR_TYPES
    // The same sums in vector variables, which GCC keeps in registers (the arrays below it kept
    // in memory, a load and a store per sum and value row).
    using axiom_vec::f32x16;
    using axiom_vec::load;
    using axiom_vec::store;
    constexpr int kVectors = HD / kLanes;
    f32x16 a0[kVectors] = {}, a1[kVectors] = {};
    for (int64_t t = 0; t < t_len; ++t) {
      const float* __restrict__ v = (t < prompt_slots ? prompt_values : values) + t * value_row_stride;
      const float w0 = p0[t], w1 = p1[t];
#pragma GCC unroll 8
      for (int c = 0; c < kVectors; ++c) {
        const f32x16 row = load<f32x16>(v + c * kLanes);
        a0[c] += w0 * row;
        a1[c] += w1 * row;
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < kVectors; ++c) store(out + g0 * HD + c * kLanes, a0[c]);
    if (pair)
#pragma GCC unroll 8
      for (int c = 0; c < kVectors; ++c) store(out + (g0 + 1) * HD + c * kLanes, a1[c]);
#else
    float a0[HD] = {}, a1[HD] = {};
    for (int64_t t = 0; t < t_len; ++t) {
      const float* __restrict__ v = (t < prompt_slots ? prompt_values : values) + t * value_row_stride;
      const float w0 = p0[t], w1 = p1[t];
      for (int d = 0; d < HD; ++d) {
        a0[d] += w0 * v[d];
        a1[d] += w1 * v[d];
      }
    }
    for (int d = 0; d < HD; ++d) out[g0 * HD + d] = a0[d];
    if (pair)
      for (int d = 0; d < HD; ++d) out[(g0 + 1) * HD + d] = a1[d];
#endif
  }
}

// Where attend_pairs reads and writes: q [N, kvh, G, hd] rows `q_row` apart (the G query heads of
// a K/V head side by side), the caches [N, kvh, T, hd] with their strides, the additive mask [N, T]
// rows `mask_row` apart, scores [N * kvh, G, T] contiguous, out [N, kvh, G, hd] rows `out_row` apart.
// Each run of `rows_per_prompt` rows holds the same first `prompt_slots` slots (one prompt's, copied
// to each of its completions): those are read from the run's first row, so a prompt's keys and
// values cross from memory once a step for its rows, not once a row. The same values, summed in
// the same order: the same bits.
struct AttendArgs {
  const float* q;
  int64_t q_row;
  const float* keys;
  int64_t key_row, key_head, key_slot;  // strides
  const float* values;
  int64_t value_row, value_head, value_slot;
  const float* mask;
  int64_t mask_row;
  float* out;
  int64_t out_row;
  int64_t n, kvh, groups, t_len;
  float scale;
  int64_t rows_per_prompt = 1, prompt_slots = 0;
  // nullptr, or the caches' and the mask's row of each of the n rows (q's and out's rows are 0..n-1).
  const int64_t* rows = nullptr;
};

template <int HD>
void attend_pairs(const AttendArgs& a, at::Tensor& scores) {
  float* sp = scores.data_ptr<float>();
  const int64_t groups = a.groups, t_len = a.t_len, kvh = a.kvh;
  // Enough products per task that waking the other thread pays (a wake-up costs tens of µs here).
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, groups * t_len * HD));
  at::parallel_for(0, a.n * kvh, grain, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t row = p / kvh, head = p % kvh;
      const int64_t cached = a.rows != nullptr ? a.rows[row] : row;
      const int64_t first = cached - cached % a.rows_per_prompt;  // the run's first row
      scores_one_pair<HD>(a.q + row * a.q_row + head * groups * HD, a.keys + cached * a.key_row + head * a.key_head,
                          a.keys + first * a.key_row + head * a.key_head, a.prompt_slots,
                          a.mask + cached * a.mask_row, sp + p * groups * t_len, groups, t_len, a.key_slot, a.scale);
    }
  });
  const at::Tensor probs = scores.softmax(-1);
  const float* pp = probs.data_ptr<float>();
  at::parallel_for(0, a.n * kvh, grain, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t row = p / kvh, head = p % kvh;
      const int64_t cached = a.rows != nullptr ? a.rows[row] : row;
      const int64_t first = cached - cached % a.rows_per_prompt;
      values_one_pair<HD>(pp + p * groups * t_len, a.values + cached * a.value_row + head * a.value_head,
                          a.values + first * a.value_row + head * a.value_head, a.prompt_slots,
                          a.out + row * a.out_row + head * groups * HD, groups, t_len, a.value_slot);
    }
  });
}

using AttendPairs = void (*)(const AttendArgs&, at::Tensor&);

// AttendArgs for caches and a mask held in tensors (keys, values [N, kvh, T, hd]; mask [N, 1, 1, T]).
AttendArgs attend_args(const float* q, int64_t q_row, const at::Tensor& keys, const at::Tensor& values,
                       const at::Tensor& mask, float* out, int64_t out_row, int64_t n, int64_t kvh, int64_t groups,
                       double scale) {
  AttendArgs a;
  a.q = q;
  a.q_row = q_row;
  a.keys = keys.data_ptr<float>();
  a.key_row = keys.stride(0), a.key_head = keys.stride(1), a.key_slot = keys.stride(2);
  a.values = values.data_ptr<float>();
  a.value_row = values.stride(0), a.value_head = values.stride(1), a.value_slot = values.stride(2);
  a.mask = mask.data_ptr<float>();
  a.mask_row = mask.stride(0);
  a.out = out;
  a.out_row = out_row;
  a.n = n, a.kvh = kvh, a.groups = groups, a.t_len = keys.size(2);
  a.scale = static_cast<float>(scale);
  return a;
}

// The kernel built for head size `hd`, or nullptr: the one list of the sizes covered.
AttendPairs kernel_for(int64_t hd) {
  switch (hd) {
    case 16: return attend_pairs<16>;
    case 32: return attend_pairs<32>;
    case 64: return attend_pairs<64>;
    case 128: return attend_pairs<128>;
    default: return nullptr;
  }
}

bool has_kernel(int64_t hd) { return kernel_for(hd) != nullptr; }

// attend_pairs on its own, for the tests (the step calls it through fused_step). q [N, kvh, G, hd];
// keys, values [N, kvh, T, hd] (rows of hd contiguous); mask [N, 1, 1, T], an additive bias.
// Returns [N, kvh, G, hd]. Head sizes: see `kernel_for`.
at::Tensor attend_one_token(const at::Tensor& q_in, const at::Tensor& keys, const at::Tensor& values,
                            const at::Tensor& mask_in, double scale) {
  const at::Tensor q = q_in.contiguous();
  const at::Tensor mask = mask_in.stride(-1) == 1 ? mask_in : mask_in.contiguous();
  TORCH_CHECK(q.scalar_type() == at::kFloat && keys.scalar_type() == at::kFloat && values.scalar_type() == at::kFloat &&
                  mask.scalar_type() == at::kFloat,
              "attend_one_token: float32 only");
  TORCH_CHECK(keys.stride(-1) == 1 && values.stride(-1) == 1, "attend_one_token: rows of hd contiguous");
  const int64_t n = q.size(0), kvh = q.size(1), groups = q.size(2), hd = q.size(3), t_len = keys.size(2);
  const AttendPairs kernel = kernel_for(hd);
  TORCH_CHECK(kernel != nullptr, "attend_one_token: no kernel for head size ", hd);
  at::Tensor scores = at::empty({n, kvh, groups, t_len}, q.options());
  at::Tensor out = at::empty({n, kvh, groups, hd}, q.options());
  kernel(attend_args(q.data_ptr<float>(), kvh * groups * hd, keys, values, mask, out.data_ptr<float>(),
                     kvh * groups * hd, n, kvh, groups, scale),
         scores);
  return out;
}

// ------------------------------------------------------------------ linear layers for few rows
//
// y = x W^T + b for float32, at a decode step's shapes (a few to a few dozen rows against weights
// of some hundred thousand values), where oneDNN's matmul spends some 12 µs a call before it
// computes (descriptors, its primitive cache) and MKL runs its AVX2 code on AMD's cores: a 16 x
// 256 x 256 product took 25-40 µs through either, 13-17 µs here, and the four of a layer of the
// step benchmark's model, at 16 rows, 183 µs through oneDNN against 133 (docs/benchmarks.md).
//
// The weight is packed once per rollout into panels of 16 output columns, each [K, 16] (the last
// one [K, N mod 16] where N is not a multiple of 16), stored in a tensor of the weight's own shape
// [N, K]: its values, in another order. A tile of R rows keeps R x 16 sums in registers while one
// panel streams past; the panel stays in the L1 cache for the next tile of rows. Every output is
// summed by one thread, over k in order, each product added by a fused multiply-add, so the
// AVX-512 and AVX2 versions and any number of threads give the same bits. Fused, because a
// multiply and a separate add are two instructions on the same two ports of an Intel core: on a
// Xeon with AVX-512, a token step's 17 linear layers took 643-778 us with them, 446-482 fused
// (MKL: 752-966). AMD's cores add on pipes of their own, where the two forms should take the same
// time (not measured).
// Only x86-64 CPUs with AVX2 and FMA get it, built by GCC (`panel_kernel`); elsewhere native.py
// keeps the library's matmul.

constexpr int64_t kPanel = 16;
// How far ahead of the panel row in use the kernel asks for the weight's memory, into the L2 cache
// (prefetcht1): 8 KiB, 128 rows of the panel (past its end, the next panel's, which follow in
// memory). A token step streams the whole model's weights (11.8 MB at the step benchmark's size),
// more than the L2 caches hold; where they come from the L3 cache the hardware's prefetchers keep
// up, but where other processes (or a VM's neighbours) have pushed them out to DRAM, the kernel
// waited on each line: 16 rows x 16 columns of sums per line leave too little work to hide the
// latency. Measured (docs/benchmarks.md, 2026-11-24), a token step's weights from DRAM: 1,070 us
// without, 646-675 asking 4 KiB ahead into L1, 570-603 this way; from the L3 cache, 532-544
// without, 508-510 this way. A prefetch changes no value.
constexpr std::uintptr_t kPrefetchBytes = 8192;

// The weights `parts` ([N_i, K] each, stacked along N as torch.cat would: q, k and v, or gate and up)
// in panel order, without the stacked copy: panel p's row k is rows 16p .. 16p + 15 of the stack at
// column k, read from wherever each row lies. A rollout packs every weight once (the policy's
// change every step); ATen's strided copy of a transposed view, after torch.cat's copy, took some
// 3 ms of each 4 x 4 rollout at the step benchmark's size.
at::Tensor pack_panels(at::TensorList parts) {
  TORCH_CHECK(!parts.empty(), "pack_panels: no weight");
  const int64_t k_len = parts[0].dim() == 2 ? parts[0].size(1) : -1;
  std::vector<at::Tensor> kept;  // contiguous, alive while `rows` points into them
  std::vector<const float*> rows;
  for (const at::Tensor& part : parts) {
    TORCH_CHECK(part.dim() == 2 && part.scalar_type() == at::kFloat && part.size(1) == k_len,
                "pack_panels: float32 [N, K] weights with the same K");
    kept.push_back(part.contiguous());
    const float* first = kept.back().data_ptr<float>();
    for (int64_t r = 0; r < part.size(0); ++r) rows.push_back(first + r * k_len);
  }
  const int64_t n = static_cast<int64_t>(rows.size()), full = n / kPanel, rest = n % kPanel;
  at::Tensor packed = at::empty({n, k_len}, parts[0].options());
  float* out = packed.data_ptr<float>();
  at::parallel_for(0, full + (rest > 0), 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t cols = p < full ? kPanel : rest;  // the last panel is [K, rest]
      const float* const* src = rows.data() + p * kPanel;
      float* dst = out + p * kPanel * k_len;
      for (int64_t k = 0; k < k_len; ++k)
        for (int64_t c = 0; c < cols; ++c) dst[k * cols + c] = src[c][k];
    }
  });
  return packed;
}

#ifdef AXIOM_VECTOR_OPS
#define AXIOM_PANELS 1
using axiom_vec::load;
using axiom_vec::store;

// R rows of y against P neighbouring full panels (each [K, 16], one after the other in memory): I
// is the instruction set (vector_ops.h: its vector type V of 16 or 8 lanes, splat and fma), H =
// 16 / lanes vectors per panel row. Each row's broadcast serves P x H fused multiply-adds: one
// panel's tile of R rows loads R + 1 values (and prefetches once) a k step for R multiply-adds
// with 16 lanes, two panels' R + 2 (and two prefetches) for 2R, fewer loads for the two load ports
// an Intel core has for its two FMA ports. Each sum is the same, over k in order, whatever R and
// P: the same bits (the tests compare the AVX-512 kernel, which takes two panels, with the AVX2 one).
//
// With COPY, every output also goes to a second place with a streaming store, as it is stored: panel
// i's (of the P) row r to copy[i].to + r * copy[i].row_stride, 64-byte aligned (the decode step's
// record for the replay: see Copy).
template <typename I, int R, int P = 1, bool COPY = false>
__attribute__((always_inline)) inline void panel_tile(const float* __restrict__ x, int64_t k_len,
                                                       const float* __restrict__ panel, const float* __restrict__ bias,
                                                       float* __restrict__ y, int64_t ldy, const Copy* copy) {
  using V = typename I::V;
  constexpr int H = kPanel * sizeof(float) / sizeof(V);
  constexpr int kLanesPerVector = kPanel / H;
  constexpr int J = P * H;  // vectors a row; vector j is columns [j * lanes, (j + 1) * lanes)
  V acc[R][J];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) acc[r][j] = V{};
  const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(panel) + kPrefetchBytes;
  const int64_t panel_size = k_len * kPanel;
  for (int64_t k = 0; k < k_len; ++k) {
#pragma GCC unroll 2
    for (int p = 0; p < P; ++p)
      __builtin_prefetch(
          reinterpret_cast<const void*>(ahead + (p * panel_size + k * kPanel) * sizeof(float)), 0, 2);
    V w[J];
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) w[j] = load<V>(panel + (j / H) * panel_size + k * kPanel + (j % H) * kLanesPerVector);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const V xv = I::splat(x[r * k_len + k]);
#pragma GCC unroll 4
      for (int j = 0; j < J; ++j) acc[r][j] = I::fma(xv, w[j], acc[r][j]);
    }
  }
  if (bias != nullptr) {  // the sum, then the bias: one rounding, as adding it to y afterwards
    V b[J];
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) b[j] = load<V>(bias + j * kLanesPerVector);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < J; ++j) acc[r][j] += b[j];
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) {
      store<V>(y + r * ldy + j * kLanesPerVector, acc[r][j]);
      if constexpr (COPY) I::stream(copy[j / H].to + r * copy[j / H].row_stride + (j % H) * kLanesPerVector, acc[r][j]);
    }
}

// All m rows against P neighbouring full panels: tiles of R rows, then of R / 2, ... down to one.
template <typename I, int R, int P = 1, bool COPY = false>
__attribute__((always_inline)) inline void panel_rows(const float* x, int64_t m, int64_t k_len, const float* panel,
                                                      const float* bias, float* y, int64_t ldy, const Copy* copy) {
  Copy rows[P];  // `copy` moved down to row r
  const auto from_row = [&](int64_t r) {
    if constexpr (COPY)
      for (int i = 0; i < P; ++i) rows[i] = {copy[i].to + r * copy[i].row_stride, copy[i].row_stride};
    return rows;
  };
  int64_t r = 0;
  for (; r + R <= m; r += R)
    panel_tile<I, R, P, COPY>(x + r * k_len, k_len, panel, bias, y + r * ldy, ldy, from_row(r));
  if constexpr (R > 1) {
    if (r < m) panel_rows<I, R / 2, P, COPY>(x + r * k_len, m - r, k_len, panel, bias, y + r * ldy, ldy, from_row(r));
  }
}

// The last, narrower panel ([K, cols], cols < 16), copied into a full panel whose other columns are
// zero and computed by the tiles into rows of 16, of which the first `cols` are copied out. Each is
// the sum a full panel's column gets, over k in order, each product added by a fused multiply-add:
// the bits of one fused multiply-add chain per sum, as the scalar loop here before computed them,
// where that loop's chains, one after another, took a 16-row token step's lm_head (3 columns past
// its 16 panels at a vocabulary of 259) some 20 us on one thread against 7 for the other's 8 panels.
template <typename I, int R>
__attribute__((always_inline)) inline void narrow_panel(const float* x, int64_t m, int64_t k_len, const float* panel,
                                                        int64_t cols, const float* bias, float* y, int64_t ldy) {
  thread_local std::vector<float> wide, rows;
  wide.assign(k_len * kPanel, 0.0f);
  for (int64_t k = 0; k < k_len; ++k) std::copy_n(panel + k * cols, cols, wide.data() + k * kPanel);
  float wide_bias[kPanel] = {};
  if (bias != nullptr) std::copy_n(bias, cols, wide_bias);
  rows.resize(m * kPanel);
  panel_rows<I, R>(x, m, k_len, wide.data(), bias != nullptr ? wide_bias : nullptr, rows.data(), kPanel, nullptr);
  for (int64_t r = 0; r < m; ++r) std::copy_n(rows.data() + r * kPanel, cols, y + r * ldy);
}

// Panels [begin, end) of y, in tiles of R rows (as many as the registers hold) and what is left.
// PAIR > 0: two neighbouring full panels at a time, in tiles of PAIR rows. `copies`: nullptr, or
// where each panel's outputs also go (one Copy a panel; every panel full).
template <typename I, int R, int PAIR = 0, bool COPY = false>
__attribute__((always_inline)) inline void panels(const float* x, int64_t m, int64_t k_len, const float* packed,
                                                  const float* bias, int64_t n, float* y, int64_t begin, int64_t end,
                                                  const Copy* copies) {
  for (int64_t p = begin; p < end; ++p) {
    const float* panel = packed + p * k_len * kPanel;
    const float* panel_bias = bias != nullptr ? bias + p * kPanel : nullptr;
    const Copy* copy = COPY ? copies + p : nullptr;
    if constexpr (PAIR > 0) {
      if (p + 1 < end && (p + 2) * kPanel <= n) {
        panel_rows<I, PAIR, 2, COPY>(x, m, k_len, panel, panel_bias, y + p * kPanel, n, copy);
        ++p;
        continue;
      }
    }
    if ((p + 1) * kPanel <= n)
      panel_rows<I, R, 1, COPY>(x, m, k_len, panel, panel_bias, y + p * kPanel, n, copy);
    else
      narrow_panel<I, R>(x, m, k_len, panel, n - p * kPanel, panel_bias, y + p * kPanel, n);
  }
}

// 32 vector registers: two panels at a time in tiles of 8 rows (16 sums, the two panels' rows, the
// broadcast), an odd panel out in tiles of 16 rows (16 sums, its row, the broadcast). Pairs against
// one panel at a time, a token step's 17 linear layers (same invocation, alternating, medians of
// 100, Intel Xeon host): 0.75-0.8x the time at 64 rows, 0.8-0.9x at 32, and at 16 rows 0.85-0.9x
// when the host was busy, 1.04-1.1x when it was quiet.
__attribute__((target("avx512f"), flatten)) void panels_avx512(const float* x, int64_t m, int64_t k_len,
                                                                const float* packed, const float* bias, int64_t n,
                                                                float* y, int64_t begin, int64_t end,
                                                                const Copy* copies) {
  if (copies != nullptr)
    panels<axiom_vec::Avx512, 16, 8, true>(x, m, k_len, packed, bias, n, y, begin, end, copies);
  else
    panels<axiom_vec::Avx512, 16, 8>(x, m, k_len, packed, bias, n, y, begin, end, nullptr);
}

// 16 vector registers: 6 rows x two 8-lane sums, the panel's row (two), and the broadcast.
__attribute__((target("avx2,fma"), flatten)) void panels_avx2(const float* x, int64_t m, int64_t k_len,
                                                              const float* packed, const float* bias, int64_t n,
                                                              float* y, int64_t begin, int64_t end,
                                                              const Copy* copies) {
  if (copies != nullptr)
    panels<axiom_vec::Avx2, 6, 0, true>(x, m, k_len, packed, bias, n, y, begin, end, copies);
  else
    panels<axiom_vec::Avx2, 6>(x, m, k_len, packed, bias, n, y, begin, end, nullptr);
}
#endif

using PanelsFn = void (*)(const float*, int64_t, int64_t, const float*, const float*, int64_t, float*, int64_t,
                          int64_t, const Copy*);

// The version for this CPU (isa 0), or the one asked for (1: AVX2, 2: AVX-512; the tests compare
// them); nullptr where there is none.
PanelsFn panels_for(int64_t isa) {
#ifdef AXIOM_PANELS
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if ((isa == 0 || isa == 2) && avx512) return panels_avx512;
  if ((isa == 0 || isa == 1) && avx2) return panels_avx2;
#endif
  (void)isa;
  return nullptr;
}

bool panel_kernel() { return panels_for(0) != nullptr; }

// x [..., K] against a weight from pack_panels ([N, K]); returns [..., N]. `copies`: nullptr, or
// one Copy a panel, where its outputs also go (N a multiple of 16).
at::Tensor linear_panels_copying(const at::Tensor& x_in, const at::Tensor& packed, const std::optional<at::Tensor>& bias,
                                 int64_t isa, const std::vector<Copy>* copies) {
  TORCH_CHECK(x_in.scalar_type() == at::kFloat && packed.scalar_type() == at::kFloat, "linear_panels: float32 only");
  TORCH_CHECK(packed.dim() == 2 && packed.is_contiguous(), "linear_panels: the weight must come from pack_panels");
  const int64_t n = packed.size(0), k_len = packed.size(1);
  TORCH_CHECK(x_in.size(-1) == k_len, "linear_panels: x has ", x_in.size(-1), " features, the weight ", k_len);
  const PanelsFn fn = panels_for(isa);
  TORCH_CHECK(fn != nullptr, "linear_panels: no kernel for this CPU");
  const at::Tensor x = x_in.contiguous();
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = n;
  at::Tensor y = at::empty(sizes, x.options());
  const int64_t m = x.numel() / std::max<int64_t>(1, k_len);
  const float* xp = x.data_ptr<float>();
  const float* wp = packed.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  // Added as each output is stored (an ATen add_ afterwards was a call of its own, some 4 us a
  // decode step's layer).
  at::Tensor b;
  if (bias.has_value()) {
    TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->dim() == 1 && bias->size(0) == n,
                "linear_panels: the bias must be float32 [", n, "]");
    b = bias->contiguous();
  }
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  // One panel per task at least: at these sizes the other thread is spinning, ready, and a panel
  // is some 10k multiply-adds per 16 rows.
  const Copy* cp = nullptr;
  if (copies != nullptr && !copies->empty()) {
    TORCH_CHECK(n % kPanel == 0 && static_cast<int64_t>(copies->size()) == n / kPanel,
                "linear_panels: a copy for each of the weight's full panels");
    cp = copies->data();
  }
  at::parallel_for(0, (n + kPanel - 1) / kPanel, 1, [&](int64_t begin, int64_t end) {
    fn(xp, m, k_len, wp, bp, n, yp, begin, end, cp);
#if defined(__x86_64__)
    if (cp != nullptr) _mm_sfence();  // streaming stores are weakly ordered: this thread's, done
#endif
  });
  return y;
}

at::Tensor linear_panels(const at::Tensor& x, const at::Tensor& packed, const std::optional<at::Tensor>& bias,
                         int64_t isa) {
  return linear_panels_copying(x, packed, bias, isa, nullptr);
}

// ------------------------------------------------------------------ the step's element-wise work
//
// With the step's own kernels on, the element-wise work between the linear layers runs in the
// loops below, not in ATen calls: some 30 calls a layer (RMSNorm alone is eight), each a few
// microseconds of dispatch and allocation on a few thousand values, took more of a token step than
// its matmuls did. RoPE, the cache writes and the residual adds compute the Python step's bits
// (each product and sum rounded as ATen's are); RMSNorm sums its squares in another order, so the
// logits agree with the Python step's to float32 rounding, as with the attention kernel.

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, for n rows of d values (F.rms_norm in float32).
AXIOM_TARGETS void rms_rows(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int64_t n,
                            int64_t d, float eps) {
  for (int64_t r = 0; r < n; ++r) {
    const float* __restrict__ xr = x + r * d;
    float acc[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= d; j += kLanes)
      for (int l = 0; l < kLanes; ++l) acc[l] += xr[j + l] * xr[j + l];
    float sum = 0.0f;
    for (int l = 0; l < kLanes; ++l) sum += acc[l];
    for (; j < d; ++j) sum += xr[j] * xr[j];
    const float inverse = 1.0f / std::sqrt(sum / static_cast<float>(d) + eps);
    float* __restrict__ yr = y + r * d;
    for (j = 0; j < d; ++j) yr[j] = xr[j] * inverse * w[j];
  }
}

// q and k rotated in place, `heads` vectors of hd values per row (rows `row` apart), at each row's
// position: v * cos + roll(v, hd / 2) * sin with sin's first half negated (fast._rotate).
AXIOM_TARGETS void rotate_rows(float* __restrict__ v, int64_t n, int64_t row, int64_t heads, int64_t hd,
                               const int64_t* __restrict__ positions, const float* __restrict__ cos,
                               const float* __restrict__ sin, int64_t table_row) {
  const int64_t half = hd / 2;
  float low[128], high[128];  // hd <= 256 (kernel_for)
  for (int64_t r = 0; r < n; ++r) {
    const float* __restrict__ c = cos + positions[r] * table_row;
    const float* __restrict__ s = sin + positions[r] * table_row;
    for (int64_t head = 0; head < heads; ++head) {
      float* __restrict__ x = v + r * row + head * hd;
      for (int64_t j = 0; j < half; ++j) {
        low[j] = x[j] * c[j] + x[j + half] * s[j];
        high[j] = x[j + half] * c[j + half] + x[j] * s[j + half];
      }
      for (int64_t j = 0; j < half; ++j) {
        x[j] = low[j];
        x[j + half] = high[j];
      }
    }
  }
}

// x += y, both `size` values (the residual stream, n rows of d).
AXIOM_TARGETS void add_into(float* __restrict__ x, const float* __restrict__ y, int64_t size) {
  for (int64_t j = 0; j < size; ++j) x[j] += y[j];
}

// ------------------------------------------------------------------ recording the linear layers
//
// With a `record` (7 tensors a layer -- q, k, v, o, gate, up, down -- and the logits' last where
// asked, each [N, S, width], float32), each step copies its linear layers' outputs (biases added,
// before RoPE) into step `record_at` of them: the values the trainer's first pass over the same
// tokens replays instead of computing them again (speed/replay.py). The panel kernel writes them
// there as it computes them where the record allows it (record_copies); otherwise keep() copies
// them afterwards. The step computes the same values with or without a record.
//
// With `rows` (decode_step's: the step computes some of the batch's rows), step row r is batch
// row rows[r] here too. Those rows are no run of evenly spaced ones, so keep() copies them after
// each linear layer, not the panel kernel.

void check_record(at::TensorList record, int64_t layers, int64_t batch, int64_t step) {
  if (record.empty()) return;
  TORCH_CHECK(static_cast<int64_t>(record.size()) == 7 * layers || static_cast<int64_t>(record.size()) == 7 * layers + 1,
              "decode_step: a record of 7 tensors a layer, and the logits'");
  for (const at::Tensor& t : record)
    TORCH_CHECK(t.scalar_type() == at::kFloat && t.dim() == 3 && t.size(0) == batch && t.stride(2) == 1 && step >= 0 &&
                    step < t.size(1),
                "decode_step: each record tensor float32 [rows, steps, width], rows of width contiguous, and "
                "record_at a step in it");
}

// decode_step's `rows`, checked: nullptr for all `batch` rows, else the rows' indices, each a row
// of the batch, in increasing order (no row twice: the threads write each row's cache slot).
const int64_t* check_rows(const std::optional<at::Tensor>& rows, int64_t batch) {
  if (!rows.has_value()) return nullptr;
  TORCH_CHECK(rows->scalar_type() == at::kLong && rows->dim() == 1 && rows->is_contiguous() && rows->size(0) >= 1,
              "decode_step: rows int64 [n], contiguous, at least one");
  const int64_t* p = rows->data_ptr<int64_t>();
  for (int64_t r = 0; r < rows->size(0); ++r)
    TORCH_CHECK(p[r] >= 0 && p[r] < batch && (r == 0 || p[r] > p[r - 1]),
                "decode_step: rows must be rows of the batch, in increasing order");
  return p;
}

// dst[0, n) = src[0, n), past the caches where the CPU can: a record is written once, far from
// anything cached, and read only by the training pass. Ordinary stores first read each line they
// write from memory; at the step benchmark's sizes (16 rows x 2,400 values a layer into 40 MB)
// the copies took some 100 us of a 750 us step, 15 us this way.
void stream_copy(float* dst, const float* src, int64_t n) {
#if defined(__x86_64__)
  int64_t j = 0;
  for (; j < n && (reinterpret_cast<uintptr_t>(dst + j) & 15) != 0; ++j) dst[j] = src[j];
  for (; j + 4 <= n; j += 4) _mm_stream_ps(dst + j, _mm_loadu_ps(src + j));
  for (; j < n; ++j) dst[j] = src[j];
#else
  std::copy_n(src, n, dst);
#endif
}

// Streaming stores are weakly ordered: the step ends with this, so the record is complete before
// anything reads it.
void records_done(at::TensorList record) {
#if defined(__x86_64__)
  if (!record.empty()) _mm_sfence();
#endif
}

// The first `width` values of each of the n rows of `src` (`stride` apart) into
// record[index][first_row + row, step, :] (with `rows`, record row rows[first_row + row]), which
// must be that wide.
void keep(at::TensorList record, int64_t index, int64_t step, const float* src, int64_t stride, int64_t n,
          int64_t width, int64_t first_row = 0, const int64_t* rows = nullptr) {
  if (record.empty() || index >= static_cast<int64_t>(record.size())) return;
  const at::Tensor& dst = record[index];
  TORCH_CHECK(dst.size(2) == width, "decode_step: record tensor ", index, " is ", dst.size(2), " wide, not ", width);
  float* base = dst.data_ptr<float>() + step * dst.stride(1);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t row = rows != nullptr ? rows[first_row + r] : first_row + r;
    stream_copy(base + row * dst.stride(0), src + r * stride, width);
  }
}

// The same for columns [from, from + width) of an output of the ATen step ([N, 1, C] or [N, C]).
void keep(at::TensorList record, int64_t index, int64_t step, const at::Tensor& out, int64_t from, int64_t width,
          const int64_t* rows) {
  if (record.empty() || index >= static_cast<int64_t>(record.size())) return;
  const at::Tensor values = out.reshape({out.size(0), -1}).contiguous();
  TORCH_CHECK(from + width <= values.size(1), "decode_step: recording past an output's width");
  keep(record, index, step, values.data_ptr<float>() + from, values.size(1), values.size(0), width, 0, rows);
}

// A record tensor `index` that takes `width` of a linear layer's columns (kept side by side: q, k
// and v; gate and up; o; down).
struct Kept {
  int64_t index, width;
};

// Where the panel kernel can write a linear layer's outputs into the record as it computes them, for
// the record tensors `kept`, at step `step`: a Copy a panel, each to a 64-byte aligned place. Empty,
// for keep() to copy them instead, where there is no record or a width is not a multiple of 16. The
// copies stream from both threads, out of registers, in place of a pass of one thread over each
// output afterwards (at rollout-heavy's 64 rows those took some 10% of a token step): whole rollouts
// in 0.94-0.97x the time at 8 x 8 rows and 256 tokens, 0.97-0.98x at 4 x 4 and 64 (medians of
// alternated rollouts in one process; the memory traffic of the record itself stays).
std::vector<Copy> record_copies(at::TensorList record, std::initializer_list<Kept> kept, int64_t step,
                                int64_t first_row, const int64_t* rows) {
  std::vector<Copy> copies;
  if (rows != nullptr) return copies;  // rows of the record that are not evenly spaced
  for (const Kept& part : kept) {
    if (part.index >= static_cast<int64_t>(record.size())) return {};
    const at::Tensor& t = record[part.index];
    float* base = t.data_ptr<float>() + step * t.stride(1) + first_row * t.stride(0);
    if (t.size(2) % kPanel != 0 || t.stride(0) % kPanel != 0 || reinterpret_cast<std::uintptr_t>(base) % 64 != 0)
      return {};
    for (int64_t c = 0; c < t.size(2); c += kPanel) copies.push_back({base + c, t.stride(0)});
  }
  return copies;
}

// linear() of x [N, K], the step's rows from `first_row` on, whose outputs also go into the record
// tensors `kept` at step `record_at`: written by the panel kernel as it computes them where it can
// (record_copies), else copied afterwards (keep). Returns the output, contiguous.
at::Tensor linear_kept(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b, int64_t kind,
                       at::TensorList record, int64_t record_at, const int64_t* rows, int64_t first_row,
                       std::initializer_list<Kept> kept) {
  const std::vector<Copy> copies =
      kind == kPanels ? record_copies(record, kept, record_at, first_row, rows) : std::vector<Copy>{};
  const at::Tensor out = linear(x, w, b, kind, &copies).contiguous();
  if (copies.empty()) {
    int64_t from = 0;
    for (const Kept& part : kept) {
      keep(record, part.index, record_at, out.data_ptr<float>() + from, out.size(1), out.size(0), part.width,
           first_row, rows);
      from += part.width;
    }
  }
  return out;
}

// A thread's share of the step's rows (fused_step) is a whole number of this many rows, at least
// one: the panel kernel's tiles of rows are 8, 4, 2 and 1 rows, and a share of 2 or 3 rows (or of 5
// or 6) streams the whole model's weights past tiles too small to use them well. Measured
// (docs/benchmarks.md, 2026-11-26), rollouts of 64 tokens at 4 x 4 rows took 0.92x the time of the
// split by columns, 0.78x at 3 x 8, 0.95x at 1 x 8, and 256 tokens at 8 x 8 rows 0.82x; at 1 x 2,
// 1 x 4, 1 x 6, 1 x 10 and 3 x 4 rows (shares of 1, 2, 3, 5 and 6) 1.01-1.19x: those split by
// columns.
constexpr int64_t kShareRows = 4;

// The decode step with its own kernels (`own_kernels`, for the head sizes kernel_for covers): the
// computation of decode_step below, each layer's element-wise work in the loops above, its
// attention in attend_pairs, and every intermediate a [rows, features] buffer of its own.
//
// A row's step reads no other row's values, so the rows are split between the threads, each taking
// its share through the whole step in one parallel region: the kernels inside it run on their
// thread alone (at::parallel_for runs inline there). Split by output columns instead, as each
// kernel's own parallel_for does, a token step made some 40 such regions, each a wake-up and a
// wait for the slower thread, and left the element-wise work between them (RMSNorm, RoPE, SiLU,
// the residual adds; too little for a region of its own) to one thread while the other spun. Every
// value is computed by the same loop in the same order either way (the panel kernel sums each
// output over k in order whatever its tile of rows; attention, RMSNorm and the rest work a row at a
// time), so the bits do not depend on the split or the number of threads. Each thread reads the
// whole model's weights, from the L3 cache where they fit; a share is whole runs of
// `rows_per_prompt` rows where the runs split evenly between the threads, so a prompt's cached
// keys and values are still read once for its rows. Only with the panel kernel (kPanels): see
// the split below.
at::Tensor fused_step(const at::Tensor& ids, const at::Tensor& positions_in, const at::Tensor& cache_k,
                      const at::Tensor& cache_v, int64_t start, const at::Tensor& mask_in, const at::Tensor& cos_in,
                      const at::Tensor& sin_in, const at::Tensor& embed, const at::Tensor& norm,
                      const at::Tensor& lm_head, at::TensorList weights,
                      const c10::List<std::optional<at::Tensor>>& qkv_bias, int64_t h, int64_t kvh, int64_t hd,
                      double eps, int64_t linear_kind, at::TensorList record, int64_t record_at, const int64_t* rows,
                      int64_t n, int64_t rows_per_prompt, int64_t prompt_slots, bool split_rows) {
  const int64_t d = embed.size(1), end = start + 1, groups = h / kvh;
  const int64_t q_width = h * hd, kv_width = kvh * hd, qkv_width = q_width + 2 * kv_width;
  const int64_t layers = static_cast<int64_t>(qkv_bias.size());
  TORCH_CHECK(embed.is_contiguous() && embed.scalar_type() == at::kFloat, "decode_step: a float32 embedding");
  TORCH_CHECK(cache_k.stride(-1) == 1 && cache_v.stride(-1) == 1, "decode_step: cache rows of hd contiguous");
  const at::Tensor ids64 = ids.to(at::kLong).contiguous(), positions = positions_in.to(at::kLong).contiguous();
  const at::Tensor cos = cos_in.contiguous(), sin = sin_in.contiguous();
  const at::Tensor mask = mask_in.stride(-1) == 1 ? mask_in : mask_in.contiguous();
  const float feps = static_cast<float>(eps);
  const auto options = embed.options();
  const float* table = embed.data_ptr<float>();
  const int64_t* id = ids64.data_ptr<int64_t>();
  const int64_t* position = positions.data_ptr<int64_t>();
  std::vector<int64_t> picked_ids, picked_positions;  // with `rows`: row r's, the batch's row rows[r]'s
  if (rows != nullptr) {
    picked_ids.resize(n), picked_positions.resize(n);
    for (int64_t r = 0; r < n; ++r) picked_ids[r] = id[rows[r]], picked_positions[r] = position[rows[r]];
    id = picked_ids.data(), position = picked_positions.data();
  }
  for (int64_t r = 0; r < n; ++r) {  // what at::embedding and at::index check in the ATen step
    TORCH_CHECK(id[r] >= 0 && id[r] < embed.size(0), "decode_step: token id ", id[r], " out of range");
    TORCH_CHECK(position[r] >= 0 && position[r] < cos.size(0), "decode_step: position ", position[r],
                " beyond the rotary tables");
  }
  // Contiguous once here, not in each thread.
  std::vector<at::Tensor> norms;
  for (int64_t i = 0; i < layers; ++i) {
    norms.push_back(weights[6 * i].contiguous());
    norms.push_back(weights[6 * i + 3].contiguous());
  }
  const at::Tensor final_norm = norm.contiguous();
  const AttendPairs attend = kernel_for(hd);
  const std::optional<at::Tensor> no_bias;
  const double scale = std::pow(static_cast<double>(hd), -0.5);
  at::Tensor logits = at::empty({n, lm_head.size(0)}, options);

  // The caller's inference mode, which is the state of its own thread only: the other threads'
  // tensors must be inference tensors too where they write into the caller's.
  const bool inference = c10::InferenceMode::is_enabled();
  // Rows [r0, r1) through the whole step; `shared`: their runs of rows that read a prompt's slots
  // from the run's first row (r0 starts a run; with `rows`, the runs of the batch's rows).
  auto step_rows = [&](int64_t r0, int64_t r1, int64_t shared) {
    c10::InferenceMode same_mode(inference);
    const int64_t m = r1 - r0;
    // The caches' and the mask's rows: these m from r0 on, or with `rows` every row of the batch,
    // of which row r here is rows[r0 + r].
    const int64_t first = rows != nullptr ? 0 : r0, count = rows != nullptr ? mask.size(0) : m;
    const int64_t* batch_rows = rows != nullptr ? rows + r0 : nullptr;
    const auto batch_row = [&](int64_t r) { return batch_rows != nullptr ? batch_rows[r] : r; };
    at::Tensor x = at::empty({m, d}, options), y = at::empty({m, d}, options);
    at::Tensor att = at::empty({m, q_width}, options), scores = at::empty({m * kvh, groups, end}, options);
    float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    for (int64_t r = 0; r < m; ++r) std::copy_n(table + id[r0 + r] * d, d, xp + r * d);
    for (int64_t i = 0; i < layers; ++i) {
      const at::Tensor* w = &weights[6 * i];
      rms_rows(xp, norms[2 * i].data_ptr<float>(), yp, m, d, feps);
      at::Tensor qkv = linear_kept(y, w[1], qkv_bias.get(i), linear_kind, record, record_at, rows, r0,
                                   {{7 * i, q_width}, {7 * i + 1, kv_width}, {7 * i + 2, kv_width}});  // [m, qkv_width]
      float* qkvp = qkv.data_ptr<float>();
      rotate_rows(qkvp, m, qkv_width, h + kvh, hd, position + r0, cos.data_ptr<float>(), sin.data_ptr<float>(),
                  cos.stride(0));
      const at::Tensor layer_k = cache_k.select(0, i).narrow(0, first, count);
      const at::Tensor layer_v = cache_v.select(0, i).narrow(0, first, count);
      float* kp = layer_k.data_ptr<float>();
      float* vp = layer_v.data_ptr<float>();
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < kvh; ++j) {
          const float* new_k = qkvp + r * qkv_width + q_width + j * hd;  // its value kv_width further on
          const float* new_v = new_k + kv_width;
          const int64_t b = batch_row(r);
          std::copy_n(new_k, hd, kp + b * layer_k.stride(0) + j * layer_k.stride(1) + start * layer_k.stride(2));
          std::copy_n(new_v, hd, vp + b * layer_v.stride(0) + j * layer_v.stride(1) + start * layer_v.stride(2));
        }
      const at::Tensor keys = layer_k.slice(2, 0, end), values = layer_v.slice(2, 0, end);
      AttendArgs args = attend_args(qkvp, qkv_width, keys, values, mask.narrow(0, first, count),
                                    att.data_ptr<float>(), q_width, m, kvh, groups, scale);
      args.rows = batch_rows;
      args.rows_per_prompt = shared, args.prompt_slots = prompt_slots;
      attend(args, scores);
      const at::Tensor o = linear_kept(att, w[2], no_bias, linear_kind, record, record_at, rows, r0, {{7 * i + 3, d}});
      add_into(xp, o.data_ptr<float>(), m * d);
      rms_rows(xp, norms[2 * i + 1].data_ptr<float>(), yp, m, d, feps);
      const int64_t inner = w[4].size(0) / 2;
      const at::Tensor gate_up = linear_kept(y, w[4], no_bias, linear_kind, record, record_at, rows, r0,
                                             {{7 * i + 4, inner}, {7 * i + 5, inner}});  // [m, 2 I]
      at::Tensor act = at::empty({m, inner}, gate_up.options());
      if (!silu_mul_rows(gate_up.data_ptr<float>(), m, inner, act.data_ptr<float>())) {
        act = at::silu(gate_up.slice(1, 0, inner));
        act.mul_(gate_up.slice(1, inner));
      }
      const at::Tensor down = linear_kept(act, w[5], no_bias, linear_kind, record, record_at, rows, r0, {{7 * i + 6, d}});
      add_into(xp, down.data_ptr<float>(), m * d);
    }
    rms_rows(xp, final_norm.data_ptr<float>(), yp, m, d, feps);
    const at::Tensor part = linear(y, lm_head, no_bias, linear_kind).contiguous();  // [m, V]
    std::copy_n(part.data_ptr<float>(), m * part.size(1), logits.data_ptr<float>() + r0 * part.size(1));
    keep(record, 7 * layers, record_at, part.data_ptr<float>(), part.size(1), m, part.size(1), r0, rows);
    records_done(record);  // this thread's streaming stores
  };

  const int64_t threads = at::get_num_threads();
  // Only with the panel kernel, whose sums do not depend on the rows it is given; oneDNN and MKL
  // may pick other kernels, summing in another order, for fewer rows.
  if (!split_rows || linear_kind != kPanels || threads <= 1 || n % (kShareRows * threads) != 0 ||
      at::in_parallel_region()) {
    step_rows(0, n, rows_per_prompt);
  } else {
    // Whole runs of rows_per_prompt rows to a thread where they split evenly; else single rows, each
    // reading its own copy of the prompt's slots (the same values). With `rows`, the runs are the
    // batch's, whose first rows any thread reads where it is: any split.
    const int64_t unit = rows == nullptr && (n / rows_per_prompt) % threads == 0 ? rows_per_prompt : 1;
    const int64_t shared = rows != nullptr ? rows_per_prompt : unit;
    const int64_t units = n / unit;
    at::parallel_for(0, units, (units + threads - 1) / threads, [&](int64_t begin, int64_t stop) {
      step_rows(begin * unit, stop * unit, shared);
    });
  }
  records_done(record);
  return logits;
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
                       int64_t h, int64_t kvh, int64_t hd, double eps, int64_t linear_kind,
                       bool own_kernels,
                       at::TensorList record,  // empty, or what each linear layer computes (keep)
                       int64_t record_at,
                       // Each run of rows_per_prompt rows holds the same first prompt_slots slots
                       // in its caches (a prompt's, for its completions): the attention kernel
                       // reads them from the run's first row (AttendArgs). The ATen step reads
                       // each row's own copy: the same values.
                       int64_t rows_per_prompt, int64_t prompt_slots,
                       // The rows split between the threads (fused_step), or each kernel's work
                       // by its columns: the same bits.
                       bool split_rows,
                       // None: every row of the batch. Else the rows to compute (int64 [n], in
                       // increasing order; rows that finished are left out: fast.py): the step
                       // reads and writes their tokens, positions, caches, mask and record where
                       // the batch holds them, and returns their logits alone, [n, V].
                       const std::optional<at::Tensor>& rows_in) {
  TORCH_CHECK(ids.dim() == 2 && ids.size(1) == 1, "decode_step takes one token per row");
  TORCH_CHECK(weights.size() == 6 * qkv_bias.size(), "decode_step: 6 weights per layer");
  TORCH_CHECK(rows_per_prompt >= 1 && ids.size(0) % rows_per_prompt == 0 && prompt_slots >= 0 &&
                  prompt_slots <= start,
              "decode_step: rows_per_prompt must divide the rows, and the shared prompt_slots come before "
              "the slot written");
  check_record(record, static_cast<int64_t>(qkv_bias.size()), ids.size(0), record_at);
  const int64_t* rows = check_rows(rows_in, ids.size(0));
  const int64_t n = rows != nullptr ? rows_in->size(0) : ids.size(0), s = 1, end = start + s;
  if (own_kernels && has_kernel(hd))
    return fused_step(ids, positions, cache_k, cache_v, start, mask, cos, sin, embed, norm, lm_head, weights,
                      qkv_bias, h, kvh, hd, eps, linear_kind, record, record_at, rows, n, rows_per_prompt,
                      prompt_slots, split_rows);
  // The ATen step: with `rows`, their tokens, positions, mask and (each layer) cached keys and values
  // gathered, the new keys and values written to their rows.
  const auto picked = [&](const at::Tensor& t) { return rows != nullptr ? t.index_select(0, *rows_in) : t; };
  const at::Tensor step_positions = picked(positions), step_mask = picked(mask);
  const std::optional<at::Tensor> no_bias;
  const double scale = std::pow(static_cast<double>(hd), -0.5);  // Python's hd**-0.5
  at::Tensor x = at::embedding(embed, picked(ids));                      // [n, 1, d]
  const at::Tensor c = at::index(cos, {step_positions}).unsqueeze(1);    // [n, 1, 1, hd]
  const at::Tensor si = at::index(sin, {step_positions}).unsqueeze(1);
  for (int64_t i = 0; i < static_cast<int64_t>(qkv_bias.size()); ++i) {
    const at::Tensor* w = &weights[6 * i];
    at::Tensor y = rms(x, w[0], eps);
    const at::Tensor qkv = linear(y, w[1], qkv_bias.get(i), linear_kind);
    keep(record, 7 * i, record_at, qkv, 0, h * hd, rows);
    keep(record, 7 * i + 1, record_at, qkv, h * hd, kvh * hd, rows);
    keep(record, 7 * i + 2, record_at, qkv, (h + kvh) * hd, kvh * hd, rows);
    const auto qk_v = qkv.split_with_sizes({(h + kvh) * hd, kvh * hd}, -1);
    // q and k rotated together: x * cos + roll(x) * sin, sin's first half negated (_rotate).
    at::Tensor qk = qk_v[0].view({n, s, h + kvh, hd}).transpose(1, 2);
    qk = at::add(at::mul(qk, c), at::mul(qk.roll({hd / 2}, {-1}), si));
    const at::Tensor layer_k = cache_k.select(0, i), layer_v = cache_v.select(0, i);
    const at::Tensor new_k = qk.slice(1, h), new_v = qk_v[1].view({n, s, kvh, hd}).transpose(1, 2);
    if (rows != nullptr) {
      layer_k.select(2, start).index_copy_(0, *rows_in, new_k.select(2, 0));
      layer_v.select(2, start).index_copy_(0, *rows_in, new_v.select(2, 0));
    } else {
      layer_k.slice(2, start, end).copy_(new_k);
      layer_v.slice(2, start, end).copy_(new_v);
    }
    const at::Tensor keys = picked(layer_k.slice(2, 0, end)), values = picked(layer_v.slice(2, 0, end));
    // The query heads that share each K/V head side by side: two grouped matmuls (_attend).
    const at::Tensor q = qk.slice(1, 0, h).reshape({n, kvh, h / kvh, hd});
    const at::Tensor scores = at::matmul(q, keys.transpose(-1, -2)).mul_(scale).add_(step_mask);
    const at::Tensor att = at::matmul(scores.softmax(-1), values).view({n, h, 1, hd});
    const at::Tensor o = linear(att.transpose(1, 2).reshape({n, s, h * hd}), w[2], no_bias, linear_kind);
    keep(record, 7 * i + 3, record_at, o, 0, o.size(-1), rows);
    x = at::add(x, o);
    y = rms(x, w[3], eps);
    const at::Tensor fused = linear(y, w[4], no_bias, linear_kind);
    keep(record, 7 * i + 4, record_at, fused, 0, fused.size(-1) / 2, rows);
    keep(record, 7 * i + 5, record_at, fused, fused.size(-1) / 2, fused.size(-1) / 2, rows);
    const auto gate_up = fused.chunk(2, -1);
    const at::Tensor down = linear(at::mul(at::silu(gate_up[0]), gate_up[1]), w[5], no_bias, linear_kind);
    keep(record, 7 * i + 6, record_at, down, 0, down.size(-1), rows);
    x = at::add(x, down);
  }
  const at::Tensor logits = linear(rms(x.select(1, -1), norm, eps), lm_head, no_bias, linear_kind);  // [n, V]
  keep(record, 7 * static_cast<int64_t>(qkv_bias.size()), record_at, logits, 0, logits.size(-1), rows);
  records_done(record);
  return logits;
}

// ------------------------------------------------------------------ sampling the next token
//
// The decode loop's work on a step's logits before the next step (fast.py's generate and _sample):
// padding (and, while the length is forced, EOS) made impossible, one token a row drawn by
// inverse-CDF sampling with the global generator, and written into column `column` of `out`.
// The same ATen calls in the same order, so the same bits and the same draws, without Python's
// cost around each of its dozen calls a token: at the step benchmark's full configuration the
// time between a rollout's steps went from 74 to 52 us (docs/benchmarks.md).
//
// With `rows` (the rows decode_step computed, when it leaves out finished ones), the logits are
// theirs alone: it draws a number for every row of `out` as before, so the generator moves as it
// did, and uses those of `rows`; each row's softmax, sums and search are its own, so the same bits.
// The other rows' tokens are what `out` holds in that column (the loop's padding).
at::Tensor sample_next(at::Tensor logits,  // [N, V] (or the rows', [n, V]), masked in place
                       int64_t pad,        // a token never to sample, or -1
                       int64_t blocked,    // another (EOS while the length is forced), or -1
                       double temperature, double top_p, at::Tensor out, int64_t column,
                       const std::optional<at::Tensor>& rows_in) {
  TORCH_CHECK(logits.dim() == 2 && out.dim() == 2 && column >= 0 && column < out.size(1),
              "sample_next: logits [N, V] and out [N, T] with the column in it");
  const int64_t* rows = check_rows(rows_in, out.size(0));
  TORCH_CHECK(logits.size(0) == (rows != nullptr ? rows_in->size(0) : out.size(0)),
              "sample_next: a row of logits for each row of out, or of rows");
  const double minus_inf = -std::numeric_limits<double>::infinity();
  for (const int64_t token : {pad, blocked})
    if (token >= 0) {
      TORCH_CHECK(token < logits.size(1), "sample_next: token ", token, " past the vocabulary");
      logits.select(1, token).fill_(minus_inf);
    }
  at::Tensor tokens;
  if (temperature <= 0) {
    tokens = logits.argmax(-1);
  } else {
    const at::Tensor scores = logits.to(at::kFloat);
    at::Tensor probs = at::softmax(temperature == 1.0 ? scores : scores / temperature, -1);  // x / 1 == x
    if (top_p < 1.0) {  // keep the smallest prefix reaching top_p
      auto [sorted_p, order] = probs.sort(-1, /*descending=*/true);
      const at::Tensor drop = (sorted_p.cumsum(-1) - sorted_p) > top_p;
      probs = at::zeros_like(probs).scatter(-1, order, sorted_p.masked_fill(drop, 0.0));
    }
    const at::Tensor cdf = probs.cumsum(-1);
    const int64_t vocab = probs.size(-1);
    at::Tensor draws = at::rand({out.size(0), 1}, at::TensorOptions().device(probs.device()));
    if (rows != nullptr) draws = draws.index_select(0, *rows_in);
    const at::Tensor u = draws * cdf.slice(1, vocab - 1, vocab);
    tokens = at::searchsorted(cdf, u).squeeze(-1).clamp_(std::nullopt, vocab - 1);
  }
  if (rows == nullptr) {
    out.select(1, column).copy_(tokens);
    return tokens;
  }
  out.select(1, column).index_copy_(0, *rows_in, tokens);
  return out.select(1, column).contiguous();
}

}  // namespace

TORCH_LIBRARY(axiom_rl, m) {
  m.def("attend_one_token(Tensor q, Tensor keys, Tensor values, Tensor mask, float scale) -> Tensor");
  m.def(
      "decode_step(Tensor ids, Tensor positions, Tensor(a!) cache_k, Tensor(b!) cache_v, int start, "
      "Tensor mask, Tensor cos, Tensor sin, Tensor embed, Tensor norm, Tensor lm_head, Tensor[] weights, "
      "Tensor?[] qkv_bias, int heads, int kv_heads, int head_dim, float eps, int linear_kind, bool own_kernels, "
      "Tensor(c!)[] record, int record_at, int rows_per_prompt=1, int prompt_slots=0, bool split_rows=True, "
      "Tensor? rows=None) -> "
      "Tensor");
  m.def("pack_panels(Tensor[] parts) -> Tensor");
  m.def("linear_panels(Tensor x, Tensor packed, Tensor? bias, int isa=0) -> Tensor");
  m.def("panel_kernel() -> bool", &panel_kernel);  // no tensor argument to dispatch on: one for all
  m.def(
      "sample_next(Tensor(a!) logits, int pad, int blocked, float temperature, float top_p, Tensor(b!) out, "
      "int column, Tensor? rows=None) -> Tensor");
}

// For every backend: oneDNN's packed weights are tensors of their own kind (MkldnnCPU).
TORCH_LIBRARY_IMPL(axiom_rl, CompositeExplicitAutograd, m) {
  m.impl("decode_step", decode_step);
  m.impl("attend_one_token", attend_one_token);
  m.impl("pack_panels", pack_panels);
  m.impl("linear_panels", linear_panels);
  m.impl("sample_next", sample_next);
}
