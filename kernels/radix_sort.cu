// Stable LSD radix sort of small non-negative int keys (node ids) with up to three int payloads: what the
// graph-processing stage needs on large graphs (sort ~10^8 edges by a ~21-bit node id, carrying the edge id and
// the other endpoint), where a general 64-bit sort would run 8 passes and a gather per payload afterwards.
//
// One pass over digit bits [shift, shift + log2(bins)) is two launches around a scan (kernels/radix_sort.py):
//   rs_hist     block per tile of RS_TILE keys: digit histogram in shared memory, written digit-major:
//               hist[d * tiles + tile];
//   (scan)      torch.cumsum of hist: the inclusive end of each (digit, tile) run in the output;
//   rs_scatter  block per tile: stable rank of every entry among the tile's entries of its digit (warp w takes
//               the w-th slice of the tile, 32 consecutive entries per round: peers by __match_any_sync, rank =
//               earlier peers + the warp's running count of that digit), the warps' counts turned into
//               prefixes per digit; the tile is laid out in sorted order in shared memory and each array
//               stored from there (coalesced: consecutive threads, consecutive positions of one run).
// Stability: entries keep input order inside a digit (tile order, then warp slice, round, lane), which is what
// makes the passes compose into a sort by the whole key. Keys and payloads are int (the launcher checks the
// bounds); the first pass may read long long inputs and generate payload 0 as the input position (IOTA).
#include "common.cuh"

#define RS_BLOCK 256
#define RS_ITEMS 16
#define RS_TILE (RS_BLOCK * RS_ITEMS)
#define RS_WARPS (RS_BLOCK / 32)
#define RS_MAX_BINS 256

template <typename KT>
__global__ void __launch_bounds__(RS_BLOCK) rs_hist(const KT* __restrict__ keys, i64 n, int shift, int bins,
                                                    int* __restrict__ hist, i64 tiles) {
  __shared__ int s_h[RS_MAX_BINS];
  for (int d = threadIdx.x; d < bins; d += RS_BLOCK) s_h[d] = 0;
  __syncthreads();
  const i64 base = (i64)blockIdx.x * RS_TILE + threadIdx.x;
#pragma unroll
  for (int r = 0; r < RS_ITEMS; ++r) {
    const i64 i = base + (i64)r * RS_BLOCK;
    if (i < n) atomicAdd(&s_h[(int)(keys[i] >> shift) & (bins - 1)], 1);
  }
  __syncthreads();
  for (int d = threadIdx.x; d < bins; d += RS_BLOCK) hist[(i64)d * tiles + blockIdx.x] = s_h[d];
}

// P payloads (1 to 3); with IOTA payload 0 is the input position and p0 is not read. After ranking, the tile
// is laid out in shared memory in sorted order and every array is written from there: consecutive threads
// store consecutive positions of one digit's run (coalesced), where storing from the ranks directly would
// cost one memory transaction per entry.
template <typename KT, int P, bool IOTA>
__global__ void __launch_bounds__(RS_BLOCK) rs_scatter(
    const KT* __restrict__ keys, const KT* __restrict__ p0, const KT* __restrict__ p1, const KT* __restrict__ p2,
    i64 n, int shift, int bins, const int* __restrict__ hist, const int* __restrict__ ends, i64 tiles,
    int* __restrict__ keys_out, int* __restrict__ o0, int* __restrict__ o1, int* __restrict__ o2) {
  __shared__ int s_cnt[RS_WARPS][RS_MAX_BINS];  // per warp and digit: count, then the warp's offset in the run
  __shared__ int s_start[RS_MAX_BINS];          // tile-local start of each digit's run
  __shared__ int s_shift[RS_MAX_BINS];          // output position minus tile-local position, per digit
  __shared__ int s_sum[RS_WARPS];
  __shared__ int s_key[RS_TILE];
  __shared__ int s_val[RS_TILE];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, mask = bins - 1;
  for (int j = threadIdx.x; j < RS_WARPS * RS_MAX_BINS; j += RS_BLOCK) (&s_cnt[0][0])[j] = 0;
  __syncthreads();
  const i64 base = (i64)blockIdx.x * RS_TILE + (i64)warp * (RS_TILE / RS_WARPS) + lane;
  const unsigned earlier = (1u << lane) - 1u;
  int key[RS_ITEMS], pay[P][RS_ITEMS], rank[RS_ITEMS];
#pragma unroll
  for (int r = 0; r < RS_ITEMS; ++r) {
    const i64 i = base + r * 32;
    const bool valid = i < n;
    key[r] = valid ? (int)keys[i] : 0;
    pay[0][r] = IOTA ? (int)i : (valid ? (int)p0[i] : 0);
    if (P > 1) pay[P > 1 ? 1 : 0][r] = valid ? (int)p1[i] : 0;
    if (P > 2) pay[P > 2 ? 2 : 0][r] = valid ? (int)p2[i] : 0;
    rank[r] = 0;
    const unsigned act = __ballot_sync(0xffffffffu, valid);
    if (valid) {
      const int d = (key[r] >> shift) & mask;
      const unsigned peers = __match_any_sync(act, d);
      const int before = s_cnt[warp][d];
      __syncwarp(act);
      if (lane == 31 - __clz(peers)) s_cnt[warp][d] = before + __popc(peers);
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
      const int c = s_cnt[w][d];
      s_cnt[w][d] = total;
      total += c;
    }
  }
  int incl = total;
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) s_sum[warp] = incl;
  __syncthreads();
  int start = incl - total;
  for (int w = 0; w < warp; ++w) start += s_sum[w];
  if (d < bins) {
    const i64 h = (i64)d * tiles + blockIdx.x;
    s_start[d] = start;
    s_shift[d] = ends[h] - hist[h] - start;
  }
  __syncthreads();
  const int count = (int)min((i64)RS_TILE, n - (i64)blockIdx.x * RS_TILE);
#pragma unroll
  for (int r = 0; r < RS_ITEMS; ++r) {  // rank becomes the tile-local sorted position
    if (base + r * 32 < n) {
      const int dr = (key[r] >> shift) & mask;
      rank[r] += s_start[dr] + s_cnt[warp][dr];
      s_key[rank[r]] = key[r];
    }
  }
  __syncthreads();
  for (int k = threadIdx.x; k < count; k += RS_BLOCK) {
    const int v = s_key[k];
    keys_out[s_shift[(v >> shift) & mask] + k] = v;
  }
#pragma unroll
  for (int q = 0; q < P; ++q) {
    int* out = q == 0 ? o0 : (q == 1 ? o1 : o2);
#pragma unroll
    for (int r = 0; r < RS_ITEMS; ++r)
      if (base + r * 32 < n) s_val[rank[r]] = pay[q][r];
    __syncthreads();
    for (int k = threadIdx.x; k < count; k += RS_BLOCK) out[s_shift[(s_key[k] >> shift) & mask] + k] = s_val[k];
    __syncthreads();
  }
}
