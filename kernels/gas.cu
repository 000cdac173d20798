// Fused Gather-ApplyEdge-Scatter (fuseGNN, Chen et al.): edge-centric aggregation over an unsorted COO edge
// list with atomic adds (vector reductions on sm_90) into a zeroed output. Needs no CSR/CSC (cheap on graphs seen once), but the float
// atomics make results run-to-run nondeterministic.
//
// Work mapping: a block of 256 threads forms SLOTS = 256 / GROUP edge slots of GROUP lanes (GROUP = 32, or
// the next power of two >= K when K < 32: fuseGNN's "T / m edges per block"); a slot walks the edges
// e = slot, slot + SLOTS * gridDim.x, ... and its lanes cover the K columns VEC at a time. Edges
// [E, E + num_self) are virtual self loops i -> i with weight self_w[i] (1 when null): the self-loop term is
// fused instead of being materialised as extra edges.
#include "common.cuh"

// Source s, target d and weight w of edge e < num_edges + num_self: COO edge e (w = val[e] with GF_W_EDGE,
// else 1) when e < num_edges, else the virtual self loop of node e - num_edges (w = self_w[node], 1 when
// self_w is null). Returns whether e is a real edge.
template <typename T, int WMODE>
__device__ __forceinline__ bool gas_edge(i64 e, const i64* src, const i64* dst, const T* val, const T* self_w,
                                         i64 num_edges, i64& s, i64& d, T& w) {
  w = T(1);
  const bool real = e < num_edges;
  if (real) {
    s = src[e];
    d = dst[e];
    if (WMODE == GF_W_EDGE) w = val[e];
  } else {
    s = d = e - num_edges;
    if (self_w) w = self_w[s];
  }
  return real;
}

template <typename T, int WMODE, int VEC, int GROUP>
__global__ void __launch_bounds__(256) gas_forward(
    const i64* __restrict__ src, const i64* __restrict__ dst,  // (E,) each
    const T* __restrict__ val,                                  // (E,) or (E, H) in COO order, or null
    const T* __restrict__ x,                                    // (num_src, K)
    T* __restrict__ out,                                        // (num_dst, K), zeroed
    const T* __restrict__ self_w,                               // (num_self,) or null
    i64 num_edges, i64 num_self, i64 K, i64 H, i64 C) {
  const int slots = blockDim.x / GROUP;
  const int gl = threadIdx.x & (GROUP - 1);
  const i64 total = num_edges + num_self;
  for (i64 e = (i64)blockIdx.x * slots + threadIdx.x / GROUP; e < total; e += (i64)gridDim.x * slots) {
    i64 s, d;
    T w;
    const bool real = gas_edge<T, WMODE>(e, src, dst, val, self_w, num_edges, s, d, w);
    for (i64 k = (i64)gl * VEC; k < K; k += GROUP * VEC) {
      T v[VEC];
      gf_load<T, VEC>(x + s * K + k, v);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const T wi = (WMODE == GF_W_HEAD && real) ? val[e * H + (k + i) / C] : w;
        v[i] *= wi;
      }
      gf_red_add<T, VEC>(out + d * K + k, v);
    }
  }
}

// Backward: dx[src] += w * g[dst] (atomics into a zeroed dx) and dw[e] = <g[dst], x[src]> per head (a group
// reduction per edge and head; each edge is owned by one slot, so dw itself is deterministic).
// Requires C % VEC == 0 so that a vector never straddles two heads.
template <typename T, int WMODE, int VEC, int GROUP, bool DX, bool DW>
__global__ void __launch_bounds__(256) gas_backward(
    const i64* __restrict__ src, const i64* __restrict__ dst,
    const T* __restrict__ val,       // (E,) or (E, H) or null
    const T* __restrict__ g,         // (num_dst, K)
    const T* __restrict__ x,         // (num_src, K)
    T* __restrict__ dx,              // (num_src, K), zeroed
    T* __restrict__ dw,              // (E,) or (E, H)
    const T* __restrict__ self_w,    // (num_self,) or null
    i64 num_edges, i64 num_self, i64 K, i64 H, i64 C) {
  const int slots = blockDim.x / GROUP;
  const int gl = threadIdx.x & (GROUP - 1);
  const unsigned mask = gf_group_mask<GROUP>();
  const i64 total = num_edges + (DX ? num_self : 0);
  for (i64 e = (i64)blockIdx.x * slots + threadIdx.x / GROUP; e < total; e += (i64)gridDim.x * slots) {
    i64 s, d;
    T w;
    const bool real = gas_edge<T, WMODE>(e, src, dst, val, self_w, num_edges, s, d, w);
    for (i64 h = 0; h < H; ++h) {
      const T wh = (WMODE == GF_W_HEAD && real) ? val[e * H + h] : w;
      T part = T(0);
      for (i64 k = h * C + (i64)gl * VEC; k < (h + 1) * C; k += GROUP * VEC) {
        T gv[VEC];
        gf_load<T, VEC>(g + d * K + k, gv);
        if (DX) {
          T m[VEC];
#pragma unroll
          for (int i = 0; i < VEC; ++i) m[i] = wh * gv[i];
          gf_red_add<T, VEC>(dx + s * K + k, m);
        }
        if (DW && real) {
          T xv[VEC];
          gf_load<T, VEC>(x + s * K + k, xv);
#pragma unroll
          for (int i = 0; i < VEC; ++i) part += gv[i] * xv[i];
        }
      }
      if (DW && real) {
        part = gf_group_sum<T, GROUP>(part, mask);
        if (gl == 0) dw[e * H + h] = part;
      }
    }
  }
}
