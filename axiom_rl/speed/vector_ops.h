// Vector types, unaligned loads and stores, and the few instructions GCC's vector arithmetic does
// not spell, and the choice of instruction set, for axiom-rl's kernels (speed/decode_step.cpp,
// silu_mul.cpp, attention.cpp, rms_norm.cpp).
// native.py compiles those files from copies in its build directory, with this header copied
// beside them.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#define AXIOM_VECTOR_TYPES 1

namespace axiom_vec {

typedef float f32x16 __attribute__((vector_size(64)));
typedef float f32x8 __attribute__((vector_size(32)));

// Unaligned loads and stores (a row starts anywhere): memcpy, which compiles to one move, inlined
// into the caller's instruction set.
template <typename V>
__attribute__((always_inline)) inline V load(const float* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof(V));
  return v;
}
template <typename V>
__attribute__((always_inline)) inline void store(float* p, const V& v) {
  __builtin_memcpy(p, &v, sizeof(V));
}

}  // namespace axiom_vec
#endif

#if defined(AXIOM_VECTOR_TYPES) && !defined(__clang__)
#define AXIOM_VECTOR_OPS 1
#include <immintrin.h>

#include <string>

extern "C" {
// ATen's Vectorized<float>::exp for AVX-512 and for AVX2 (ATen/cpu/vec/vec512, vec256): SLEEF's,
// which libtorch exports.
__attribute__((target("avx512f"))) __m512 Sleef_expf16_u10(__m512);
__attribute__((target("avx2,fma"))) __m256 Sleef_expf8_u10(__m256);
}

namespace axiom_vec {

// One instruction set's exp and multiply-add; the rest is GCC's vector arithmetic, which compiles
// to the instruction set of the function a kernel's loops are flattened into.
struct Avx512 {
  using V = f32x16;
  static constexpr int64_t lanes = 16;
  __attribute__((target("avx512f"))) static V exp(V x) { return (V)Sleef_expf16_u10((__m512)x); }
  __attribute__((target("avx512f"))) static V splat(float x) { return (V)_mm512_set1_ps(x); }
  __attribute__((target("avx512f"))) static V fma(V a, V b, V c) {
    return (V)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
  }
  __attribute__((target("avx512f"))) static float sum(V x) { return _mm512_reduce_add_ps((__m512)x); }
  // A store past the caches, to an address 64-byte aligned.
  __attribute__((target("avx512f"))) static void stream(float* p, V x) { _mm512_stream_ps(p, (__m512)x); }
  __attribute__((target("avx512f"))) static float max(V x) { return _mm512_reduce_max_ps((__m512)x); }
};
struct Avx2 {
  using V = f32x8;
  static constexpr int64_t lanes = 8;
  __attribute__((target("avx2,fma"))) static V exp(V x) { return (V)Sleef_expf8_u10((__m256)x); }
  __attribute__((target("avx2,fma"))) static V splat(float x) { return (V)_mm256_set1_ps(x); }
  __attribute__((target("avx2,fma"))) static V fma(V a, V b, V c) {
    return (V)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
  }
  __attribute__((target("avx2,fma"))) static void stream(float* p, V x) { _mm256_stream_ps(p, (__m256)x); }
  __attribute__((target("avx2,fma"))) static float sum(V x) {
    float total = 0.0f;
    for (int l = 0; l < 8; ++l) total += x[l];
    return total;
  }
  __attribute__((target("avx2,fma"))) static float max(V x) {
    float most = x[0];
    for (int l = 1; l < 8; ++l) most = x[l] > most ? x[l] : most;
    return most;
  }
};

// Which of a kernel's instruction sets runs here, as a file's table of kernels for each: the one
// of ATen's CPU capability (AVX-512 or AVX2; ATEN_CPU_CAPABILITY may lower it, as the tests do),
// where this CPU has it, else nullptr. Kernels that follow ATen's own bits take AVX2 only where
// ATen runs AVX2 (`only_atens`); the others run it too where ATen's capability is AVX-512 but the
// CPU lacks avx512f. The caller includes ATen (at::get_cpu_capability).
template <typename Kernels>
const Kernels* for_capability(const Kernels* avx512, const Kernels* avx2, bool only_atens = false) {
  const std::string capability = at::get_cpu_capability();
  if (capability == "AVX512" && __builtin_cpu_supports("avx512f")) return avx512;
  const bool avx2_wanted = capability == "AVX2" || (!only_atens && capability == "AVX512");
  if (avx2_wanted && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return avx2;
  return nullptr;
}

}  // namespace axiom_vec
#endif
