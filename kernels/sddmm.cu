// HP-SDDMM (after Xiao et al., "HP-SpMM/HP-SDDMM"): per-edge dot products out[e, h] = s_e * <a[dst_e, h, :],
// b[src_e, h, :]> over the hybrid CSR/COO form (per-entry row, col and COO id, entries in CSR order).
//
// Work mapping: the (entry, head) pairs t = j * H + h form one task list, split evenly across warps:
// NnzPerWarp consecutive tasks per warp (Dynamic Task Partition: the launcher picks NnzPerWarp from the GPU's
// full-wave size). Inside a warp, GROUP lanes (a power of two covering C / VEC) share one task, 32 / GROUP
// tasks run side by side, and every lane reads VEC-wide vectors (Hierarchical Vectorized Memory Access: the
// launcher picks the widest vector C and the pointers allow). A group keeps its slice of a's row in
// registers while consecutive tasks stay on the same row (the row-switch reuse; C <= GROUP * VEC * CF), then
// reduces its partial dot product with shuffles in a fixed order: no atomics, run-to-run deterministic.
// Each result is written once, at its COO position perm[j] (out is (E, H) in COO order). Loops are warp
// uniform (inactive lanes compute nothing but take part in the shuffles).
#include "common.cuh"

template <typename T, int VEC, int CF, int GROUP>
__global__ void __launch_bounds__(256) hp_sddmm(
    const i64* __restrict__ row,    // (nnz,) target of each CSR entry
    const int* __restrict__ col,    // (nnz,) source of each CSR entry
    const i64* __restrict__ perm,   // (nnz,) COO id of each CSR entry
    const T* __restrict__ a,        // (num_dst, H * C)
    const T* __restrict__ b,        // (num_src, H * C)
    const T* __restrict__ scale,    // (E,) per-edge factor in COO order, or null
    T* __restrict__ out,            // (E, H)
    i64 nnz, i64 H, i64 C, i64 npw) {
  constexpr int GROUPS = 32 / GROUP;
  constexpr int TILE = GROUP * VEC * CF;
  const int lane = threadIdx.x & 31;
  const int gl = lane & (GROUP - 1);
  const int group = lane / GROUP;
  const i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const i64 tasks = nnz * H;
  const i64 begin = warp * npw;
  if (begin >= tasks) return;  // warp uniform
  const i64 end = min(begin + npw, tasks);
  const bool one_tile = C <= TILE;
  i64 cached = -1;  // a-row (dst * H + h) whose tile sits in areg
  T areg[CF][VEC];
  for (i64 base = begin; base < end; base += GROUPS) {
    const i64 t = base + group;
    const bool active = t < end;
    T acc = T(0);
    if (active) {
      const i64 j = t / H;
      const i64 h = t - j * H;
      const T* arow = a + (row[j] * H + h) * C;
      const T* brow = b + ((i64)col[j] * H + h) * C;
      const i64 akey = row[j] * H + h;
      for (i64 k0 = 0; k0 < C; k0 += TILE) {
        if (!one_tile || akey != cached) {
#pragma unroll
          for (int f = 0; f < CF; ++f) {
            const i64 k = k0 + ((i64)f * GROUP + gl) * VEC;
            if (k < C) gf_load<T, VEC>(arow + k, areg[f]);
          }
          cached = akey;
        }
#pragma unroll
        for (int f = 0; f < CF; ++f) {
          const i64 k = k0 + ((i64)f * GROUP + gl) * VEC;
          if (k < C) {
            T bv[VEC];
            gf_load<T, VEC>(brow + k, bv);
#pragma unroll
            for (int v = 0; v < VEC; ++v) acc += areg[f][v] * bv[v];
          }
        }
      }
    }
#pragma unroll
    for (int o = GROUP / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (active && gl == 0) {
      const i64 j = t / H;
      const i64 e = perm[j];
      out[e * H + (t - j * H)] = scale ? acc * scale[e] : acc;
    }
  }
}
