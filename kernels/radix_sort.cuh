// Device pieces of the stable LSD radix sort (kernels/radix_sort.cu): one pass's ranking of a tile and the
// staging of its arrays in sorted order. Shared by radix_sort.cu's generic rs_scatter and by the graph-
// processing stage's last passes, which write their outputs straight from the staged tile.
#pragma once
#include "common.cuh"

#define RS_BLOCK 256
#define RS_ITEMS 16
#define RS_TILE (RS_BLOCK * RS_ITEMS)
#define RS_WARPS (RS_BLOCK / 32)
#define RS_MAX_BINS 256

struct RsShared {
  int cnt[RS_WARPS][RS_MAX_BINS];  // per warp and digit: count, then the warp's offset in the digit's run
  int start[RS_MAX_BINS];          // tile-local start of each digit's run
  int shift[RS_MAX_BINS];          // output position minus tile-local position, per digit
  int sum[RS_WARPS];
  int key[RS_TILE];                // the tile's keys in sorted order
  int val[RS_TILE];                // one staged array of the tile in sorted order
};

// Entry r of this thread: warp w takes the w-th slice of the tile, 32 consecutive entries per round.
__device__ __forceinline__ i64 rs_entry(int r) {
  return (i64)blockIdx.x * RS_TILE + (i64)(threadIdx.x >> 5) * (RS_TILE / RS_WARPS) + (threadIdx.x & 31) + r * 32;
}

// Ranks the block's tile for the pass over digit bits [shift, shift + log2(bins)). On return sh.key holds the
// tile's keys in sorted order, sh.shift the per-digit output offset, rank[r] the tile-local sorted position of
// the thread's entry r; returns the tile's entry count. Registers hold only keys and ranks (payloads are
// staged from global memory later). The scatter kernels ask for three blocks per SM (__launch_bounds__): on
// RMAT s21 (H100) three gave 22.5 ms for the whole stage, four 23.9, five 28.9 (register spills); two or no
// bound 22.4-22.5; 8,192-key tiles in dynamic shared memory 27.4; 2,048-3,584-key tiles 23.2-30.4.
template <typename KT>
__device__ int rs_rank_tile(const KT* __restrict__ keys, i64 n, int shift, int bins, const int* __restrict__ hist,
                            const int* __restrict__ ends, i64 tiles, RsShared& sh, int (&rank)[RS_ITEMS]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, mask = bins - 1;
  for (int j = threadIdx.x; j < RS_WARPS * RS_MAX_BINS; j += RS_BLOCK) (&sh.cnt[0][0])[j] = 0;
  const unsigned earlier = (1u << lane) - 1u;
  int key[RS_ITEMS];
#pragma unroll
  for (int r = 0; r < RS_ITEMS; ++r) key[r] = rs_entry(r) < n ? (int)keys[rs_entry(r)] : 0;
  __syncthreads();
#pragma unroll
  for (int r = 0; r < RS_ITEMS; ++r) {  // stable rank among the warp's earlier entries of the same digit
    const bool valid = rs_entry(r) < n;
    rank[r] = 0;
    const unsigned act = __ballot_sync(0xffffffffu, valid);
    if (valid) {
      const int d = (key[r] >> shift) & mask;
      const unsigned peers = __match_any_sync(act, d);
      const int before = sh.cnt[warp][d];
      __syncwarp(act);
      if (lane == 31 - __clz(peers)) sh.cnt[warp][d] = before + __popc(peers);
      __syncwarp(act);
      rank[r] = before + __popc(peers & earlier);
    }
  }
  __syncthreads();
  // Thread d: the warps' offsets inside digit d's run, then an exclusive scan of the runs over the digits.
  const int d = threadIdx.x;
  int total = 0;
  if (d < bins) {
    for (int w = 0; w < RS_WARPS; ++w) {
      const int c = sh.cnt[w][d];
      sh.cnt[w][d] = total;
      total += c;
    }
  }
  int incl = total;
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) sh.sum[warp] = incl;
  __syncthreads();
  int start = incl - total;
  for (int w = 0; w < warp; ++w) start += sh.sum[w];
  if (d < bins) {
    const i64 h = (i64)d * tiles + blockIdx.x;
    sh.start[d] = start;
    sh.shift[d] = ends[h] - hist[h] - start;
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < RS_ITEMS; ++r) {  // rank becomes the tile-local sorted position
    if (rs_entry(r) < n) {
      const int dr = (key[r] >> shift) & mask;
      rank[r] += sh.start[dr] + sh.cnt[warp][dr];
      sh.key[rank[r]] = key[r];
    }
  }
  __syncthreads();
  return (int)min((i64)RS_TILE, n - (i64)blockIdx.x * RS_TILE);
}

// Output position of the k-th entry of the sorted tile.
__device__ __forceinline__ int rs_out(const RsShared& sh, int k, int shift, int bins) {
  return sh.shift[(sh.key[k] >> shift) & (bins - 1)] + k;
}

// The tile's entries of `in` (the input position with IOTA) staged in sorted order in sh.val.
template <typename KT, bool IOTA>
__device__ void rs_stage(const KT* __restrict__ in, i64 n, const int (&rank)[RS_ITEMS], RsShared& sh) {
  __syncthreads();  // the previous staged array has been read
#pragma unroll
  for (int r = 0; r < RS_ITEMS; ++r) {
    const i64 i = rs_entry(r);
    if (i < n) sh.val[rank[r]] = IOTA ? (int)i : (int)in[i];
  }
  __syncthreads();
}
