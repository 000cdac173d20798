// Fused graph processing (fuseGNN, "Fused Graph Processing"): unsorted COO -> CSR (rows = targets) and CSC
// (columns = sources) by a stable counting sort, with PyG's remaining-self-loop insertion and the GCN
// (D^-1/2 (A + I) D^-1/2) or mean (D^-1 A) normalisation fused into the same passes.
//
// Pipeline (one launch each; see kernels/graph_processing.py):
//   gp_count    edge-parallel: in/out-degree histograms (int atomics, exact; the value each atomic returns is
//               kept as the edge's provisional slot in its row / column), weighted degrees (fp64 atomics),
//               the last self-loop of every node, self-loops per tile, maximum degrees, bad indices.
//   gp_scan     one block: exclusive scans of the counts (+1 per node for the inserted self-loops) into
//               rowptr / colptr, and of the per-tile self-loop counts (large graphs use torch.cumsum).
//   gp_scatter  edge-parallel: new COO id of each kept edge (order-preserving compaction: id = e - self-loops
//               before e), the new COO edge_index and values, and the scatter of a key (id, other endpoint)
//               into the provisional slot of its CSR row and CSC column (unordered inside a row); node
//               blocks emit the inserted loops and the per-node normalisation factors.
//   gp_sort     warp per row / column: sorts the keys of the segment (a row by id: ids are COO positions, so
//               sorted order is the stable order of the reference; a column by (target, id): CSR order) and
//               writes every output at its final position: perm, col/row (int64 and int32), the expanded
//               row/col index, values in CSR / CSC order.
//               Segments longer than WCAP (listed by gp_scatter) go to the kernel's first blocks: bitonic
//               sort of 4,096-key chunks in shared memory, then merge-path passes in global memory.
//   gp_transpose_perm  csr_to_csc[j] = position in CSR of the j-th CSC entry.
// Large graphs (kernels/graph_processing.py: RADIX_MIN_ENTRIES) skip the provisional slots, the out-degree
// count and the segment sort: gp_count (in-degrees), gp_node_factors, gp_scatter (COO and values only), then
// two stable radix sorts (radix_sort.cu) whose last passes, gp_last_csr / gp_last_csc, write the outputs
// from the sorted tile (and the column sizes, scanned into colptr).
//
// IDX is the workspace index type (int when the edge count fits, else long long). With int, a CSR sort key
// packs (id << 32 | source) in 64 bits, so the sort needs no gather of the endpoints; with long long the key
// is the id alone. A CSC key is (target << 32 | id) either way. All kernel integer arguments are 64-bit.
// Float atomics only accumulate weighted degrees, in double: values can differ from run to run in the last
// bits of a weighted fp64 graph only.
#include "common.cuh"
#include "radix_sort.cuh"

#define GP_BLOCK 256
#define GP_NORM_NONE 0
#define GP_NORM_GCN 1
#define GP_NORM_MEAN 2

// How gp_sort obtains the values of an entry (loop entries, id >= kept, always gather values[id]).
#define GP_V_NONE 0    // no values
#define GP_V_GATHER 1  // values[id] (weighted graphs)
#define GP_V_GCN 2     // node_val[src] * node_val[dst], node_val = deg^-1/2 (unweighted)
#define GP_V_MEAN 3    // node_val[dst], node_val = 1 / deg (unweighted)
#define GP_V_ONE 4     // 1 (unweighted, self-loops only)

__device__ __forceinline__ int gp_atomic_add(int* p, int v) { return atomicAdd(p, v); }
__device__ __forceinline__ long long gp_atomic_add(long long* p, long long v) {
  return (long long)atomicAdd(reinterpret_cast<unsigned long long*>(p), (unsigned long long)v);
}
__device__ __forceinline__ void gp_atomic_max(int* p, int v) { atomicMax(p, v); }
__device__ __forceinline__ void gp_atomic_max(long long* p, long long v) { atomicMax(p, v); }


// Block-wide sum and max of per-thread values (GP_BLOCK threads); the result is valid in thread 0.
__device__ __forceinline__ void gp_block_sum_max(long long& sum, long long& mx1, long long& mx2) {
  __shared__ long long s_sum[GP_BLOCK / 32], s_m1[GP_BLOCK / 32], s_m2[GP_BLOCK / 32];
  for (int o = 16; o > 0; o >>= 1) {
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
    mx1 = max(mx1, __shfl_xor_sync(0xffffffffu, mx1, o));
    mx2 = max(mx2, __shfl_xor_sync(0xffffffffu, mx2, o));
  }
  const int warp = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) {
    s_sum[warp] = sum;
    s_m1[warp] = mx1;
    s_m2[warp] = mx2;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < GP_BLOCK / 32; ++w) {
      sum += s_sum[w];
      mx1 = max(mx1, s_m1[w]);
      mx2 = max(mx2, s_m2[w]);
    }
  }
}

// ------------------------------------------------------------------------------------------ gp_count
// Tile of block b: edges b * GP_BLOCK * ITEMS + i * GP_BLOCK + threadIdx.x for i < ITEMS (gp_scatter uses
// the same tiling, so the per-tile self-loop counts line up).
// stats (unsigned long long): [0] self-loops removed, [1] max in-count, [2] max out-count (both 0 on the radix
// path, which counts in-degrees only), [3] edges out of range, [4] E - (first such edge), [5] long segments
// (gp_sort).
template <typename IDX, typename W, bool HAS_W, bool LOOPS, int NORM, int ITEMS>
__global__ void __launch_bounds__(GP_BLOCK) gp_count(
    const i64* __restrict__ src, const i64* __restrict__ dst, const W* __restrict__ w, i64 num_edges,
    IDX* __restrict__ cnt_in, IDX* __restrict__ cnt_out, IDX* __restrict__ loop_last,
    double* __restrict__ deg, IDX* __restrict__ tile_loops, unsigned long long* __restrict__ stats,
    i64 num_src, i64 num_dst, IDX* __restrict__ rank_in, IDX* __restrict__ rank_out) {
  const i64 base = (i64)blockIdx.x * GP_BLOCK * ITEMS + threadIdx.x;
  long long loops = 0, mx_in = 0, mx_out = 0;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const i64 e = base + (i64)i * GP_BLOCK;
    if (e >= num_edges) break;
    const i64 s = src[e], t = dst[e];
    if (s < 0 || s >= num_src || t < 0 || t >= num_dst) {  // reported by the launcher, never indexed
      atomicAdd(stats + 3, 1ull);
      atomicMax(stats + 4, (unsigned long long)(num_edges - e));
    } else if (LOOPS && s == t) {
      gp_atomic_max(loop_last + t, (IDX)(e + 1));
      ++loops;
    } else {
      if (rank_in) {  // provisional slots for gp_scatter, and the maximum degrees
        const IDX r_in = gp_atomic_add(cnt_in + t, (IDX)1), r_out = gp_atomic_add(cnt_out + s, (IDX)1);
        rank_in[e] = r_in;
        rank_out[e] = r_out;
        mx_in = max(mx_in, (long long)r_in + 1);
        mx_out = max(mx_out, (long long)r_out + 1);
      } else {  // radix path: in-degrees only (colptr comes from the sorted sources), result unused (a RED)
        gp_atomic_add(cnt_in + t, (IDX)1);
      }
      if (NORM != GP_NORM_NONE && HAS_W) atomicAdd(deg + t, (double)w[e]);
    }
  }
  gp_block_sum_max(loops, mx_in, mx_out);
  if (threadIdx.x == 0) {
    if (LOOPS) {
      tile_loops[blockIdx.x] = (IDX)loops;
      if (loops) atomicAdd(stats, (unsigned long long)loops);
    }
    if (mx_in) atomicMax(stats + 1, (unsigned long long)mx_in);
    if (mx_out) atomicMax(stats + 2, (unsigned long long)mx_out);
  }
}

// ------------------------------------------------------------------------------------------ gp_scan
// Exclusive scan of n counts (+ add each) into out[0..n] (out[0] = 0, out[n] = total) by one block of
// GP_SCAN_THREADS: chunks of 8 consecutive counts per thread, warp-shuffle scans, a carry between chunks.
#define GP_SCAN_THREADS 1024
#define GP_SCAN_ITEMS 8
template <typename IDX>
__device__ void gp_block_scan(const IDX* __restrict__ in, i64 n, long long add, i64* __restrict__ out) {
  __shared__ long long s_warp[GP_SCAN_THREADS / 32];
  __shared__ long long s_carry;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  if (t == 0) {
    out[0] = 0;
    s_carry = 0;
  }
  __syncthreads();
  for (i64 c = 0; c < n; c += (i64)GP_SCAN_THREADS * GP_SCAN_ITEMS) {
    const i64 b = c + (i64)t * GP_SCAN_ITEMS;
    long long v[GP_SCAN_ITEMS];
#pragma unroll
    for (int k = 0; k < GP_SCAN_ITEMS; ++k) v[k] = b + k < n ? (long long)in[b + k] + add : 0;
    long long sum = 0;
#pragma unroll
    for (int k = 0; k < GP_SCAN_ITEMS; ++k) {
      sum += v[k];
      v[k] = sum;
    }
    long long x = sum;  // inclusive scan of the thread totals within the warp
    for (int o = 1; o < 32; o <<= 1) {
      const long long y = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o) x += y;
    }
    if (lane == 31) s_warp[warp] = x;
    __syncthreads();
    if (warp == 0) {
      long long w = s_warp[lane];
      for (int o = 1; o < 32; o <<= 1) {
        const long long y = __shfl_up_sync(0xffffffffu, w, o);
        if (lane >= o) w += y;
      }
      s_warp[lane] = w;
    }
    __syncthreads();
    const long long base = s_carry + (warp > 0 ? s_warp[warp - 1] : 0) + x - sum;
#pragma unroll
    for (int k = 0; k < GP_SCAN_ITEMS; ++k)
      if (b + k < n) out[b + k + 1] = base + v[k];
    __syncthreads();
    if (t == GP_SCAN_THREADS - 1) s_carry = base + sum;
    __syncthreads();
  }
}

template <typename IDX>
__global__ void __launch_bounds__(GP_SCAN_THREADS) gp_scan(
    const IDX* __restrict__ cnt_in, i64 num_dst, i64* __restrict__ rowptr,
    const IDX* __restrict__ cnt_out, i64 num_src, i64* __restrict__ colptr,
    const IDX* __restrict__ tile_loops, i64 num_tiles, i64* __restrict__ tile_offset, i64 add_loops) {
  gp_block_scan<IDX>(cnt_in, num_dst, add_loops, rowptr);
  if (cnt_out) gp_block_scan<IDX>(cnt_out, num_src, add_loops, colptr);
  if (tile_offset) gp_block_scan<IDX>(tile_loops, num_tiles, 0, tile_offset);
}

// ------------------------------------------------------------------------------------------ gp_scatter
template <typename IDX, typename W, bool HAS_W, bool LOOPS>
__device__ __forceinline__ double gp_loop_weight(const IDX* loop_last, const W* w, i64 v, double fill) {
  const IDX last = loop_last[v];
  if (last > 0) return HAS_W ? (double)w[last - 1] : 1.0;
  return fill;
}

// Total (weighted) in-degree of v, self-loop included when LOOPS.
template <typename IDX, typename W, bool HAS_W, bool LOOPS>
__device__ __forceinline__ W gp_degree(const IDX* cnt_in, const double* deg, const IDX* loop_last,
                                       const W* w, i64 v, double fill) {
  double d = HAS_W ? deg[v] : (double)cnt_in[v];
  if (LOOPS) d += gp_loop_weight<IDX, W, HAS_W, LOOPS>(loop_last, w, v, fill);
  return (W)d;
}

// 0 where the degree is 0; NaN where it is negative (negative weights), as the reference and PyG give.
template <typename W> __device__ __forceinline__ W gp_inv_sqrt(W d) {
  return d != W(0) ? W(1) / sqrt(d) : W(0);
}

// w / deg of the mean normalisation: 0 where the weights into the target sum to 0 (NaN or inf otherwise).
template <typename W> __device__ __forceinline__ W gp_mean(W w, W d) { return d != W(0) ? w / d : W(0); }

// Per-node factor of the normalisation: deg^-1/2 (GCN) or 1/deg (mean); 0 where deg is 0.
template <typename IDX, typename W, bool HAS_W, bool LOOPS, int NORM>
__device__ __forceinline__ W gp_factor(const IDX* cnt_in, const double* deg, const IDX* loop_last, const W* w,
                                       i64 v, double fill) {
  const W d = gp_degree<IDX, W, HAS_W, LOOPS>(cnt_in, deg, loop_last, w, v, fill);
  return NORM == GP_NORM_GCN ? gp_inv_sqrt(d) : gp_mean(W(1), d);
}

// CSR sort keys: (id << 32 | source) when IDX is int (PACK), else the id alone. CSC sort keys:
// (target << 32 | id) in both modes (ids < 2^32, checked by the launcher), so a column sorts by target, then id.
template <typename IDX> struct GpKey { typedef unsigned long long type; };
template <> struct GpKey<long long> { typedef long long type; };

template <typename IDX>
__device__ __forceinline__ typename GpKey<IDX>::type gp_make_key(i64 id, i64 other) {
  if (sizeof(IDX) == 4) return (typename GpKey<IDX>::type)(((unsigned long long)id << 32) | (unsigned long long)other);
  return (typename GpKey<IDX>::type)id;
}

template <typename IDX>
__device__ __forceinline__ typename GpKey<IDX>::type gp_make_csc_key(i64 id, i64 target) {
  return (typename GpKey<IDX>::type)(((unsigned long long)target << 32) | (unsigned long long)id);
}

template <typename IDX> __device__ __forceinline__ i64 gp_key_id(typename GpKey<IDX>::type k) {
  return sizeof(IDX) == 4 ? (i64)((unsigned long long)k >> 32) : (i64)k;
}

// The other endpoint of an entry: from the key (PACK) or gathered from the processed COO.
template <typename IDX>
__device__ __forceinline__ i64 gp_key_other(typename GpKey<IDX>::type k, const i64* e_other) {
  return sizeof(IDX) == 4 ? (i64)((unsigned long long)k & 0xffffffffULL) : e_other[(i64)k];
}

template <typename T> __device__ __forceinline__ T gp_max_key();
template <> __device__ __forceinline__ unsigned long long gp_max_key<unsigned long long>() { return ~0ULL; }
template <> __device__ __forceinline__ long long gp_max_key<long long>() { return 0x7fffffffffffffffLL; }

// Blocks [0, num_tiles) scatter the edges of their tile; blocks [num_tiles, ...) handle the nodes: the
// inserted self-loops (LOOPS), node_val (deg^-1/2 for GCN, 1/deg for mean; null when not needed) and, when
// big_list is given, the list of CSR rows / CSC columns (segment ids as in gp_sort) longer than wcap.
// values: the new graph's edge weights in COO order (null when not produced).
template <typename IDX, typename W, bool HAS_W, bool LOOPS, int NORM, int ITEMS>
__global__ void __launch_bounds__(GP_BLOCK) gp_scatter(
    const i64* __restrict__ src, const i64* __restrict__ dst, const W* __restrict__ w, i64 num_edges,
    i64 num_dst, i64 num_tiles, const i64* __restrict__ rowptr, const i64* __restrict__ colptr,
    const IDX* __restrict__ rank_in, const IDX* __restrict__ rank_out, const IDX* __restrict__ cnt_in,
    const IDX* __restrict__ loop_last, const double* __restrict__ deg, const i64* __restrict__ tile_offset,
    i64 num_kept, double fill, i64* __restrict__ out_src, i64* __restrict__ out_dst, W* __restrict__ values,
    W* __restrict__ node_val, const W* __restrict__ factors, typename GpKey<IDX>::type* __restrict__ ws_csr,
    typename GpKey<IDX>::type* __restrict__ ws_csc, i64 num_src, IDX* __restrict__ big_list,
    unsigned long long* __restrict__ big_count, i64 wcap) {
  if ((i64)blockIdx.x >= num_tiles) {  // nodes (and, with big_list, the segments longer than wcap)
    const i64 v = ((i64)blockIdx.x - num_tiles) * GP_BLOCK + threadIdx.x;
    if (big_list && v < num_dst + num_src) {
      const i64 len = v < num_dst ? rowptr[v + 1] - rowptr[v] : colptr[v - num_dst + 1] - colptr[v - num_dst];
      if (len > wcap) big_list[atomicAdd(big_count, 1ull)] = (IDX)v;
    }
    if (v >= num_dst) return;
    if (node_val) node_val[v] = gp_factor<IDX, W, HAS_W, LOOPS, NORM>(cnt_in, deg, loop_last, w, v, fill);
    if (!LOOPS) return;
    const i64 id = num_kept + v;  // an inserted loop is always the last entry of row v and of column v
    out_src[id] = v;
    out_dst[id] = v;
    if (ws_csr) {  // provisional slots (the last of the row / column); gp_sort puts them in order
      ws_csr[rowptr[v + 1] - 1] = gp_make_key<IDX>(id, v);
      ws_csc[colptr[v + 1] - 1] = gp_make_csc_key<IDX>(id, v);
    }
    if (values) {
      const W lw = (W)gp_loop_weight<IDX, W, HAS_W, LOOPS>(loop_last, w, v, fill);
      if (NORM == GP_NORM_GCN) {
        const W dis = gp_factor<IDX, W, HAS_W, LOOPS, NORM>(cnt_in, deg, loop_last, w, v, fill);
        values[id] = dis * lw * dis;
      } else if (NORM == GP_NORM_MEAN) {
        values[id] = gp_mean(lw, gp_degree<IDX, W, HAS_W, LOOPS>(cnt_in, deg, loop_last, w, v, fill));
      } else {
        values[id] = lw;
      }
    }
    return;
  }
  __shared__ int s_warp[GP_BLOCK / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool compact = LOOPS && tile_offset != nullptr;  // some self-loops are dropped: shift the ids
  long long before = compact ? tile_offset[blockIdx.x] : 0;
  const i64 base = (i64)blockIdx.x * GP_BLOCK * ITEMS + threadIdx.x;
  for (int i = 0; i < ITEMS; ++i) {
    const i64 e = base + (i64)i * GP_BLOCK;
    const bool valid = e < num_edges;
    const i64 s = valid ? src[e] : 0, t = valid ? dst[e] : 0;
    const bool loop = LOOPS && valid && s == t;
    long long id = e;
    if (compact) {  // order-preserving compaction: self-loops earlier in the tile, in edge order
      const unsigned ballot = __ballot_sync(0xffffffffu, loop);
      if (lane == 0) s_warp[warp] = __popc(ballot);
      __syncthreads();
      long long off = before;
      int row_total = 0;
      for (int k = 0; k < GP_BLOCK / 32; ++k) {
        if (k < warp) off += s_warp[k];
        row_total += s_warp[k];
      }
      id = e - (off + __popc(ballot & ((1u << lane) - 1u)));
      before += row_total;
      __syncthreads();
    }
    if (!valid || loop) continue;
    if (ws_csr) {
      ws_csr[rowptr[t] + rank_in[e]] = gp_make_key<IDX>(id, s);
      ws_csc[colptr[s] + rank_out[e]] = gp_make_csc_key<IDX>(id, t);
    }
    if (LOOPS) {
      out_src[id] = s;
      out_dst[id] = t;
    }
    if (values) {
      const W we = HAS_W ? w[e] : W(1);
      if (factors && NORM != GP_NORM_NONE) {  // unweighted, factors ready (gp_node_factors): the same values
        values[id] = NORM == GP_NORM_GCN ? factors[s] * we * factors[t] : we * factors[t];
      } else if (NORM == GP_NORM_GCN) {
        const W ds = gp_factor<IDX, W, HAS_W, LOOPS, NORM>(cnt_in, deg, loop_last, w, s, fill);
        const W dt = gp_factor<IDX, W, HAS_W, LOOPS, NORM>(cnt_in, deg, loop_last, w, t, fill);
        values[id] = ds * we * dt;
      } else if (NORM == GP_NORM_MEAN) {
        values[id] = gp_mean(we, gp_degree<IDX, W, HAS_W, LOOPS>(cnt_in, deg, loop_last, w, t, fill));
      } else {
        values[id] = we;
      }
    }
  }
}

// ------------------------------------------------------------------------------------------ gp_sort
// Outputs of one sorted segment: segment q < num_dst is CSR row q, else CSC column q - num_dst.
template <typename IDX, typename W> struct GpOut {
  const i64* rowptr; const i64* colptr;
  const i64* e_src;                     // the processed graph's COO sources (int64 workspace: CSR keys hold ids only)
  const W* values;                      // COO-order values or null
  const W* node_val;                    // per-node factor (GP_V_GCN / GP_V_MEAN)
  i64* csr_perm; i64* csr_col; i64* csr_row; int* csr_col32; W* csr_val; IDX* inv_csr;
  i64* csc_perm; i64* csc_row; i64* csc_col; int* csc_row32; W* csc_val;
  i64 num_dst, num_src, num_kept;
};

#define GP_OUT_PARAMS                                                                                   \
  const i64 *__restrict__ rowptr, const i64 *__restrict__ colptr, const i64 *__restrict__ e_src,              \
      const W *__restrict__ values, const W *__restrict__ node_val,          \
      i64 *__restrict__ csr_perm, i64 *__restrict__ csr_col, i64 *__restrict__ csr_row,                     \
      int *__restrict__ csr_col32, W *__restrict__ csr_val, IDX *__restrict__ inv_csr,                     \
      i64 *__restrict__ csc_perm, i64 *__restrict__ csc_row, i64 *__restrict__ csc_col,                     \
      int *__restrict__ csc_row32, W *__restrict__ csc_val, i64 num_dst, i64 num_src, i64 num_kept
#define GP_OUT_INIT                                                                                     \
  const GpOut<IDX, W> o{rowptr,   colptr,   e_src,   values,    node_val,  csr_perm, csr_col,     \
                        csr_row,  csr_col32, csr_val, inv_csr, csc_perm, csc_row, csc_col,  csc_row32,   \
                        csc_val,  num_dst,  num_src, num_kept}

// Value of a kept (not inserted) unweighted entry src -> dst from the per-node factors (GCN, mean, or 1).
template <typename IDX, typename W, int VMODE>
__device__ __forceinline__ W gp_node_value(const GpOut<IDX, W>& o, i64 s, i64 t) {
  if (VMODE == GP_V_GCN) return o.node_val[s] * o.node_val[t];
  if (VMODE == GP_V_MEAN) return o.node_val[t];
  return W(1);
}

// Value of the entry (id: src -> dst) in the mode VMODE (see GP_V_*).
template <typename IDX, typename W, int VMODE>
__device__ __forceinline__ W gp_value(const GpOut<IDX, W>& o, i64 id, i64 s, i64 t) {
  if (VMODE == GP_V_GATHER || id >= o.num_kept) return o.values[id];
  return gp_node_value<IDX, W, VMODE>(o, s, t);
}

template <typename IDX, typename W, int VMODE>
__device__ __forceinline__ void gp_emit(const GpOut<IDX, W>& o, i64 q, i64 pos, typename GpKey<IDX>::type key) {
  if (q < o.num_dst) {
    const i64 id = gp_key_id<IDX>(key);
    const i64 c = gp_key_other<IDX>(key, o.e_src);
    o.csr_perm[pos] = id;
    o.csr_col[pos] = c;
    o.csr_col32[pos] = (int)c;
    o.csr_row[pos] = q;
    if (VMODE != GP_V_NONE) o.csr_val[pos] = gp_value<IDX, W, VMODE>(o, id, c, q);
    o.inv_csr[id] = (IDX)pos;
  } else {
    const i64 csc_id = (i64)((unsigned long long)key & 0xffffffffULL);
    const i64 r = (i64)((unsigned long long)key >> 32), c = q - o.num_dst;
    o.csc_perm[pos] = csc_id;
    o.csc_row[pos] = r;
    o.csc_row32[pos] = (int)r;
    o.csc_col[pos] = c;
    if (VMODE != GP_V_NONE) o.csc_val[pos] = gp_value<IDX, W, VMODE>(o, csc_id, c, r);
  }
}

template <typename IDX, typename W>
__device__ __forceinline__ void gp_segment(const GpOut<IDX, W>& o, i64 q, i64& begin, i64& len) {
  const i64* ptr = q < o.num_dst ? o.rowptr + q : o.colptr + (q - o.num_dst);
  begin = ptr[0];
  len = ptr[1] - ptr[0];
}

// Bitonic sort of buf[0, P) (P a power of two) by `threads` cooperating threads with index `me`.
template <typename K, bool BLOCK_SYNC>
__device__ __forceinline__ void gp_bitonic(K* buf, int P, int me, int threads) {
  for (int k = 2; k <= P; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = me; i < P; i += threads) {
        const int ixj = i ^ j;
        if (ixj > i) {
          const K a = buf[i], b = buf[ixj];
          if ((a > b) == ((i & k) == 0)) {
            buf[i] = b;
            buf[ixj] = a;
          }
        }
      }
      if (BLOCK_SYNC) __syncthreads(); else __syncwarp();
    }
  }
}

// Block of a long segment (len > WCAP): chunks of BCAP keys sorted in shared memory (written back in place),
// then merge-path passes ping-ponging between the segment and the same range of `tmp`, then every output
// written from the sorted keys.
template <typename IDX, typename W, int BCAP, int VMODE>
__device__ void gp_sort_long(const GpOut<IDX, W>& o, i64 q, typename GpKey<IDX>::type* seg,
                             typename GpKey<IDX>::type* other, typename GpKey<IDX>::type* s_buf, i64 begin,
                             i64 len) {
  typedef typename GpKey<IDX>::type K;
  const int me = threadIdx.x, threads = blockDim.x;
  for (i64 c0 = 0; c0 < len; c0 += BCAP) {
    const int n = (int)min((i64)BCAP, len - c0);
    int P = 64;
    while (P < n) P <<= 1;
    for (int i = me; i < P; i += threads) s_buf[i] = i < n ? seg[c0 + i] : gp_max_key<K>();
    __syncthreads();
    gp_bitonic<K, true>(s_buf, P, me, threads);
    for (int i = me; i < n; i += threads) seg[c0 + i] = s_buf[i];
    __syncthreads();
  }
  K* in = seg;
  K* out = other;
  for (i64 run = BCAP; run < len; run <<= 1) {
    const i64 per = (len + threads - 1) / threads;
    const i64 k0 = min(len, (i64)me * per), k1 = min(len, k0 + per);
    i64 k = k0;
    while (k < k1) {
      const i64 lo = (k / (2 * run)) * (2 * run);  // the pair of runs holding output k
      const K* A = in + lo;
      const i64 na = min(run, len - lo);
      const K* B = A + na;
      const i64 nb = min(run, len - lo - na);
      const i64 kk = k - lo;
      i64 l = max((i64)0, kk - nb), h = min(kk, na);  // merge path: i = entries taken from A
      while (l < h) {
        const i64 m = (l + h) >> 1;
        if (A[m] < B[kk - m - 1]) l = m + 1; else h = m;
      }
      i64 i = l, j = kk - l;
      const i64 stop = min(k1, lo + na + nb);
      for (; k < stop; ++k) {
        if (j >= nb || (i < na && A[i] < B[j])) out[k] = A[i++]; else out[k] = B[j++];
      }
    }
    __syncthreads();
    K* swap = in;
    in = out;
    out = swap;
  }
  for (i64 i = me; i < len; i += threads) gp_emit<IDX, W, VMODE>(o, q, begin + i, in[i]);
  __syncthreads();
}

// One launch for every segment. Blocks [0, big_blocks) take the long segments listed by gp_scatter
// (len > WCAP, block-cooperative, see gp_sort_long; `tmp` holds CSR segments at [0, E') and CSC segments at
// [E', 2E')). The other blocks run a warp per segment: up to 32 entries, ranks by comparison in registers;
// up to WCAP, a bitonic sort in the warp's slice of shared memory.
template <typename IDX, typename W, int WCAP, int VMODE>
__global__ void __launch_bounds__(GP_BLOCK) gp_sort(
    GP_OUT_PARAMS, typename GpKey<IDX>::type* __restrict__ ws_csr, typename GpKey<IDX>::type* __restrict__ ws_csc,
    typename GpKey<IDX>::type* __restrict__ tmp, i64 num_entries, const IDX* __restrict__ big_list,
    const unsigned long long* __restrict__ big_count, i64 big_blocks) {
  typedef typename GpKey<IDX>::type K;
  constexpr int WARPS = GP_BLOCK / 32;
  GP_OUT_INIT;
  __shared__ K s_mem[WARPS * WCAP];
  if ((i64)blockIdx.x < big_blocks) {
    const i64 n_big = (i64)*big_count;
    for (i64 b = blockIdx.x; b < n_big; b += big_blocks) {
      const i64 q = big_list[b];
      i64 begin, len;
      gp_segment(o, q, begin, len);
      const bool csr = q < o.num_dst;
      gp_sort_long<IDX, W, WARPS * WCAP, VMODE>(o, q, (csr ? ws_csr : ws_csc) + begin,
                                                tmp + (csr ? 0 : num_entries) + begin, s_mem, begin, len);
    }
    return;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  K* buf = s_mem + warp * WCAP;
  const i64 segments = o.num_dst + o.num_src;
  const i64 warps = ((i64)gridDim.x - big_blocks) * WARPS;
  for (i64 q = ((i64)blockIdx.x - big_blocks) * WARPS + warp; q < segments; q += warps) {
    i64 begin, len;
    gp_segment(o, q, begin, len);
    const K* ws = (q < o.num_dst ? ws_csr : ws_csc) + begin;
    if (len <= 32) {
      const K v = lane < len ? ws[lane] : gp_max_key<K>();
      int rank = 0;
      for (int j = 0; j < 32; ++j) {
        const K u = __shfl_sync(0xffffffffu, v, j);
        rank += (j < len && u < v) ? 1 : 0;
      }
      if (lane < len) gp_emit<IDX, W, VMODE>(o, q, begin + rank, v);
    } else if (len <= WCAP) {
      int P = 64;
      while (P < len) P <<= 1;
      for (int i = lane; i < P; i += 32) buf[i] = i < len ? ws[i] : gp_max_key<K>();
      __syncwarp();
      gp_bitonic<K, false>(buf, P, lane, 32);
      for (int i = lane; i < len; i += 32) gp_emit<IDX, W, VMODE>(o, q, begin + i, buf[i]);
      __syncwarp();
    }
  }
}

// csr_to_csc[j] = CSR position of the edge at CSC position j.
template <typename IDX>
__global__ void __launch_bounds__(GP_BLOCK) gp_transpose_perm(
    const i64* __restrict__ csc_perm, const IDX* __restrict__ inv_csr, i64* __restrict__ csr_to_csc, i64 n) {
  const i64 j = (i64)blockIdx.x * GP_BLOCK + threadIdx.x;
  if (j < n) csr_to_csc[j] = inv_csr[csc_perm[j]];
}

// ------------------------------------------------------------------------------------------ radix path
// Per-node factor (deg^-1/2 for GCN, 1/deg for mean) of an unweighted graph before gp_scatter, so that an
// edge reads two factors instead of both endpoints' counts and self-loop slots. (Templated like gp_scatter,
// ITEMS unused, so that both come from one set of flags.)
template <typename IDX, typename W, bool HAS_W, bool LOOPS, int NORM, int ITEMS>
__global__ void __launch_bounds__(GP_BLOCK) gp_node_factors(
    const IDX* __restrict__ cnt_in, const double* __restrict__ deg, const IDX* __restrict__ loop_last,
    const W* __restrict__ w, i64 num_dst, double fill, W* __restrict__ node_val) {
  const i64 v = (i64)blockIdx.x * GP_BLOCK + threadIdx.x;
  if (v >= num_dst) return;
  node_val[v] = gp_factor<IDX, W, HAS_W, LOOPS, NORM>(cnt_in, deg, loop_last, w, v, fill);
}

// Large graphs sort by radix instead (radix_sort.cu): the new COO by target with (id, source) carried gives
// the CSR; the CSR by source with (CSR position, target, id) carried gives the CSC and csr_to_csc at once
// (a CSC column is in CSR order). The last pass of each sort writes the outputs from its sorted tile.

// Value of the entry (source s -> target t) from the per-node factors; with LOOPS an entry s == t is the
// inserted loop of t (every original self-loop was dropped), id num_kept + t, whose value gp_scatter wrote.
template <typename IDX, typename W, int VMODE, bool LOOPS>
__device__ __forceinline__ W gp_factor_value(const GpOut<IDX, W>& o, i64 s, i64 t) {
  if (LOOPS && s == t) return o.values[o.num_kept + t];
  return gp_node_value<IDX, W, VMODE>(o, s, t);
}

// Last pass of the CSR sort (keys = targets; payloads id, source): writes perm, col, col32, row and values,
// and int32 copies of row and perm (row32, perm32: the CSC sort's first pass reads int32).
template <typename IDX, typename W, int VMODE, bool LOOPS>
__global__ void __launch_bounds__(RS_BLOCK, 3) gp_last_csr(
    GP_OUT_PARAMS, const int* __restrict__ keys, const int* __restrict__ ids, const int* __restrict__ srcs,
    int* __restrict__ row32, int* __restrict__ perm32, i64 n, int shift, int bins, const int* __restrict__ hist,
    const int* __restrict__ ends, i64 tiles) {
  GP_OUT_INIT;
  __shared__ RsShared sh;
  int rank[RS_ITEMS];
  const int count = rs_rank_tile<int>(keys, n, shift, bins, hist, ends, tiles, sh, rank);
  for (int k = threadIdx.x; k < count; k += RS_BLOCK) {
    const int j = rs_out(sh, k, shift, bins);
    o.csr_row[j] = sh.key[k];
    row32[j] = sh.key[k];
  }
  rs_stage<int, false>(ids, n, rank, sh);
  for (int k = threadIdx.x; k < count; k += RS_BLOCK) {
    const int j = rs_out(sh, k, shift, bins), id = sh.val[k];
    o.csr_perm[j] = id;
    perm32[j] = id;
    if (VMODE == GP_V_GATHER) o.csr_val[j] = o.values[id];
  }
  rs_stage<int, false>(srcs, n, rank, sh);
  for (int k = threadIdx.x; k < count; k += RS_BLOCK) {
    const int j = rs_out(sh, k, shift, bins), c = sh.val[k];
    o.csr_col[j] = c;
    o.csr_col32[j] = c;
    if (VMODE != GP_V_NONE && VMODE != GP_V_GATHER) o.csr_val[j] = gp_factor_value<IDX, W, VMODE, LOOPS>(o, c, sh.key[k]);
  }
}

// Last pass of the CSC sort (keys = sources; payloads CSR position, target, id): writes the CSC outputs,
// csr_to_csc, and the size of every column into col_size[c] (zeroed before; a scan makes it colptr). Inside a
// tile's run of one digit the keys are sorted and their positions consecutive, so a key's entries there are
// one segment [first, last]: its first entry subtracts `first`, its last adds `last + 1` (a neighbour in
// another run has another digit, so another key). Other tiles may hold more segments of the same key.
template <typename IDX, typename W, int VMODE, bool LOOPS>
__global__ void __launch_bounds__(RS_BLOCK, 3) gp_last_csc(
    GP_OUT_PARAMS, const int* __restrict__ keys, const int* __restrict__ pos, const int* __restrict__ rows,
    const int* __restrict__ ids, i64* __restrict__ csr_to_csc, unsigned long long* __restrict__ col_size, i64 n,
    int shift, int bins, const int* __restrict__ hist, const int* __restrict__ ends, i64 tiles) {
  GP_OUT_INIT;
  __shared__ RsShared sh;
  int rank[RS_ITEMS];
  const int count = rs_rank_tile<int>(keys, n, shift, bins, hist, ends, tiles, sh, rank);
  for (int k = threadIdx.x; k < count; k += RS_BLOCK) {
    const int j = rs_out(sh, k, shift, bins), c = sh.key[k];
    o.csc_col[j] = c;
    if (k == 0 || sh.key[k - 1] != c) atomicAdd(col_size + c, (unsigned long long)(-(long long)j));
    if (k == count - 1 || sh.key[k + 1] != c) atomicAdd(col_size + c, (unsigned long long)(j + 1));
  }
  rs_stage<int, false>(pos, n, rank, sh);
  for (int k = threadIdx.x; k < count; k += RS_BLOCK) csr_to_csc[rs_out(sh, k, shift, bins)] = sh.val[k];
  rs_stage<int, false>(rows, n, rank, sh);
  for (int k = threadIdx.x; k < count; k += RS_BLOCK) {
    const int j = rs_out(sh, k, shift, bins), r = sh.val[k];
    o.csc_row[j] = r;
    o.csc_row32[j] = r;
    if (VMODE != GP_V_NONE && VMODE != GP_V_GATHER) o.csc_val[j] = gp_factor_value<IDX, W, VMODE, LOOPS>(o, sh.key[k], r);
  }
  rs_stage<int, false>(ids, n, rank, sh);
  for (int k = threadIdx.x; k < count; k += RS_BLOCK) {
    const int j = rs_out(sh, k, shift, bins), id = sh.val[k];
    o.csc_perm[j] = id;
    if (VMODE == GP_V_GATHER) o.csc_val[j] = o.values[id];
  }
}
