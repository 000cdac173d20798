// Stable LSD radix sort of small non-negative int keys (node ids) with up to three int payloads: what the
// graph-processing stage needs on large graphs (sort ~10^8 edges by a ~21-bit node id, carrying the edge id and
// the other endpoint), where a general 64-bit sort would run 8 passes and a gather per payload afterwards.
//
// One pass over digit bits [shift, shift + log2(bins)) is two launches around a scan (kernels/radix_sort.py):
//   rs_hist     block per tile of RS_TILE keys: digit histogram in shared memory (one per warp), written
//               digit-major: hist[d * tiles + tile];
//   (scan)      torch.cumsum of hist: the inclusive end of each (digit, tile) run in the output;
//   rs_scatter  block per tile (radix_sort.cuh): stable rank of every entry among the tile's entries of its
//               digit (warp w takes the w-th slice of the tile, 32 consecutive entries per round: peers by
//               __match_any_sync, rank = earlier peers + the warp's running count of that digit), the warps'
//               counts turned into prefixes per digit; the tile is laid out in sorted order in shared memory
//               and each array stored from there (coalesced: consecutive threads, consecutive positions of
//               one run; storing from the ranks directly cost one memory transaction per entry).
// Stability: entries keep input order inside a digit (tile order, then warp slice, round, lane), which is what
// makes the passes compose into a sort by the whole key. Keys and payloads are int (the launcher checks the
// bounds); the first pass may read long long inputs and generate payload 0 as the input position (IOTA).
#include "radix_sort.cuh"

// A histogram per warp (RMAT s21 on the H100: 1.21 ms for the six passes against 1.65 with one per block, whose
// shared atomics on the skewed digits collided more); all keys loaded before any is counted.
template <typename KT>
__global__ void __launch_bounds__(RS_BLOCK) rs_hist(const KT* __restrict__ keys, i64 n, int shift, int bins,
                                                    int* __restrict__ hist, i64 tiles) {
  __shared__ int s_h[RS_WARPS][RS_MAX_BINS];
  for (int d = threadIdx.x; d < RS_WARPS * RS_MAX_BINS; d += RS_BLOCK) (&s_h[0][0])[d] = 0;
  __syncthreads();
  int* h = s_h[threadIdx.x >> 5];
  const i64 base = (i64)blockIdx.x * RS_TILE + threadIdx.x;
  KT key[RS_ITEMS];
#pragma unroll
  for (int r = 0; r < RS_ITEMS; ++r) key[r] = base + (i64)r * RS_BLOCK < n ? keys[base + (i64)r * RS_BLOCK] : -1;
#pragma unroll
  for (int r = 0; r < RS_ITEMS; ++r)
    if (key[r] >= 0) atomicAdd(&h[(int)(key[r] >> shift) & (bins - 1)], 1);
  __syncthreads();
  for (int d = threadIdx.x; d < bins; d += RS_BLOCK) {
    int c = 0;
    for (int w = 0; w < RS_WARPS; ++w) c += s_h[w][d];
    hist[(i64)d * tiles + blockIdx.x] = c;
  }
}

template <typename KT, bool IOTA>
__device__ __forceinline__ void rs_store(const KT* __restrict__ in, int* __restrict__ out, i64 n, int count,
                                         int shift, int bins, const int (&rank)[RS_ITEMS], RsShared& sh) {
  rs_stage<KT, IOTA>(in, n, rank, sh);
  for (int k = threadIdx.x; k < count; k += RS_BLOCK) out[rs_out(sh, k, shift, bins)] = sh.val[k];
}

// P payloads (1 to 3); with IOTA payload 0 is the input position and p0 is not read.
template <typename KT, int P, bool IOTA>
__global__ void __launch_bounds__(RS_BLOCK, 3) rs_scatter(
    const KT* __restrict__ keys, const KT* __restrict__ p0, const KT* __restrict__ p1, const KT* __restrict__ p2,
    i64 n, int shift, int bins, const int* __restrict__ hist, const int* __restrict__ ends, i64 tiles,
    int* __restrict__ keys_out, int* __restrict__ o0, int* __restrict__ o1, int* __restrict__ o2) {
  __shared__ RsShared sh;
  int rank[RS_ITEMS];
  const int count = rs_rank_tile<KT>(keys, n, shift, bins, hist, ends, tiles, sh, rank);
  for (int k = threadIdx.x; k < count; k += RS_BLOCK) keys_out[rs_out(sh, k, shift, bins)] = sh.key[k];
  rs_store<KT, IOTA>(p0, o0, n, count, shift, bins, rank, sh);
  if (P > 1) rs_store<KT, false>(p1, o1, n, count, shift, bins, rank, sh);
  if (P > 2) rs_store<KT, false>(p2, o2, n, count, shift, bins, rank, sh);
}
