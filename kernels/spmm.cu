// GE-SpMM (Huang et al., SC'20): CSR SpMM-like aggregation with Coalesced Row Caching (CRC) and
// Coarse-grained Warp Merging (CWM), generalised to sum / mean / max / min, edge weights per edge or per
// head, row splitting for load balance, and an optional "argmask" used by the max/min backward pass.
//
// Work mapping (gespmm_rows): a GROUP of lanes (32 = one warp; 1..16 for K < 32, several rows per warp)
// owns one row segment and a column tile of GROUP * VEC * CF columns (grid.y walks the tiles). The group
// loads GROUP (col, val) pairs of its segment with one coalesced access (CRC; kept in registers and
// broadcast with shuffles), then every lane accumulates VEC-wide vectors of CF column chunks (CWM).
// Rows longer than the schedule's segment length are split into segments whose partial results go to a
// workspace and are combined in a fixed order by gespmm_combine: no atomics, bitwise deterministic.
#include "common.cuh"

template <typename T, int REDUCE, int WMODE, int VEC, int CF, int GROUP, bool ARGMASK, bool TRACK>
__global__ void __launch_bounds__(256) gespmm_rows(
    const i64* __restrict__ seg_ptr,     // (S + 1,) nnz offsets of the row segments
    const i64* __restrict__ seg_row,     // (S,) row of each segment; null: segment s is row s
    const i64* __restrict__ seg_slot,    // (S,) >= 0: output row; < 0: workspace row -slot-1; null: = row
    const int* __restrict__ col,         // (nnz,) gathered row of x for each entry
    const T* __restrict__ val,           // (nnz,) or (nnz, H) weights in this format's order; null if none
    const i64* __restrict__ edge_id,     // ARGMASK: (nnz,) id compared with gather_arg
    const i64* __restrict__ gather_arg,  // ARGMASK: (num_cols, K) the id each gathered element counts for
    const T* __restrict__ x,             // (num_cols, K)
    T* __restrict__ out,                 // (num_rows, K)
    i64* __restrict__ out_arg,           // TRACK: (num_rows, K) argmax/argmin entry position
    T* __restrict__ part,                // (P, K) partial results of split rows
    i64* __restrict__ part_arg,          // TRACK: (P, K)
    i64 num_segs, i64 K, i64 H, i64 C) {
  constexpr int TILE = GROUP * VEC * CF;
  constexpr bool EXTREMUM = (REDUCE == GF_MAX || REDUCE == GF_MIN);
  const int gl = threadIdx.x & (GROUP - 1);
  const i64 s = (i64)blockIdx.x * (blockDim.x / GROUP) + threadIdx.x / GROUP;
  if (s >= num_segs) return;  // the whole group leaves together
  const unsigned mask = gf_group_mask<GROUP>();
  const i64 beg = seg_ptr[s], end = seg_ptr[s + 1];
  const i64 k_base = (i64)blockIdx.y * TILE;

  T acc[CF][VEC];
  i64 arg[CF][VEC];
#pragma unroll
  for (int f = 0; f < CF; ++f)
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      acc[f][i] = gf_identity<T, REDUCE>();
      arg[f][i] = -1;
    }

  for (i64 j0 = beg; j0 < end; j0 += GROUP) {
    const i64 j = j0 + gl;
    int my_c = 0;
    T my_w = T(1);
    i64 my_e = 0;
    if (j < end) {  // CRC: one coalesced load of GROUP entries, broadcast below
      my_c = col[j];
      if (WMODE == GF_W_EDGE) my_w = val[j];
      if (ARGMASK) my_e = edge_id[j];
    }
    const int n = (int)min((i64)GROUP, end - j0);
#pragma unroll 8
    for (int t = 0; t < n; ++t) {
      const int c = __shfl_sync(mask, my_c, t, GROUP);
      T w = T(1);
      if (WMODE == GF_W_EDGE) w = __shfl_sync(mask, my_w, t, GROUP);
      i64 e = 0;
      if (ARGMASK) e = __shfl_sync(mask, my_e, t, GROUP);
      const T* xr = x + (i64)c * K;
#pragma unroll
      for (int f = 0; f < CF; ++f) {
        const i64 k = k_base + (i64)(f * GROUP + gl) * VEC;
        if (k < K) {
          T v[VEC];
          gf_load<T, VEC>(xr + k, v);
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            T wi = w;
            if (WMODE == GF_W_HEAD) wi = val[(j0 + t) * H + (k + i) / C];
            T m = wi * v[i];
            if (ARGMASK && gather_arg[(i64)c * K + k + i] != e) m = T(0);
            if (EXTREMUM && TRACK) {
              if (gf_better<T, REDUCE>(m, acc[f][i])) {
                acc[f][i] = m;
                arg[f][i] = j0 + t;
              }
            } else if (EXTREMUM) {  // branch-free when no argument is needed (inference)
              acc[f][i] = gf_better<T, REDUCE>(m, acc[f][i]) ? m : acc[f][i];
            } else {
              acc[f][i] += m;
            }
          }
        }
      }
    }
  }

  const i64 row = seg_row ? seg_row[s] : s;
  const i64 slot = seg_slot ? seg_slot[s] : row;
  T* dst;
  i64* dst_arg;
  if (slot >= 0) {
    dst = out + row * K;
    dst_arg = out_arg ? out_arg + row * K : nullptr;
  } else {
    dst = part + (-slot - 1) * K;
    dst_arg = part_arg ? part_arg + (-slot - 1) * K : nullptr;
  }
  const T scale = (REDUCE == GF_MEAN && slot >= 0 && end > beg) ? T(1) / T(end - beg) : T(1);
#pragma unroll
  for (int f = 0; f < CF; ++f) {
    const i64 k = k_base + (i64)(f * GROUP + gl) * VEC;
    if (k < K) {
      T o[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        if (EXTREMUM) {
          o[i] = (TRACK ? arg[f][i] < 0 : end == beg) ? T(0) : acc[f][i];  // empty row: 0
        } else {
          o[i] = acc[f][i] * scale;
        }
      }
      gf_store<T, VEC>(dst + k, o);
      if (EXTREMUM && TRACK) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) dst_arg[k + i] = arg[f][i];
      }
    }
  }
}

// Combine the partial results of split rows in segment order (deterministic). grid = (rows, K tiles).
template <typename T, int REDUCE, bool TRACK>
__global__ void __launch_bounds__(128) gespmm_combine(
    const i64* __restrict__ long_row,   // (R,) rows that were split
    const i64* __restrict__ long_ptr,   // (R + 1,) their workspace rows
    const i64* __restrict__ rowptr,     // (num_rows + 1,) the original row offsets (mean divides by degree)
    const T* __restrict__ part, const i64* __restrict__ part_arg,
    T* __restrict__ out, i64* __restrict__ out_arg, i64 K) {
  constexpr bool EXTREMUM = (REDUCE == GF_MAX || REDUCE == GF_MIN);
  const i64 r = blockIdx.x;
  const i64 k = (i64)blockIdx.y * blockDim.x + threadIdx.x;
  if (k >= K) return;
  const i64 row = long_row[r];
  T acc = gf_identity<T, REDUCE>();
  i64 a = -1;
  bool seen = false;
  for (i64 p = long_ptr[r]; p < long_ptr[r + 1]; ++p) {
    const T v = part[p * K + k];
    if (EXTREMUM) {
      const i64 pa = TRACK ? part_arg[p * K + k] : 0;
      if (pa >= 0 && (!seen || gf_better<T, REDUCE>(v, acc))) {
        acc = v;
        a = pa;
        seen = true;
      }
    } else {
      acc += v;
    }
  }
  if (REDUCE == GF_MEAN) acc = acc / T(rowptr[row + 1] - rowptr[row]);
  if (EXTREMUM && !seen) acc = T(0);
  out[row * K + k] = acc;
  if (EXTREMUM && TRACK) out_arg[row * K + k] = a;
}
