// Fused GAT attention (fuseGNN, "Fused Graph Processing", with max subtraction and multi-head):
//   z_e^h = LeakyReLU(a_src[s]^h + a_dst[t]^h),  alpha_e^h = exp(z_e^h - max_t^h) / sum_t^h,
//   then attention dropout (mask from a counter-based hash of (seed, COO edge id, head): the backward pass
//   recomputes it, nothing is stored).
// Only per-node vectors (N, H) are kept between passes (a_src, a_dst, the row max and the row sum); per-edge
// coefficients are recomputed wherever they are needed, so no (E, H, C) tensor exists and even (E, H)
// tensors are transient.
//
// gat_softmax_rows      per target row (CSR): max, sum of exp, then alpha written in COO and/or CSR order.
// gat_alpha_entries     thread per (entry, head) of any entry list (e.g. CSC order for the feature gradient).
// gat_softmax_bwd_rows  per target row: rowdot_t = sum_e alpha_e g_e, d a_dst[t] = sum_e dz_e with
//                       dz_e = alpha_e (g_e - rowdot_t) LeakyReLU'(.), g = dalpha through the dropout mask.
// gat_softmax_bwd_cols  per source column (CSC): d a_src[s] = sum_e dz_e. No atomics anywhere.
//
// Row mapping: a block of 8 warps owns 8 consecutive rows; a row with at most GAT_LONG entries is handled by
// one warp, a longer one (a hub) by the whole block with block-wide reductions, so hubs do not serialise
// on one warp. Heads are processed GH at a time (registers per lane). Reductions have a fixed order: results
// are run-to-run deterministic.
#include "common.cuh"

#define GAT_GH 8
#define GAT_WARPS 8
#define GAT_LONG 256

__device__ __forceinline__ unsigned long long gat_mix(unsigned long long x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Keep-decision of attention dropout for (edge e, head h): uniform u in [0, 1) with 24 bits, kept when u >= p.
__device__ __forceinline__ bool gat_keep(unsigned long long seed, i64 e, i64 H, i64 h, double p) {
  const unsigned long long x = gat_mix(seed ^ gat_mix((unsigned long long)(e * H + h) + 0x9e3779b97f4a7c15ULL));
  return (double)(x >> 40) * (1.0 / 16777216.0) >= p;
}

template <typename T> __device__ __forceinline__ T gat_leaky(T v, T slope) { return v > T(0) ? v : v * slope; }

// The scalars every attention kernel takes (LeakyReLU slope, dropout probability p, mask seed) in the types
// the kernels compute with, and the dropout scale 1 / (1 - p) (1 without DROPOUT).
template <typename T, bool DROPOUT> struct GatParams {
  T slope;
  double p;
  T scale;
  unsigned long long seed;

  __device__ __forceinline__ GatParams(double slope_d, double p_, i64 seed_i)
      : slope((T)slope_d), p(p_), scale(DROPOUT ? (T)(1.0 / (1.0 - p_)) : T(1)), seed((unsigned long long)seed_i) {}

  // Keep-decision of attention dropout for (edge e, head h) (see gat_keep).
  __device__ __forceinline__ bool keep(i64 e, i64 H, i64 h) const { return gat_keep(seed, e, H, h, p); }
};

// Reductions over the cooperating threads of a row: the warp, or the block (BLOCK; every thread must call,
// s_red holds GAT_WARPS values).
template <typename T, bool BLOCK> __device__ __forceinline__ T gat_sum(T v, T* s_red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (!BLOCK) return v;
  if ((threadIdx.x & 31) == 0) s_red[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = s_red[0];
  for (int w = 1; w < GAT_WARPS; ++w) r += s_red[w];
  __syncthreads();
  return r;
}

template <typename T, bool BLOCK> __device__ __forceinline__ T gat_max(T v, T* s_red) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (!BLOCK) return v;
  if ((threadIdx.x & 31) == 0) s_red[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = s_red[0];
  for (int w = 1; w < GAT_WARPS; ++w) r = max(r, s_red[w]);
  __syncthreads();
  return r;
}

// Calls row(t, me, nthreads, BLOCK) for every row: short rows by a warp (me = lane), long rows by the block.
#define GAT_FOR_ROWS(num_rows, ptr, ROW_CALL)                                                             \
  {                                                                                                        \
    const int warp_ = threadIdx.x >> 5, lane_ = threadIdx.x & 31;                                         \
    for (i64 r0_ = (i64)blockIdx.x * GAT_WARPS; r0_ < (num_rows); r0_ += (i64)gridDim.x * GAT_WARPS) {    \
      {                                                                                                    \
        const i64 t = r0_ + warp_;                                                                         \
        if (t < (num_rows) && (ptr)[t + 1] - (ptr)[t] <= GAT_LONG) { ROW_CALL(t, lane_, 32, false); }      \
      }                                                                                                    \
      for (int k_ = 0; k_ < GAT_WARPS; ++k_) {                                                             \
        const i64 t = r0_ + k_;                                                                            \
        if (t < (num_rows) && (ptr)[t + 1] - (ptr)[t] > GAT_LONG) { ROW_CALL(t, (int)threadIdx.x, (int)blockDim.x, true); } \
      }                                                                                                    \
    }                                                                                                      \
  }

template <typename T, bool DROPOUT, bool BLOCK>
__device__ __forceinline__ void gat_row_forward(
    i64 t, int me, int nthreads, T* s_red, const i64* __restrict__ rowptr, const int* __restrict__ col32,
    const i64* __restrict__ perm, const T* __restrict__ a_src, const T* __restrict__ a_dst, T* __restrict__ out_coo,
    T* __restrict__ out_csr, T* __restrict__ row_max, T* __restrict__ row_sum, i64 H, GatParams<T, DROPOUT> prm) {
  const i64 lo = rowptr[t], hi = rowptr[t + 1];
  for (i64 h0 = 0; h0 < H; h0 += GAT_GH) {
    const int nh = (int)min((i64)GAT_GH, H - h0);
    T ad[GAT_GH], m[GAT_GH], s[GAT_GH];
#pragma unroll
    for (int k = 0; k < GAT_GH; ++k) {
      ad[k] = k < nh ? a_dst[t * H + h0 + k] : T(0);
      m[k] = -gf_inf<T>();
      s[k] = T(0);
    }
    for (i64 i = lo + me; i < hi; i += nthreads) {
      const T* as = a_src + (i64)col32[i] * H + h0;
#pragma unroll
      for (int k = 0; k < GAT_GH; ++k)
        if (k < nh) m[k] = max(m[k], gat_leaky(as[k] + ad[k], prm.slope));
    }
#pragma unroll
    for (int k = 0; k < GAT_GH; ++k) m[k] = gat_max<T, BLOCK>(m[k], s_red);
    for (i64 i = lo + me; i < hi; i += nthreads) {
      const T* as = a_src + (i64)col32[i] * H + h0;
#pragma unroll
      for (int k = 0; k < GAT_GH; ++k)
        if (k < nh) s[k] += exp(gat_leaky(as[k] + ad[k], prm.slope) - m[k]);
    }
#pragma unroll
    for (int k = 0; k < GAT_GH; ++k) s[k] = gat_sum<T, BLOCK>(s[k], s_red);
    if (me == 0) {
#pragma unroll
      for (int k = 0; k < GAT_GH; ++k)
        if (k < nh) {
          row_max[t * H + h0 + k] = m[k];
          row_sum[t * H + h0 + k] = s[k];
        }
    }
    for (i64 i = lo + me; i < hi; i += nthreads) {
      const T* as = a_src + (i64)col32[i] * H + h0;
      const i64 e = perm[i];
#pragma unroll
      for (int k = 0; k < GAT_GH; ++k) {
        if (k >= nh) continue;
        T a = exp(gat_leaky(as[k] + ad[k], prm.slope) - m[k]) / s[k];
        if (DROPOUT) a = prm.keep(e, H, h0 + k) ? a * prm.scale : T(0);
        if (out_coo) out_coo[e * H + h0 + k] = a;
        if (out_csr) out_csr[i * H + h0 + k] = a;
      }
    }
  }
}

// Rows = targets. col32: source of each CSR entry; perm: its COO edge id. out_coo[(perm[i]) * H + h] and / or
// out_csr[i * H + h] (null to skip). row_max / row_sum: (num_rows, H); empty rows get -inf / 0.
template <typename T, bool DROPOUT>
__global__ void __launch_bounds__(256) gat_softmax_rows(
    const i64* __restrict__ rowptr, const int* __restrict__ col32, const i64* __restrict__ perm,
    const T* __restrict__ a_src, const T* __restrict__ a_dst, T* __restrict__ out_coo, T* __restrict__ out_csr,
    T* __restrict__ row_max, T* __restrict__ row_sum, i64 num_rows, i64 H, double slope_d, double p,
    i64 seed_i) {
  __shared__ T s_red[GAT_WARPS];
  const GatParams<T, DROPOUT> prm(slope_d, p, seed_i);
#define GAT_FWD_ROW(t, me, nthreads, BLOCK)                                                                 \
  gat_row_forward<T, DROPOUT, BLOCK>(t, me, nthreads, s_red, rowptr, col32, perm, a_src, a_dst, out_coo, \
                                     out_csr, row_max, row_sum, H, prm)
  GAT_FOR_ROWS(num_rows, rowptr, GAT_FWD_ROW)
#undef GAT_FWD_ROW
}

// alpha (after dropout) of entries j < n: source src[j], target dst[j], COO id eid[j]; out[j * H + h].
template <typename T, bool DROPOUT>
__global__ void __launch_bounds__(256) gat_alpha_entries(
    const i64* __restrict__ src, const int* __restrict__ dst, const i64* __restrict__ eid,
    const T* __restrict__ a_src, const T* __restrict__ a_dst, const T* __restrict__ row_max,
    const T* __restrict__ row_sum, T* __restrict__ out, i64 n, i64 H, double slope_d, double p, i64 seed_i) {
  const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n * H) return;
  const i64 j = idx / H, h = idx - j * H;
  const i64 s = src[j], t = dst[j];
  const GatParams<T, DROPOUT> prm(slope_d, p, seed_i);
  T a = exp(gat_leaky(a_src[s * H + h] + a_dst[t * H + h], prm.slope) - row_max[t * H + h]) / row_sum[t * H + h];
  if (DROPOUT) a = prm.keep(eid[j], H, h) ? a * prm.scale : T(0);
  out[idx] = a;
}

template <typename T, bool DROPOUT, bool BLOCK>
__device__ __forceinline__ void gat_row_backward(
    i64 t, int me, int nthreads, T* s_red, const i64* __restrict__ rowptr, const int* __restrict__ col32,
    const i64* __restrict__ perm, const i64* __restrict__ rpos, const T* __restrict__ dalpha,
    const T* __restrict__ a_src, const T* __restrict__ a_dst, const T* __restrict__ row_max,
    const T* __restrict__ row_sum, T* __restrict__ d_dst, T* __restrict__ rowdot, i64 H, GatParams<T, DROPOUT> prm) {
  const i64 lo = rowptr[t], hi = rowptr[t + 1];
  for (i64 h0 = 0; h0 < H; h0 += GAT_GH) {
    const int nh = (int)min((i64)GAT_GH, H - h0);
    T ad[GAT_GH], m[GAT_GH], sm[GAT_GH], dot[GAT_GH], dd[GAT_GH];
#pragma unroll
    for (int k = 0; k < GAT_GH; ++k) {
      ad[k] = k < nh ? a_dst[t * H + h0 + k] : T(0);
      m[k] = k < nh ? row_max[t * H + h0 + k] : T(0);
      sm[k] = k < nh ? row_sum[t * H + h0 + k] : T(1);
      dot[k] = T(0);
      dd[k] = T(0);
    }
    for (int pass = 0; pass < 2; ++pass) {
      for (i64 i = lo + me; i < hi; i += nthreads) {
        const T* as = a_src + (i64)col32[i] * H + h0;
        const i64 e = perm[i];
        const T* da = dalpha + (rpos ? rpos[i] : i) * H + h0;
#pragma unroll
        for (int k = 0; k < GAT_GH; ++k) {
          if (k >= nh) continue;
          const T pre = as[k] + ad[k];
          const T a = exp(gat_leaky(pre, prm.slope) - m[k]) / sm[k];
          T g = da[k];
          if (DROPOUT) g = prm.keep(e, H, h0 + k) ? g * prm.scale : T(0);
          if (pass == 0) dot[k] += a * g;
          else dd[k] += a * (g - dot[k]) * (pre > T(0) ? T(1) : prm.slope);
        }
      }
#pragma unroll
      for (int k = 0; k < GAT_GH; ++k) {
        if (pass == 0) dot[k] = gat_sum<T, BLOCK>(dot[k], s_red);
        else dd[k] = gat_sum<T, BLOCK>(dd[k], s_red);
      }
    }
    if (me == 0) {
#pragma unroll
      for (int k = 0; k < GAT_GH; ++k)
        if (k < nh) {
          if (d_dst) d_dst[t * H + h0 + k] = dd[k];
          rowdot[t * H + h0 + k] = dot[k];
        }
    }
  }
}

// Backward over target rows. dalpha of CSR entry i is dalpha[(rpos ? rpos[i] : i) * H + h].
template <typename T, bool DROPOUT>
__global__ void __launch_bounds__(256) gat_softmax_bwd_rows(
    const i64* __restrict__ rowptr, const int* __restrict__ col32, const i64* __restrict__ perm,
    const i64* __restrict__ rpos, const T* __restrict__ dalpha, const T* __restrict__ a_src,
    const T* __restrict__ a_dst, const T* __restrict__ row_max, const T* __restrict__ row_sum,
    T* __restrict__ d_dst, T* __restrict__ rowdot, i64 num_rows, i64 H, double slope_d, double p, i64 seed_i) {
  __shared__ T s_red[GAT_WARPS];
  const GatParams<T, DROPOUT> prm(slope_d, p, seed_i);
#define GAT_BWD_ROW(t, me, nthreads, BLOCK)                                                                  \
  gat_row_backward<T, DROPOUT, BLOCK>(t, me, nthreads, s_red, rowptr, col32, perm, rpos, dalpha, a_src, a_dst, \
                                      row_max, row_sum, d_dst, rowdot, H, prm)
  GAT_FOR_ROWS(num_rows, rowptr, GAT_BWD_ROW)
#undef GAT_BWD_ROW
}

template <typename T, bool DROPOUT, bool BLOCK>
__device__ __forceinline__ void gat_col_backward(
    i64 s, int me, int nthreads, T* s_red, const i64* __restrict__ colptr, const int* __restrict__ row32,
    const i64* __restrict__ csc_perm, const i64* __restrict__ cpos, const T* __restrict__ dalpha,
    const T* __restrict__ a_src, const T* __restrict__ a_dst, const T* __restrict__ row_max,
    const T* __restrict__ row_sum, const T* __restrict__ rowdot, T* __restrict__ d_src, i64 H,
    GatParams<T, DROPOUT> prm) {
  const i64 lo = colptr[s], hi = colptr[s + 1];
  for (i64 h0 = 0; h0 < H; h0 += GAT_GH) {
    const int nh = (int)min((i64)GAT_GH, H - h0);
    T as[GAT_GH], acc[GAT_GH];
#pragma unroll
    for (int k = 0; k < GAT_GH; ++k) {
      as[k] = k < nh ? a_src[s * H + h0 + k] : T(0);
      acc[k] = T(0);
    }
    for (i64 j = lo + me; j < hi; j += nthreads) {
      const i64 t = row32[j];
      const i64 e = csc_perm[j];
      const T* da = dalpha + cpos[j] * H + h0;
#pragma unroll
      for (int k = 0; k < GAT_GH; ++k) {
        if (k >= nh) continue;
        const i64 th = t * H + h0 + k;
        const T pre = as[k] + a_dst[th];
        const T a = exp(gat_leaky(pre, prm.slope) - row_max[th]) / row_sum[th];
        T g = da[k];
        if (DROPOUT) g = prm.keep(e, H, h0 + k) ? g * prm.scale : T(0);
        acc[k] += a * (g - rowdot[th]) * (pre > T(0) ? T(1) : prm.slope);
      }
    }
#pragma unroll
    for (int k = 0; k < GAT_GH; ++k) acc[k] = gat_sum<T, BLOCK>(acc[k], s_red);
    if (me == 0) {
#pragma unroll
      for (int k = 0; k < GAT_GH; ++k)
        if (k < nh) d_src[s * H + h0 + k] = acc[k];
    }
  }
}

// Backward over source columns (CSC): d a_src[s] = sum over the column of dz. dalpha of CSC entry j is
// dalpha[cpos[j] * H + h]; row32 / csc_perm: target and COO id of each entry.
template <typename T, bool DROPOUT>
__global__ void __launch_bounds__(256) gat_softmax_bwd_cols(
    const i64* __restrict__ colptr, const int* __restrict__ row32, const i64* __restrict__ csc_perm,
    const i64* __restrict__ cpos, const T* __restrict__ dalpha, const T* __restrict__ a_src,
    const T* __restrict__ a_dst, const T* __restrict__ row_max, const T* __restrict__ row_sum,
    const T* __restrict__ rowdot, T* __restrict__ d_src, i64 num_cols, i64 H, double slope_d, double p,
    i64 seed_i) {
  __shared__ T s_red[GAT_WARPS];
  const GatParams<T, DROPOUT> prm(slope_d, p, seed_i);
#define GAT_COL(s, me, nthreads, BLOCK)                                                                      \
  gat_col_backward<T, DROPOUT, BLOCK>(s, me, nthreads, s_red, colptr, row32, csc_perm, cpos, dalpha, a_src,  \
                                      a_dst, row_max, row_sum, rowdot, d_src, H, prm)
  GAT_FOR_ROWS(num_cols, colptr, GAT_COL)
#undef GAT_COL
}

// The per-node attention terms (fuseGNN's small GEMM H · a, with a block-diagonal a): thread per (node, head),
// a_src[n, h] = <x[n, h, :], att_src[h, :]> and a_dst[n, h] = <x[n, h, :], att_dst[h, :]> in one pass over x.
template <typename T>
__global__ void __launch_bounds__(256) gat_node_scores(
    const T* __restrict__ x, const T* __restrict__ att_src, const T* __restrict__ att_dst, T* __restrict__ a_src,
    T* __restrict__ a_dst, i64 n, i64 H, i64 C) {
  const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n * H) return;
  const i64 h = idx % H;
  const T* row = x + idx * C;
  const T* as = att_src + h * C;
  const T* ad = att_dst + h * C;
  T s = T(0), d = T(0);
  for (i64 c = 0; c < C; ++c) {
    const T v = row[c];
    s += v * as[c];
    d += v * ad[c];
  }
  a_src[idx] = s;
  a_dst[idx] = d;
}
