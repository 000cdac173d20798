// Fused Gather-ApplyEdge-Reduce (fuseGNN, Chen et al.): vertex-centric aggregation with the reduction on
// chip, no atomics, hence bitwise deterministic.
//
// gar_forward: one block per target row (CSR). The block's threads form SLOTS = blockDim / GROUP edge
// slots of GROUP lanes; slot s takes the s-th contiguous chunk of the row's edges, each lane covers VEC * CF
// columns of the tile (grid.y walks column tiles of GROUP * VEC * CF <= 256 columns, so the shared buffer
// never depends on K — the public code's K > 1024 overflow cannot happen). Slots are reduced in shared
// memory in slot order.
//
// gar_backward: one block per source row (CSC), the same slot layout. For each out-edge e = (s -> t) a
// slot reads grad[t] once and produces both the feature gradient (w_e * grad[t], reduced over slots into
// dx[s]) and the edge-weight gradient <grad[t], x[s]> (one group reduction per edge and head; x[s] stays in
// registers). Column tiles are walked inside the block, so every dot product is completed by the slot that
// owns the edge, in tile order: no atomics. With DX = false it is the SDDMM kernel.
#include "common.cuh"

template <typename T, int REDUCE, int WMODE, int VEC, int CF, int GROUP>
__global__ void __launch_bounds__(256) gar_forward(
    const i64* __restrict__ rowptr,  // (num_rows + 1,)
    const int* __restrict__ col,     // (nnz,) source of each CSR entry
    const T* __restrict__ val,       // (nnz,) or (nnz, H) in CSR order, or null
    const T* __restrict__ x,         // (num_src, K)
    T* __restrict__ out,             // (num_rows, K)
    i64* __restrict__ out_arg,       // (num_rows, K) or null
    i64 K, i64 H, i64 C) {
  constexpr int TILE = GROUP * VEC * CF;
  constexpr bool EXTREMUM = (REDUCE == GF_MAX || REDUCE == GF_MIN);
  extern __shared__ __align__(16) unsigned char gf_smem[];
  const int slots = blockDim.x / GROUP;
  T* red = reinterpret_cast<T*>(gf_smem);                // [slots][TILE]
  i64* red_arg = reinterpret_cast<i64*>(red + slots * TILE);  // [slots][TILE] (max/min only)
  const int slot = threadIdx.x / GROUP, gl = threadIdx.x & (GROUP - 1);
  const i64 row = blockIdx.x;
  const i64 beg = rowptr[row], end = rowptr[row + 1], deg = end - beg;
  const i64 chunk = (deg + slots - 1) / slots;
  const i64 jb = beg + min(deg, (i64)slot * chunk), je = beg + min(deg, (i64)(slot + 1) * chunk);
  const i64 k_base = (i64)blockIdx.y * TILE;

  T acc[CF][VEC];
  i64 arg[CF][VEC];
  gf_init_acc<T, REDUCE>(acc, arg);

#pragma unroll 4
  for (i64 j = jb; j < je; ++j) {
    const T* xr = x + (i64)col[j] * K;
    const T w = (WMODE == GF_W_EDGE) ? val[j] : T(1);
#pragma unroll
    for (int f = 0; f < CF; ++f) {
      const i64 k = k_base + (i64)(f * GROUP + gl) * VEC;
      if (k < K) {
        T v[VEC];
        gf_load<T, VEC>(xr + k, v);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const T wi = (WMODE == GF_W_HEAD) ? val[j * H + (k + i) / C] : w;
          const T m = wi * v[i];
          if (EXTREMUM) {
            gf_step<T, REDUCE>(m, j, acc[f][i], arg[f][i]);
          } else {
            acc[f][i] += m;
          }
        }
      }
    }
  }

#pragma unroll
  for (int f = 0; f < CF; ++f)
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const int t = (f * GROUP + gl) * VEC + i;
      red[slot * TILE + t] = acc[f][i];
      // no message of a non-empty chunk beat the identity: its first entry (gf_step); -1 still marks an empty one
      if (EXTREMUM) red_arg[slot * TILE + t] = (arg[f][i] < 0 && je > jb) ? jb : arg[f][i];
    }
  __syncthreads();
  for (int t = threadIdx.x; t < TILE; t += blockDim.x) {
    const i64 k = k_base + t;
    if (k >= K) continue;
    T a = gf_identity<T, REDUCE>();
    i64 ai = -1;
    for (int sl = 0; sl < slots; ++sl) {
      const T v = red[sl * TILE + t];
      if (EXTREMUM) {
        const i64 vi = red_arg[sl * TILE + t];
        if (vi >= 0) gf_take<T, REDUCE>(v, vi, a, ai);
      } else {
        a += v;
      }
    }
    if (REDUCE == GF_MEAN && deg > 0) a = a / T(deg);
    if (EXTREMUM && ai < 0) a = T(0);
    out[row * K + k] = a;
    if (EXTREMUM && out_arg) out_arg[row * K + k] = ai;
  }
}

template <typename T, int WMODE, int VEC, int CF, int GROUP, bool DX, bool DW, bool ARGMASK>
__global__ void __launch_bounds__(256) gar_backward(
    const i64* __restrict__ colptr,      // (num_src + 1,)
    const int* __restrict__ row,         // (nnz,) target of each CSC entry
    const i64* __restrict__ edge_perm,   // (nnz,) COO edge id of each CSC entry (where dw is written)
    const i64* __restrict__ edge_id,     // ARGMASK: (nnz,) CSR position of each CSC entry
    const i64* __restrict__ gather_arg,  // ARGMASK: (num_dst, K) forward argmax/argmin positions
    const T* __restrict__ val,           // (nnz,) or (nnz, H) in CSC order, or null
    const T* __restrict__ g,             // (num_dst, K) gradient of the output
    const T* __restrict__ x,             // (num_src, K) forward input (DW)
    T* __restrict__ dx,                  // (num_src, K)
    T* __restrict__ dw,                  // (E,) or (E, H) in COO order
    i64 K, i64 H, i64 C) {
  constexpr int TILE = GROUP * VEC * CF;
  extern __shared__ __align__(16) unsigned char gf_smem[];
  T* red = reinterpret_cast<T*>(gf_smem);  // [slots][TILE]
  const int slots = blockDim.x / GROUP;
  const int slot = threadIdx.x / GROUP, gl = threadIdx.x & (GROUP - 1);
  const unsigned mask = gf_group_mask<GROUP>();
  const i64 s = blockIdx.x;
  const i64 beg = colptr[s], end = colptr[s + 1], deg = end - beg;
  const i64 chunk = (deg + slots - 1) / slots;
  const i64 jb = beg + min(deg, (i64)slot * chunk), je = beg + min(deg, (i64)(slot + 1) * chunk);

  for (i64 k0 = 0; k0 < K; k0 += TILE) {
    T acc[CF][VEC];
    T xs[CF][VEC];
#pragma unroll
    for (int f = 0; f < CF; ++f) {
      const i64 k = k0 + (i64)(f * GROUP + gl) * VEC;
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        acc[f][i] = T(0);
        xs[f][i] = T(0);
      }
      if (DW && k < K) gf_load<T, VEC>(x + s * K + k, xs[f]);
    }
    for (i64 p = jb; p < je; ++p) {
      const i64 t = row[p];
      const T w = (WMODE == GF_W_EDGE) ? val[p] : T(1);
      const i64 e = ARGMASK ? edge_id[p] : 0;
      T gv[CF][VEC];
#pragma unroll
      for (int f = 0; f < CF; ++f) {
        const i64 k = k0 + (i64)(f * GROUP + gl) * VEC;
#pragma unroll
        for (int i = 0; i < VEC; ++i) gv[f][i] = T(0);
        if (k < K) {
          gf_load<T, VEC>(g + t * K + k, gv[f]);
          if (ARGMASK) {
#pragma unroll
            for (int i = 0; i < VEC; ++i)
              if (gather_arg[t * K + k + i] != e) gv[f][i] = T(0);
          }
          if (DX) {
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
              const T wi = (WMODE == GF_W_HEAD) ? val[p * H + (k + i) / C] : w;
              acc[f][i] += wi * gv[f][i];
            }
          }
        }
      }
      if (DW) {
        if (H == 1) {
          T part = T(0);
#pragma unroll
          for (int f = 0; f < CF; ++f)
#pragma unroll
            for (int i = 0; i < VEC; ++i) part += gv[f][i] * xs[f][i];
          part = gf_group_sum<T, GROUP>(part, mask);
          if (gl == 0) {
            const i64 o = edge_perm[p];
            dw[o] = (k0 == 0 ? T(0) : dw[o]) + part;
          }
        } else {
          const i64 h_lo = k0 / C, h_hi = (min(K, k0 + TILE) - 1) / C;
          for (i64 h = h_lo; h <= h_hi; ++h) {
            T part = T(0);
#pragma unroll
            for (int f = 0; f < CF; ++f) {
              const i64 k = k0 + (i64)(f * GROUP + gl) * VEC;
#pragma unroll
              for (int i = 0; i < VEC; ++i)
                if ((k + i) / C == h) part += gv[f][i] * xs[f][i];
            }
            part = gf_group_sum<T, GROUP>(part, mask);
            if (gl == 0) {
              const i64 o = edge_perm[p] * H + h;
              dw[o] = (h * C >= k0 ? T(0) : dw[o]) + part;
            }
          }
        }
      }
    }
    if (DX) {
#pragma unroll
      for (int f = 0; f < CF; ++f)
#pragma unroll
        for (int i = 0; i < VEC; ++i) red[slot * TILE + (f * GROUP + gl) * VEC + i] = acc[f][i];
      __syncthreads();
      for (int t = threadIdx.x; t < TILE; t += blockDim.x) {
        const i64 k = k0 + t;
        if (k >= K) continue;
        T a = T(0);
        for (int sl = 0; sl < slots; ++sl) a += red[sl * TILE + t];
        dx[s * K + k] = a;
      }
      __syncthreads();
    }
  }
}
