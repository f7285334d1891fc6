// silu(gate) * up, and its backward, each in one pass over memory: the gated MLP of the training
// passes (speed/activation_memory.py). ATen runs them as element-wise calls over [tokens,
// intermediate] tensors too large for the cache: silu then the product forward (five tensor
// streams read or written), and in backward silu, the product `down` reads, two products and
// silu_backward (fourteen streams). These kernels read and write each tensor once (three streams
// forward, six backward), and allocate three tensors where ATen allocates five.
//
// They compute ATen's bits, which is what keeps a seeded run's figures: each value is rounded as
// ATen's silu, silu_backward and mul round it, with the same exp. ATen's kernel for this CPU
// (Vectorized<float>, AVX-512 or AVX2, as torch.backends.cpu.get_cpu_capability() says) takes
// SLEEF's exp (libtorch exports it), in pairs of vectors from the start of each thread's chunk,
// and std::exp for the chunk's last elements (fewer than two vectors); the chunks are
// TensorIterator's (at::parallel_for with its grain). So these kernels split the work with the
// same call, pick SLEEF's or std::exp by the same rule, and fuse the one multiply-add that the
// compiler fused in ATen's silu_backward (1 + x * (1 - sigmoid)). The library is built with
// -ffp-contract=off, so nothing else is fused. activation_memory.py checks the bits against ATen's
// when it first loads them, and uses ATen's calls where they differ.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

namespace {
// One instruction set's kernels over a chunk [begin, end) of the elements.
using ForwardFn = void (*)(const float*, const float*, float*, int64_t, int64_t);
using BackwardFn = void (*)(const float*, const float*, const float*, float*, float*, float*, int64_t, int64_t);
struct Kernels {
  ForwardFn forward;
  BackwardFn backward;
  int64_t lanes;
};
}  // namespace

#include "vector_ops.h"

#ifdef AXIOM_VECTOR_OPS
#define AXIOM_SILU_KERNELS 1

namespace {
using axiom_vec::Avx2;
using axiom_vec::Avx512;
using axiom_vec::load;
using axiom_vec::store;

// Where ATen's vectorized loop stops in a chunk [begin, end): after whole pairs of vectors.
template <typename I>
int64_t vector_end(int64_t begin, int64_t end) {
  constexpr int64_t pair = 2 * sizeof(typename I::V) / sizeof(float);
  return begin + (end - begin) / pair * pair;
}

template <typename I>
void forward_chunk(const float* gate, const float* up, float* out, int64_t begin, int64_t end) {
  using V = typename I::V;
  constexpr int64_t lanes = sizeof(V) / sizeof(float);
  const int64_t split = vector_end<I>(begin, end);
  for (int64_t i = begin; i < split; i += lanes) {
    const V x = load<V>(gate + i);
    store<V>(out + i, x / (1.0f + I::exp(-x)) * load<V>(up + i));
  }
  for (int64_t i = split; i < end; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

// grad_gate = silu_backward(grad * up, gate), grad_up = grad * silu(gate), and, where asked, the
// product silu(gate) * up that `down`'s weight gradient reads.
template <typename I>
void backward_chunk(const float* grad, const float* gate, const float* up, float* grad_gate, float* grad_up,
                    float* product, int64_t begin, int64_t end) {
  using V = typename I::V;
  constexpr int64_t lanes = sizeof(V) / sizeof(float);
  const int64_t split = vector_end<I>(begin, end);
  for (int64_t i = begin; i < split; i += lanes) {
    const V x = load<V>(gate + i), u = load<V>(up + i), g = load<V>(grad + i);
    const V denominator = 1.0f + I::exp(-x);
    const V silu = x / denominator, sigmoid = 1.0f / denominator;
    if (product) store<V>(product + i, silu * u);
    store<V>(grad_up + i, g * silu);
    store<V>(grad_gate + i, g * u * sigmoid * I::fma(x, 1.0f - sigmoid, V{} + 1.0f));
  }
  for (int64_t i = split; i < end; ++i) {
    const float x = gate[i], u = up[i], g = grad[i];
    const float denominator = 1.0f + std::exp(-x);
    const float silu = x / denominator, sigmoid = 1.0f / denominator;
    if (product) product[i] = silu * u;
    grad_up[i] = g * silu;
    grad_gate[i] = g * u * sigmoid * std::fma(x, 1.0f - sigmoid, 1.0f);
  }
}

// flatten: the loops and the instruction set's helpers inlined into one function per set.
__attribute__((target("avx512f"), flatten)) void forward_avx512(const float* g, const float* u, float* o, int64_t b,
                                                                 int64_t e) {
  forward_chunk<Avx512>(g, u, o, b, e);
}
__attribute__((target("avx2,fma"), flatten)) void forward_avx2(const float* g, const float* u, float* o, int64_t b,
                                                                int64_t e) {
  forward_chunk<Avx2>(g, u, o, b, e);
}
__attribute__((target("avx512f"), flatten)) void backward_avx512(const float* gr, const float* g, const float* u,
                                                                  float* gg, float* gu, float* p, int64_t b,
                                                                  int64_t e) {
  backward_chunk<Avx512>(gr, g, u, gg, gu, p, b, e);
}
__attribute__((target("avx2,fma"), flatten)) void backward_avx2(const float* gr, const float* g, const float* u,
                                                                 float* gg, float* gu, float* p, int64_t b,
                                                                 int64_t e) {
  backward_chunk<Avx2>(gr, g, u, gg, gu, p, b, e);
}

}  // namespace
#endif

namespace {

// The kernels that follow ATen's own silu here: its CPU capability (AVX-512 or AVX2, which
// ATEN_CPU_CAPABILITY may lower) decides the vector width and the exp; nullptr for any other.
const Kernels* kernels() {
#ifdef AXIOM_SILU_KERNELS
  static const Kernels avx512{forward_avx512, backward_avx512, 16}, avx2{forward_avx2, backward_avx2, 8};
  static const Kernels* chosen = axiom_vec::for_capability(&avx512, &avx2, /*only_atens=*/true);
  return chosen;
#else
  return nullptr;
#endif
}

// The lanes of the kernels that follow ATen's silu here (16 or 8), or 0 where none does.
int64_t silu_kernel() { return kernels() ? kernels()->lanes : 0; }

const Kernels& checked(const at::Tensor& gate, const at::Tensor& up, const at::Tensor* grad) {
  TORCH_CHECK(kernels() != nullptr, "silu_mul: no kernel follows ATen's silu on this CPU");
  for (const at::Tensor* t : {&gate, &up, grad}) {
    if (t == nullptr) continue;
    TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == at::kFloat && t->is_contiguous(),
                "silu_mul: contiguous float32 CPU tensors only");
    TORCH_CHECK(t->sizes() == gate.sizes(), "silu_mul: the tensors' shapes differ");
  }
  return *kernels();
}

// TensorIterator::for_each's split of n elements: one chunk below its grain or with one thread,
// else at::parallel_for's chunks with the same grain.
template <typename F>
void over_aten_chunks(int64_t n, const F& f) {
  if (n < at::internal::GRAIN_SIZE || at::get_num_threads() == 1)
    f(0, n);
  else
    at::parallel_for(0, n, at::internal::GRAIN_SIZE, f);
}

at::Tensor silu_mul(const at::Tensor& gate, const at::Tensor& up) {
  const ForwardFn chunk = checked(gate, up, nullptr).forward;
  at::Tensor out = at::empty_like(gate);
  const float *g = gate.data_ptr<float>(), *u = up.data_ptr<float>();
  float* o = out.data_ptr<float>();
  over_aten_chunks(gate.numel(), [&](int64_t b, int64_t e) { chunk(g, u, o, b, e); });
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> silu_mul_backward(const at::Tensor& grad, const at::Tensor& gate,
                                                                 const at::Tensor& up, bool with_product) {
  const BackwardFn chunk = checked(gate, up, &grad).backward;
  at::Tensor grad_gate = at::empty_like(gate), grad_up = at::empty_like(gate);
  at::Tensor product = with_product ? at::empty_like(gate) : at::empty({0}, gate.options());
  const float *gr = grad.data_ptr<float>(), *g = gate.data_ptr<float>(), *u = up.data_ptr<float>();
  float *gg = grad_gate.data_ptr<float>(), *gu = grad_up.data_ptr<float>();
  float* p = with_product ? product.data_ptr<float>() : nullptr;
  over_aten_chunks(gate.numel(), [&](int64_t b, int64_t e) { chunk(gr, g, u, gg, gu, p, b, e); });
  return {grad_gate, grad_up, product};
}

}  // namespace

// For the decode step's own kernels (speed/decode_step.cpp): out [rows, inner] = silu(gate) * up
// for gate_up [rows, 2 inner] (the fused gate and up projections), with the bits of ATen's
// at::silu(gate_up.slice(1, 0, inner)) * gate_up.slice(1, inner). ATen iterates that strided
// slice row by row, in chunks of the flattened rows x inner elements (split over threads past its
// grain); each row's piece of a chunk starts its own pairs of vectors. False, computing nothing,
// where no kernel follows ATen's on this CPU.
bool silu_mul_rows(const float* gate_up, int64_t rows, int64_t inner, float* out) {
  if (kernels() == nullptr) return false;
  const ForwardFn chunk = kernels()->forward;
  over_aten_chunks(rows * inner, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin / inner; row * inner < end; ++row) {
      const int64_t from = std::max(begin, row * inner) - row * inner;
      const int64_t to = std::min(end, (row + 1) * inner) - row * inner;
      const float* gate = gate_up + row * 2 * inner;
      // the chunk's piece of this row, its pairs counted from `from`, as ATen's loop counts them
      chunk(gate + from, gate + inner + from, out + row * inner + from, 0, to - from);
    }
  });
  return true;
}

namespace {
// The tests' entry to silu_mul_rows.
at::Tensor silu_mul_rows_op(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.size(1) % 2 == 0 && gate_up.is_contiguous() &&
                  gate_up.scalar_type() == at::kFloat && gate_up.device().is_cpu(),
              "silu_mul_rows: a contiguous float32 CPU tensor [rows, 2 inner]");
  const int64_t rows = gate_up.size(0), inner = gate_up.size(1) / 2;
  at::Tensor out = at::empty({rows, inner}, gate_up.options());
  TORCH_CHECK(silu_mul_rows(gate_up.data_ptr<float>(), rows, inner, out.data_ptr<float>()),
              "silu_mul_rows: no kernel follows ATen's silu on this CPU");
  return out;
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(axiom_rl, m) {
  m.def("silu_kernel() -> int", &silu_kernel);  // no tensor argument to dispatch on: one for all
  m.def("silu_mul(Tensor gate, Tensor up) -> Tensor", &silu_mul);
  m.def("silu_mul_backward(Tensor grad, Tensor gate, Tensor up, bool with_product) -> (Tensor, Tensor, Tensor)",
        &silu_mul_backward);
  m.def("silu_mul_rows(Tensor gate_up) -> Tensor", &silu_mul_rows_op);
}
