// Shared device helpers of the graphfuse kernels: integer types, reduce ops, vector loads, group masks.
// Included textually by the launchers (kernels/runtime.py inlines it), so NVRTC needs no include path.
#pragma once

typedef long long i64;

// Reduce ops (template argument REDUCE of the aggregation kernels).
#define GF_SUM 0
#define GF_MEAN 1
#define GF_MAX 2
#define GF_MIN 3

// Edge-weight modes (template argument WMODE).
#define GF_W_NONE 0  // every edge weighs 1
#define GF_W_EDGE 1  // one weight per edge: val[j]
#define GF_W_HEAD 2  // one weight per edge and head: val[j * H + k / C]

// Half-precision storage types (float16, bfloat16): 16-bit patterns read and written as they are, converted to
// and from float, their accumulator type, by the helpers below (no cuda_fp16.h / cuda_bf16.h: NVRTC needs no
// include path). float and double accumulate in themselves.
struct gf_half { unsigned short bits; };
struct gf_bf16 { unsigned short bits; };
template <typename T> struct gf_acc { typedef T type; };
template <> struct gf_acc<gf_half> { typedef float type; };
template <> struct gf_acc<gf_bf16> { typedef float type; };
template <typename T> using gf_acc_t = typename gf_acc<T>::type;

__device__ __forceinline__ float gf_to_acc(float v) { return v; }
__device__ __forceinline__ double gf_to_acc(double v) { return v; }
__device__ __forceinline__ float gf_to_acc(gf_half v) {
  float r;
  asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(v.bits));
  return r;
}
__device__ __forceinline__ float gf_to_acc(gf_bf16 v) { return __uint_as_float((unsigned)v.bits << 16); }

// An accumulator value in storage type T, rounded to nearest even (float16: overflow to inf as torch's .half()).
template <typename T> __device__ __forceinline__ T gf_from_acc(gf_acc_t<T> v) { return v; }
template <> __device__ __forceinline__ gf_half gf_from_acc<gf_half>(float v) {
  gf_half r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
  return r;
}
template <> __device__ __forceinline__ gf_bf16 gf_from_acc<gf_bf16>(float v) {
  const unsigned u = __float_as_uint(v);
  gf_bf16 r;  // a NaN stays a (quiet) NaN; otherwise round the low 16 bits to nearest, ties to even
  r.bits = (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short)((u >> 16) | 0x40u)
                                           : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  return r;
}

template <typename T> __device__ __forceinline__ T gf_inf();
template <> __device__ __forceinline__ float gf_inf<float>() { return __int_as_float(0x7f800000); }
template <> __device__ __forceinline__ double gf_inf<double>() {
  return __longlong_as_double(0x7ff0000000000000LL);
}

// Identity of the reduce: 0 for sum/mean, -inf for max, +inf for min.
template <typename T, int REDUCE> __device__ __forceinline__ T gf_identity() {
  return REDUCE == GF_MAX ? -gf_inf<T>() : (REDUCE == GF_MIN ? gf_inf<T>() : T(0));
}

// A CF x VEC register accumulator at the reduce's identity, with its entry positions at -1 ("none taken").
template <typename T, int REDUCE, int CF, int VEC>
__device__ __forceinline__ void gf_init_acc(T (&acc)[CF][VEC], i64 (&arg)[CF][VEC]) {
#pragma unroll
  for (int f = 0; f < CF; ++f)
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      acc[f][i] = gf_identity<T, REDUCE>();
      arg[f][i] = -1;
    }
}

// Strict "better" test: keeps the first (lowest-position) message among ties.
template <typename T, int REDUCE> __device__ __forceinline__ bool gf_better(T a, T b) {
  return REDUCE == GF_MAX ? (a > b) : (a < b);
}

// Max/min step without the position (from the identity -inf/+inf): NaN-propagating, as torch's amax/amin make
// a row with a NaN message NaN; for float on sm_80 and later one max.NaN / min.NaN instruction.
template <typename T, int REDUCE> __device__ __forceinline__ T gf_pick(T acc, T m) {
  return m != m || gf_better<T, REDUCE>(m, acc) ? m : acc;
}
#if __CUDA_ARCH__ >= 800
template <> __device__ __forceinline__ float gf_pick<float, GF_MAX>(float acc, float m) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(acc), "f"(m));
  return r;
}
template <> __device__ __forceinline__ float gf_pick<float, GF_MIN>(float acc, float m) {
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(acc), "f"(m));
  return r;
}
#endif

// Max/min step with the entry position, for the kernels' entry loops: the position moves to each strictly better
// message (ties keep the first) and the value follows gf_pick, so a NaN message makes it NaN for good while the
// position stays where it was (the reference's gradient of a NaN row is NaN everywhere). A list whose messages
// never beat the identity (all -inf for max, or a NaN first) leaves `arg` at -1: the caller then gives it the
// list's first entry, the tie rule's choice. (Testing `arg < 0` in the loop instead, as gf_take does, ran GE-SpMM
// with the argument 1.15-1.3x slower at K = 32 to 64 on the H100's large RMAT graphs.)
template <typename T, int REDUCE> __device__ __forceinline__ void gf_step(T m, i64 j, T& acc, i64& arg) {
  if (gf_better<T, REDUCE>(m, acc)) arg = j;
  acc = gf_pick<T, REDUCE>(acc, m);
}

// gf_step for folding partial results (`arg` -1: none taken yet, `acc` then still the identity): the first one
// is taken even at -inf/+inf.
template <typename T, int REDUCE> __device__ __forceinline__ void gf_take(T m, i64 j, T& acc, i64& arg) {
  if (arg < 0 || gf_better<T, REDUCE>(m, acc)) arg = j;
  acc = gf_pick<T, REDUCE>(acc, m);
}

template <typename T, int N> struct alignas(sizeof(T) * N) GfVec { T v[N]; };

template <typename T, int N> __device__ __forceinline__ void gf_load(const T* p, T (&out)[N]) {
  const GfVec<T, N> t = *reinterpret_cast<const GfVec<T, N>*>(p);
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = t.v[i];
}

template <typename T, int N> __device__ __forceinline__ void gf_store(T* p, const T (&in)[N]) {
  GfVec<T, N> t;
#pragma unroll
  for (int i = 0; i < N; ++i) t.v[i] = in[i];
  *reinterpret_cast<GfVec<T, N>*>(p) = t;
}

// atomicAdd with acquire-release semantics at GPU scope (the split-K "semaphore" pattern: writes ordered
// before it by __syncwarp/__syncthreads are published; the thread that reads the final count sees them all).
__device__ __forceinline__ unsigned gf_atomic_add_acq_rel(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// gf_load through L2 only (ld.global.cg): for data that other SMs wrote during the same launch.
template <typename T, int N> __device__ __forceinline__ void gf_load_cg(const T* p, T (&out)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = __ldcg(p + i);
}
template <> __device__ __forceinline__ void gf_load_cg<float, 4>(const float* p, float (&out)[4]) {
  const float4 t = __ldcg(reinterpret_cast<const float4*>(p));
  out[0] = t.x, out[1] = t.y, out[2] = t.z, out[3] = t.w;
}
template <> __device__ __forceinline__ void gf_load_cg<float, 2>(const float* p, float (&out)[2]) {
  const float2 t = __ldcg(reinterpret_cast<const float2*>(p));
  out[0] = t.x, out[1] = t.y;
}
template <> __device__ __forceinline__ void gf_load_cg<double, 2>(const double* p, double (&out)[2]) {
  const double2 t = __ldcg(reinterpret_cast<const double2*>(p));
  out[0] = t.x, out[1] = t.y;
}

// Mask of the GROUP lanes (GROUP a power of two <= 32) that hold this lane.
template <int GROUP> __device__ __forceinline__ unsigned gf_group_mask() {
  const int lane = threadIdx.x & 31;
  return GROUP >= 32 ? 0xffffffffu : ((1u << (GROUP & 31)) - 1u) << (lane & ~(GROUP - 1));
}

// Sum over the GROUP lanes of a group (butterfly: every lane gets the same, order-fixed result).
template <typename T, int GROUP> __device__ __forceinline__ T gf_group_sum(T v, unsigned mask) {
#pragma unroll
  for (int o = GROUP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o, GROUP);
  return v;
}

// out[0..VEC) += v with atomic adds (no return value); one vector reduction on sm_90 for float2/float4.
template <typename T, int VEC> __device__ __forceinline__ void gf_red_add(T* p, const T (&v)[VEC]) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) atomicAdd(p + i, v[i]);
}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
template <> __device__ __forceinline__ void gf_red_add<float, 4>(float* p, const float (&v)[4]) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v[0]), "f"(v[1]), "f"(v[2]),
               "f"(v[3])
               : "memory");
}
template <> __device__ __forceinline__ void gf_red_add<float, 2>(float* p, const float (&v)[2]) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(v[0]), "f"(v[1]) : "memory");
}
#endif
