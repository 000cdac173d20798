// GE-SpMM (Huang et al., SC'20): CSR SpMM-like aggregation with Coalesced Row Caching (CRC) and
// Coarse-grained Warp Merging (CWM), generalised to sum / mean / max / min, edge weights per edge or per
// head, row splitting for load balance, and an optional "argmask" used by the max/min backward pass.
//
// Work mapping (gespmm_rows): a GROUP of lanes (32 = one warp; fewer, several rows per warp, for K <= 64; see
// spmm.config) owns one row segment (a whole row, or a piece of a split row; with a schedule, the segments are
// visited longest first by length class, so that the groups of a block finish together) and a column tile of
// GROUP * VEC * CF columns (grid.y walks the tiles). The group loads GROUP (col, val) pairs of its segment with
// one coalesced access (CRC; kept in registers and broadcast with shuffles), then every lane accumulates VEC-wide
// vectors of CF column chunks (CWM); UNCHECKED (max/min, when every tile is full) leaves out the per-column bound
// check. Rows longer than the schedule's segment length are split into segments whose partial results go to a
// workspace, folded in segment order (gespmm_fold) either in the same launch, by the group that finishes a split
// row's last segment (found with a per-row counter that it resets; for graphs with few split rows), or by
// gespmm_combine. No float atomics anywhere, hence bitwise deterministic. T: float, double, or the 16-bit
// gf_half / gf_bf16 of common.cuh, whose products and sums run in float (A, the accumulator type; partials too)
// and whose output is rounded once.
#include "common.cuh"

// Store a group's finished column tile (from k_base): acc, in T, at dst and, with TRACK, the entry positions at
// dst_arg.
template <typename T, bool TRACK, int VEC, int CF, int GROUP>
__device__ __forceinline__ void gespmm_store(const gf_acc_t<T> (&acc)[CF][VEC], const i64 (&arg)[CF][VEC],
                                             T* __restrict__ dst, i64* __restrict__ dst_arg, i64 k_base, int gl,
                                             i64 K) {
#pragma unroll
  for (int f = 0; f < CF; ++f) {
    const i64 k = k_base + (i64)(f * GROUP + gl) * VEC;
    if (k < K) {
      T v[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) v[i] = gf_from_acc<T>(acc[f][i]);
      gf_store<T, VEC>(dst + k, v);
      if (TRACK) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) dst_arg[k + i] = arg[f][i];
      }
    }
  }
}

// Fold one partial's column vector v (from workspace row p, column k) into acc/arg.
template <int REDUCE, bool TRACK, int VEC, typename A>
__device__ __forceinline__ void gespmm_fold_one(const A (&v)[VEC], const i64* __restrict__ part_arg, i64 p, i64 k,
                                                i64 K, A (&acc)[VEC], i64 (&arg)[VEC]) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    if (REDUCE == GF_MAX || REDUCE == GF_MIN) {
      const i64 pa = TRACK ? __ldcg(part_arg + p * K + k + i) : 0;
      if (pa >= 0) gf_take<A, REDUCE>(v[i], pa, acc[i], arg[i]);
    } else {
      acc[i] += v[i];
    }
  }
}

// dst[k] for this group's column tile (from k_base) = the reduce of partials p0 .. p0 + nseg - 1 of one
// split row (kept in the accumulator type A), in that order (mean divides by the row's degree; max/min keep the
// first best and its entry). CHUNK > 1 (gespmm_combine): the partials are read CHUNK at a time, every value load
// of a chunk before its reduce (the last chunk's predicated), so that a long fold waits for one L2 round trip per
// chunk rather than per partial (the column guard inside the loop, as for CHUNK = 1, made nvcc branch around each
// load); a max/min's entry positions (TRACK) are still read one partial at a time, in the reduce.
// CHUNK = 1 (the row kernel's fold): one partial at a time, which leaves the row kernel's registers as they were
// (a chunk of 4 took a sum from 40 to 48).
template <typename T, int REDUCE, bool TRACK, int VEC, int CF, int GROUP, int CHUNK, typename A = gf_acc_t<T>>
__device__ __forceinline__ void gespmm_fold(const A* __restrict__ part, const i64* __restrict__ part_arg, i64 p0,
                                            i64 nseg, i64 degree, T* __restrict__ dst, i64* __restrict__ dst_arg,
                                            i64 k_base, int gl, i64 K) {
  constexpr bool EXTREMUM = (REDUCE == GF_MAX || REDUCE == GF_MIN);
  A acc[CF][VEC];
  i64 arg[CF][VEC];
  gf_init_acc<A, REDUCE>(acc, arg);
  const i64 pe = p0 + nseg;
  if constexpr (CHUNK == 1) {
#pragma unroll 4
    for (i64 p = p0; p < pe; ++p) {
#pragma unroll
      for (int f = 0; f < CF; ++f) {
        const i64 k = k_base + (i64)(f * GROUP + gl) * VEC;
        if (k < K) {
          A v[VEC];
          gf_load_cg<A, VEC>(part + p * K + k, v);  // L2 reads: other SMs may have just written these
          gespmm_fold_one<REDUCE, TRACK, VEC>(v, part_arg, p, k, K, acc[f], arg[f]);
        }
      }
    }
  } else {
#pragma unroll
    for (int f = 0; f < CF; ++f) {
      const i64 k = k_base + (i64)(f * GROUP + gl) * VEC;
      if (k >= K) continue;
#pragma unroll 1
      for (i64 p = p0; p < pe; p += CHUNK) {
        A v[CHUNK][VEC];
#pragma unroll
        for (int u = 0; u < CHUNK; ++u)
          if (p + u < pe) gf_load_cg<A, VEC>(part + (p + u) * K + k, v[u]);
#pragma unroll
        for (int u = 0; u < CHUNK; ++u)
          if (p + u < pe) gespmm_fold_one<REDUCE, TRACK, VEC>(v[u], part_arg, p + u, k, K, acc[f], arg[f]);
      }
    }
  }
#pragma unroll
  for (int f = 0; f < CF; ++f)
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      if (REDUCE == GF_MEAN) acc[f][i] /= A(degree);
      if (EXTREMUM && arg[f][i] < 0) acc[f][i] = A(0);
    }
  gespmm_store<T, EXTREMUM && TRACK, VEC, CF, GROUP>(acc, arg, dst, dst_arg, k_base, gl, K);
}

// Blocks of 256 threads per SM that gespmm_rows asks ptxas to fit (0: its default, under which a sum takes 40
// registers, 6 blocks). By default a max/min without the argument took 53-54 registers (4 blocks) and a mean with
// several rows per warp 44 (5 blocks); on the H200's large RMAT graphs they ran up to 1.28x and 1.19x slower than
// the sum. Asked for 5 blocks, both take 48 registers, no spills, and ran within 1.15x and 1.06x of it (CUDA-graph
// replay, session 27). A mean with warp-wide groups keeps the default (asked for 5, it ran up to 1.08x slower), and
// so do a max/min with the argument (not measured) and double (its max spilled when asked for 5).
template <typename T, int REDUCE, int GROUP, bool TRACK>
constexpr int gespmm_min_blocks =
    sizeof(T) == 4 && (((REDUCE == GF_MAX || REDUCE == GF_MIN) && !TRACK) || (REDUCE == GF_MEAN && GROUP < 32)) ? 5 : 0;

template <typename T, int REDUCE, int WMODE, int VEC, int CF, int GROUP, bool ARGMASK, bool TRACK, bool UNCHECKED>
__global__ void __launch_bounds__(256, gespmm_min_blocks<T, REDUCE, GROUP, TRACK>) gespmm_rows(
    const i64* __restrict__ seg_ptr,     // stride 1: (S + 1,) the segments' entry offsets; 2: (S, 2) begin, end
    const i64* __restrict__ seg_row,     // (S,) row of each segment; null: segment s is row s
    const i64* __restrict__ seg_slot,    // (S,) >= 0: output row; < 0: workspace row -slot-1; null: = row
    const int* __restrict__ col,         // (nnz,) gathered row of x for each entry
    const T* __restrict__ val,           // (nnz,) or (nnz, H) weights in this format's order; null if none
    const i64* __restrict__ edge_id,     // ARGMASK: (nnz,) id compared with gather_arg
    const i64* __restrict__ gather_arg,  // ARGMASK: (num_cols, K) the id each gathered element counts for
    const T* __restrict__ x,             // (num_cols, K)
    T* __restrict__ out,                 // (num_rows, K)
    i64* __restrict__ out_arg,           // TRACK: (num_rows, K) argmax/argmin entry position
    gf_acc_t<T>* __restrict__ part,      // (P, K) partial results of split rows, in the accumulator type
    i64* __restrict__ part_arg,          // TRACK: (P, K)
    const i64* __restrict__ rowptr,      // (num_rows + 1,) whole-row offsets (split rows only)
    unsigned* __restrict__ done,         // (P * tiles,) counters, zero between launches; null: gespmm_combine folds
    i64 num_segs, i64 K, i64 H, i64 C, i64 seg_len, i64 seg_stride) {
  typedef gf_acc_t<T> A;  // T itself, float for float16/bfloat16
  constexpr int TILE = GROUP * VEC * CF;
  constexpr bool EXTREMUM = (REDUCE == GF_MAX || REDUCE == GF_MIN);
  // Gathers in flight per lane: a warp-wide group runs 16 of its 32 entries unrolled (faster than 8 on the
  // H100 at K = 41 to 602), a smaller group all of them up to 8.
  constexpr int UNROLL = GROUP == 32 ? 16 : 8;
  const int gl = threadIdx.x & (GROUP - 1);
  const i64 s = (i64)blockIdx.x * (blockDim.x / GROUP) + threadIdx.x / GROUP;
  if (s >= num_segs) return;  // the whole group leaves together
  const unsigned mask = gf_group_mask<GROUP>();
  const i64 beg = seg_ptr[s * seg_stride], end = seg_ptr[s * seg_stride + 1];
  const i64 k_base = (i64)blockIdx.y * TILE;

  A acc[CF][VEC];
  i64 arg[CF][VEC];
  gf_init_acc<A, REDUCE>(acc, arg);

  for (i64 j0 = beg; j0 < end; j0 += GROUP) {
    const i64 j = j0 + gl;
    int my_c = 0;
    A my_w = A(1);
    i64 my_e = 0;
    if (j < end) {  // CRC: one coalesced load of GROUP entries, broadcast below
      my_c = col[j];
      if (WMODE == GF_W_EDGE) my_w = gf_to_acc(val[j]);
      if (ARGMASK) my_e = edge_id[j];
    }
    const int n = (int)min((i64)GROUP, end - j0);
#pragma unroll UNROLL
    for (int t = 0; t < n; ++t) {
      const int c = __shfl_sync(mask, my_c, t, GROUP);
      A w = A(1);
      if (WMODE == GF_W_EDGE) w = __shfl_sync(mask, my_w, t, GROUP);
      i64 e = 0;
      if (ARGMASK) e = __shfl_sync(mask, my_e, t, GROUP);
      const T* xr = x + (i64)c * K;
#pragma unroll
      for (int f = 0; f < CF; ++f) {
        const i64 k = k_base + (i64)(f * GROUP + gl) * VEC;
        // The check made nvcc branch around each gather of a max/min, keeping one in flight (H100, K = 32 to 256:
        // 1.1-1.4x slower than unchecked); a sum's it predicates (unchecked, a sum took more registers and ran
        // up to 1.15x slower), hence UNCHECKED only for max/min.
        if (UNCHECKED || k < K) {
          T v[VEC];
          gf_load<T, VEC>(xr + k, v);
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            A wi = w;
            if (WMODE == GF_W_HEAD) wi = gf_to_acc(val[(j0 + t) * H + (k + i) / C]);
            A m = wi * gf_to_acc(v[i]);
            if (ARGMASK && gather_arg[(i64)c * K + k + i] != e) m = A(0);
            if (EXTREMUM && TRACK) {
              gf_step<A, REDUCE>(m, j0 + t, acc[f][i], arg[f][i]);
            } else if (EXTREMUM) {  // branch-free when no argument is needed (inference)
              acc[f][i] = gf_pick<A, REDUCE>(acc[f][i], m);
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
  // The destination row: the output's, or a split row's partial in the workspace, which keeps the accumulator
  // type A (a float16/bfloat16 partial stays float until the fold; dst then points at A values).
  T* dst;
  i64* dst_arg;
  if (slot >= 0) {
    dst = out + row * K;
    dst_arg = out_arg ? out_arg + row * K : nullptr;
  } else {
    dst = reinterpret_cast<T*>(part + (-slot - 1) * K);
    dst_arg = part_arg ? part_arg + (-slot - 1) * K : nullptr;
  }
  const A scale = (REDUCE == GF_MEAN && slot >= 0 && end > beg) ? A(1) / A(end - beg) : A(1);
#pragma unroll
  for (int f = 0; f < CF; ++f)
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      if (!EXTREMUM) acc[f][i] *= scale;
      else if (end == beg) acc[f][i] = A(0);  // empty row: 0
      else if (TRACK && arg[f][i] < 0) arg[f][i] = beg;  // no message beat the identity: the first (gf_step)
    }
  if (sizeof(T) == sizeof(A) || slot >= 0)
    gespmm_store<T, EXTREMUM && TRACK, VEC, CF, GROUP>(acc, arg, dst, dst_arg, k_base, gl, K);
  else
    gespmm_store<A, EXTREMUM && TRACK, VEC, CF, GROUP>(acc, arg, reinterpret_cast<A*>(dst), dst_arg, k_base, gl, K);
  // A split row of nseg segments, which wrote workspace rows p0 .. p0 + nseg - 1 (this one is segment
  // (beg - row_beg) / seg_len). With `done` (few split rows), the group whose increment completes the row's
  // counter (one per column tile) folds them, whichever group it is; without, gespmm_combine does.
  if (slot >= 0 || done == nullptr) return;
  const i64 row_beg = rowptr[row], degree = rowptr[row + 1] - row_beg;
  const i64 p0 = (-slot - 1) - (beg - row_beg) / seg_len;
  const i64 nseg = (degree + seg_len - 1) / seg_len;
  __syncwarp(mask);  // the group's partial stores happen before lane 0's release below
  int last = 0;
  if (gl == 0) {  // acq_rel: publishes the group's partial, and the last one sees every other group's
    unsigned* counter = done + p0 * gridDim.y + blockIdx.y;
    last = gf_atomic_add_acq_rel(counter, 1u) == (unsigned)(nseg - 1);
    if (last) *counter = 0u;  // every segment has counted: ready for the next launch
  }
  __syncwarp(mask);  // orders lane 0's acquire before the other lanes' reads of the partials
  if (__shfl_sync(mask, last, 0, GROUP))
    gespmm_fold<T, REDUCE, TRACK, VEC, CF, GROUP, 1>(part, part_arg, p0, nseg, degree, out + row * K,
                                                     TRACK ? out_arg + row * K : nullptr, k_base, gl, K);
}

// Fold the split rows after gespmm_rows left their partials (graphs with many split rows, where the in-kernel
// fold's counters cost more GPU time than this second launch). grid = (split rows, K / 128): a column per
// thread, so that the folds of a few thousand rows still fill the GPU.
template <typename T, int REDUCE, bool TRACK>
__global__ void __launch_bounds__(128) gespmm_combine(
    const i64* __restrict__ long_row,  // (L,) the split rows
    const i64* __restrict__ long_ptr,  // (L + 1,) their workspace rows
    const i64* __restrict__ rowptr,    // (num_rows + 1,)
    const gf_acc_t<T>* __restrict__ part, const i64* __restrict__ part_arg, T* __restrict__ out,
    i64* __restrict__ out_arg,
    i64 K) {
  const i64 r = blockIdx.x, row = long_row[r];
  // 8 partials at a time: on an H200, GE-SpMM on RMAT s15 at K = 256 (4,598 split rows, the longest of 161
  // segments) took 114 us eager against 120 with the column-guarded loop of CHUNK = 1 (chunks of 4: 121; 16: 119).
  gespmm_fold<T, REDUCE, TRACK, 1, 1, 32, 8>(part, part_arg, long_ptr[r], long_ptr[r + 1] - long_ptr[r],
                                             rowptr[row + 1] - rowptr[row], out + row * K,
                                             TRACK ? out_arg + row * K : nullptr,
                                             (i64)blockIdx.y * blockDim.x + (threadIdx.x & ~31), threadIdx.x & 31, K);
}

// Row schedule (spmm.row_schedule): rows longer than `segment` entries are cut into segments of `segment`
// entries; built on the device in two launches around one cumulative sum, so that a graph built per batch
// (sampled training) pays a handful of launches and one host sync for it, not the ~35 tensor operations of
// the same computation in PyTorch. Both passes loop with a grid stride.
//
// Visiting order of the segments: by length class, longest first, row order within a class. Class c holds the
// lengths whose bit length is that of `segment` minus c (so class 0 holds the split rows' full segments), the
// last class (classes - 1) the empty rows and whatever is shorter than the classes above reach.
__device__ __forceinline__ i64 gespmm_length_class(i64 length, i64 segment, i64 classes) {
  if (length == 0) return classes - 1;
  const i64 c = (64 - __clzll(segment)) - (64 - __clzll(length));
  return c < classes - 1 ? c : classes - 1;
}

// Pass 1, a thread per row: counts (4 + classes, rows): the row's segments, 1 if it is split, its partials
// (= its segments when split, else 0), 1 if it is longer than `threshold` (the schedule is needed at all only
// when some row is), then its segments in each length class (a split row's full segments in one, its last in
// the class of its length).
__global__ void gespmm_schedule_count(const i64* __restrict__ rowptr, i64* __restrict__ counts, i64 rows,
                                      i64 segment, i64 threshold, i64 classes) {
  for (i64 r = (i64)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (i64)gridDim.x * blockDim.x) {
    const i64 degree = rowptr[r + 1] - rowptr[r];
    const i64 nseg = degree > segment ? (degree + segment - 1) / segment : 1;
    counts[r] = nseg;
    counts[rows + r] = nseg > 1;
    counts[2 * rows + r] = nseg > 1 ? nseg : 0;
    counts[3 * rows + r] = degree > threshold;
    const i64 last = gespmm_length_class(degree - (nseg - 1) * segment, segment, classes);
    for (i64 c = 0; c < classes; ++c)  // a full segment's class is 0
      counts[(4 + c) * rows + r] = (c == 0 ? nseg - 1 : 0) + (c == last);
  }
}

// Pass 2, from the counts' inclusive sums along each row of `incl`: a thread per segment (grid-stride), which
// finds its row by binary search over the segment sums (every row has at least one segment, so they rise
// strictly), so that a hub's thousands of segments are written in parallel. Segment s, the j-th of row r,
// covers entries rowptr[r] + j * segment up to the next segment's start (the row's end for its last) and goes
// to output row r, or (split rows) to consecutive workspace rows -(p + 1). Its begin and end (seg_range), row
// and slot are written at its place in the visiting order (gespmm_length_class): after every segment of the
// classes before its own, of the rows before r in its class, and of row r's own before it there. A split row's
// first segment also writes the row's place in long_rows and its end in long_ptr. The sizes were read from the
// sums' last column, so every write lands inside the tensors allocated from them.
__global__ void gespmm_schedule_fill(const i64* __restrict__ rowptr, const i64* __restrict__ incl, i64 rows,
                                     i64 segment, i64 classes, i64* __restrict__ seg_range,
                                     i64* __restrict__ seg_row, i64* __restrict__ seg_slot,
                                     i64* __restrict__ long_rows, i64* __restrict__ long_ptr) {
  const i64 total = incl[rows - 1];
  for (i64 s = (i64)blockIdx.x * blockDim.x + threadIdx.x; s < total; s += (i64)gridDim.x * blockDim.x) {
    i64 lo = 0, hi = rows - 1;  // the row of segment s: the first r with incl[r] > s
    while (lo < hi) {
      const i64 mid = lo + (hi - lo) / 2;
      if (incl[mid] > s) hi = mid;
      else lo = mid + 1;
    }
    const i64 r = lo, upto = incl[r], nseg = upto - (r ? incl[r - 1] : 0), j = s - (upto - nseg);
    const bool split = nseg > 1;
    const i64 p0 = incl[2 * rows + r] - (split ? nseg : 0);
    const i64 beg = rowptr[r] + j * segment, end = j == nseg - 1 ? rowptr[r + 1] : beg + segment;
    const i64 last = gespmm_length_class(rowptr[r + 1] - rowptr[r] - (nseg - 1) * segment, segment, classes);
    const i64 c = j < nseg - 1 ? 0 : last;  // a full segment's class is 0
    // row r's segments in class c: its full ones (class 0), then its last (in its class)
    const i64 in_row = (c == 0 ? nseg - 1 : 0) + (c == last);
    i64 pos = incl[(4 + c) * rows + r] - in_row + (c == 0 ? j : 0);
    for (i64 k = 0; k < c; ++k) pos += incl[(4 + k) * rows + rows - 1];  // the classes before c, whole
    seg_range[2 * pos] = beg;
    seg_range[2 * pos + 1] = end;
    seg_row[pos] = r;
    seg_slot[pos] = split ? -(p0 + j + 1) : r;
    if (split && j == 0) {
      const i64 l = incl[rows + r] - 1;
      long_rows[l] = r;
      long_ptr[l + 1] = p0 + nseg;
    }
    if (s == 0) long_ptr[0] = 0;
  }
}
