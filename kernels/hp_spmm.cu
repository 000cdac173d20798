// HP-SpMM (after Xiao et al., "HP-SpMM/HP-SDDMM"): sum / mean aggregation over the hybrid CSR/COO form
// (rowptr + per-entry row + col + weight, entries in CSR order), load-balanced by splitting the nonzeros, not
// the rows.
//
// Work mapping: a worker of GROUP lanes (one warp, or fewer with several workers per warp for K <= 64; the rule
// is GE-SpMM's spmm.config) owns NnzPerWarp consecutive entries (Dynamic Task Partition: the launcher picks
// NnzPerWarp from the GPU's full-wave size) and a column tile of GROUP * VEC * CF columns (grid.y walks the
// tiles). The worker loads GROUP (row, col, weight) triples with one coalesced access and broadcasts them with
// shuffles; every lane accumulates VEC-wide vectors (Hierarchical Vectorized Memory Access: the widest vector K
// and the pointers allow) of CF column chunks in registers while the row stays the same: the GROUP entries split
// into runs of one row (a ballot of the lanes whose row differs from their predecessor's), and each run is a
// branch-free, unrolled loop with several gathers in flight. At a row switch the worker flushes: a row that lies
// wholly inside the worker's entries is stored (no other worker touches it), a row cut by a worker boundary is
// added atomically into the zeroed output. Empty rows keep the zeros. Mean scales each flush by 1 / degree. Rows
// shared by two workers make the result run-to-run nondeterministic in the last bits (atomics), as in GAS.
#include "common.cuh"

template <typename T, int VEC, int CF>
__device__ __forceinline__ void hp_flush(T* __restrict__ out, const i64* __restrict__ rowptr, i64 r, i64 begin,
                                         i64 end, T (&acc)[CF][VEC], bool mean, i64 K, i64 k_base, int gl,
                                         int group) {
  const i64 lo = rowptr[r], hi = rowptr[r + 1];
  const T scale = mean ? T(1) / T(hi - lo) : T(1);
  const bool owned = lo >= begin && hi <= end;
  T* dst = out + r * K;
#pragma unroll
  for (int f = 0; f < CF; ++f) {
    const i64 k = k_base + ((i64)f * group + gl) * VEC;
    if (k < K) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) acc[f][i] *= scale;
      if (owned) {
        gf_store<T, VEC>(dst + k, acc[f]);
      } else {
        gf_red_add<T, VEC>(dst + k, acc[f]);
      }
    }
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[f][i] = T(0);
  }
}

template <typename T, bool WEIGHTED, bool MEAN, int VEC, int CF, int GROUP>
__global__ void __launch_bounds__(256) hp_spmm(
    const i64* __restrict__ rowptr,  // (R + 1,) entry offsets of the rows (owned-row test, mean's degree)
    const i64* __restrict__ row,     // (nnz,) row of each entry
    const int* __restrict__ col,     // (nnz,) gathered row of x for each entry
    const T* __restrict__ val,       // (nnz,) weights in entry order, or null
    const T* __restrict__ x,         // (num_cols, K)
    T* __restrict__ out,             // (R, K), zeroed by the launcher
    i64 nnz, i64 K, i64 npw) {
  constexpr int TILE = GROUP * VEC * CF;
  // Gathers in flight per run: 4 for a warp-wide worker (faster than 8 or 16 on the H100 at K = 128), 8 for a
  // smaller one (faster than 16 at K = 64).
  constexpr int UNROLL = GROUP == 32 ? 4 : 8;
  const int gl = threadIdx.x & (GROUP - 1);
  const i64 worker = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / GROUP;
  const i64 begin = worker * npw;
  if (begin >= nnz) return;  // the whole worker leaves together
  const i64 end = min(begin + npw, nnz);
  const unsigned mask = gf_group_mask<GROUP>();
  const i64 k_base = (i64)blockIdx.y * TILE;

  T acc[CF][VEC];
#pragma unroll
  for (int f = 0; f < CF; ++f)
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[f][i] = T(0);
  i64 cur = row[begin];

  for (i64 j0 = begin; j0 < end; j0 += GROUP) {
    const i64 j = j0 + gl;
    i64 my_r = 0;
    int my_c = 0;
    T my_w = T(1);
    if (j < end) {  // one coalesced load of GROUP entries, broadcast below
      my_r = row[j];
      my_c = col[j];
      if (WEIGHTED) my_w = val[j];
    }
    const int n = (int)min((i64)GROUP, end - j0);
    // Lanes whose entry starts a new row (its predecessor in the chunk has another row): the chunk splits
    // into runs of one row each; a run is accumulated by a branch-free loop (unrolled, several gathers in
    // flight), the row check happens once per run.
    const i64 prev_r = __shfl_up_sync(mask, my_r, 1, GROUP);
    const unsigned starts =
        (__ballot_sync(mask, gl > 0 && gl < n && my_r != prev_r) >> (threadIdx.x & 31 & ~(GROUP - 1))) |
        1u;  // bit t: entry t of the chunk opens a run (entry 0 always does)
    for (int t = 0; t < n;) {
      const unsigned later = t + 1 < 32 ? starts >> (t + 1) : 0u;  // run starts after t
      const int stop = later ? min(n, t + __ffs(later)) : n;  // the run is [t, stop)
      const i64 r = __shfl_sync(mask, my_r, t, GROUP);
      if (r != cur) {  // group uniform
        hp_flush<T, VEC, CF>(out, rowptr, cur, begin, end, acc, MEAN, K, k_base, gl, GROUP);
        cur = r;
      }
#pragma unroll UNROLL
      for (; t < stop; ++t) {
        const int c = __shfl_sync(mask, my_c, t, GROUP);
        T w = T(1);
        if (WEIGHTED) w = __shfl_sync(mask, my_w, t, GROUP);
        const T* xr = x + (i64)c * K;
#pragma unroll
        for (int f = 0; f < CF; ++f) {
          const i64 k = k_base + ((i64)f * GROUP + gl) * VEC;
          if (k < K) {
            T v[VEC];
            gf_load<T, VEC>(xr + k, v);
#pragma unroll
            for (int i = 0; i < VEC; ++i) acc[f][i] += w * v[i];
          }
        }
      }
    }
  }
  hp_flush<T, VEC, CF>(out, rowptr, cur, begin, end, acc, MEAN, K, k_base, gl, GROUP);
}

// The zeroed output HP-SpMM's cut rows are added into: n elements, VEC per thread (VEC divides K, hence n, and the
// output is fresh from PyTorch's allocator, aligned). A launch of its own costs the host less than torch.zeros (an
// allocation and a fill through PyTorch's dispatcher).
template <typename T, int VEC>
__global__ void __launch_bounds__(256) hp_zero(T* __restrict__ out, i64 n) {
  const i64 i = ((i64)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
  if (i < n) {
    const T zero[VEC] = {};
    gf_store<T, VEC>(out + i, zero);
  }
}
