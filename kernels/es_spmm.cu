// ES-SpMM (Lin et al.; paper 002): cache-first edge-sampled CSR aggregation for inference. Every target row
// keeps at most S = width of its entries, caches them in shared memory, then aggregates over the cache only.
// The kept entries, and the scaling, are exactly those of graphfuse.engine.edge_sampling (kept_entries and
// sampled_aggregate): with the same graph, width, strategy and seed, the kernel sums the same entries.
//
// Work mapping (es_spmm): one warp per target row r (8 warps per 256-thread block); grid.y walks column tiles
// of 32 * VEC * CF columns. Stage 1 (sampling, cache-first): the warp writes the (col, weight) pairs of the
// kept entries of r into its slice of dynamic shared memory: lanes share the slots (slot s -> lane s % 32),
// each slot's entry is loaded from global memory once. Stage 2 (aggregation): every lane walks the cached
// entries (broadcast reads of shared memory: all lanes read the same slot) and accumulates VEC-wide loads of
// the gathered x rows in CF column chunks (lane l owns columns k_base + (f * 32 + l) * VEC + [0, VEC)).
// Lanes whose columns lie past K (K < 32, tail tiles) only take part in stage 1 and in the warp votes.
//
// Kept entries of a row with degree d = rowptr[r + 1] - rowptr[r] (row offsets, CSR order):
//   d <= S: all d entries (offsets 0 .. d-1), whatever the strategy;
//   d >  S: S entries, slot s in [0, S) keeps offset
//     ES_BUCKET   s (the first S entries);
//     ES_FASTRAND (s * P) % d, P = 577 unless 577 divides d, else 1009 unless 1009 divides d, else 1597;
//     ES_RANDOM   Floyd's algorithm: step t (t = 0 .. S-1), b = d - S + t, c = min(floor(u_t * (b + 1)), b),
//                 keep c unless an earlier step kept it, else keep b; u_t = the splitmix64 uniform of
//                 (seed, r, t) (edge_sampling.hash_uniforms). Same set as sampling.cu's floyd_picks (unsorted
//                 here: the set is all that matters). The steps run one after the other; the membership test
//                 of each is warp-parallel (lanes scan the offsets kept so far, __any_sync).
// Scaling: sum * (d > S ? d / S : 1); mean = the sum of the kept entries / min(d, S); max/min over the kept
// entries; rows without entries give 0. No atomics, fixed order: bitwise deterministic.
//
// Dynamic shared memory (size from the launcher: WARPS * S * (4 + (STAGE_W ? sizeof(T) : 0)) bytes, at most
// 48 KiB for S <= 512), in two regions so that each is aligned for its type:
//   [0, WARPS * S * sizeof(T))               weights, warp w's S slots at w * S (only when STAGE_W);
//   [WARPS * S * sizeof(T) or 0, ... + WARPS * S * 4)  columns (int), warp w's S slots at w * S.
// STAGE_W = WEIGHTED || STRATEGY == ES_RANDOM: during Floyd's steps slot t holds the kept row offset itself,
// low 32 bits in the column slot and high 32 bits in the first 4 bytes of the weight slot; each slot is then
// turned in place into its (col, weight) pair by the lane that owns it (same slot, same lane: no race).
#include "common.cuh"

#define ES_BUCKET 0
#define ES_FASTRAND 1
#define ES_RANDOM 2

#define ES_WARPS 8  // warps (rows) per 256-thread block

// splitmix64 of (seed, row, slot) as a uniform double in [0, 1) with 53 random bits; bit for bit the
// float64 tensor of edge_sampling.hash_uniforms. seedmix = seed * 0x9E3779B97F4A7C15 mod 2^64 (host side).
__device__ __forceinline__ double es_uniform(unsigned long long seedmix, i64 row, i64 slot) {
  unsigned long long z = seedmix + (unsigned long long)row * 0xBF58476D1CE4E5B9ull +
                         (unsigned long long)slot * 0x94D049BB133111EBull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1.0p-53;  // exact: z >> 11 < 2^53
}

// FastRand's stride for a row of degree d: the first of 577, 1009, 1597 that does not divide d.
__device__ __forceinline__ i64 es_fastrand_prime(i64 d) {
  return d % 577 != 0 ? 577 : (d % 1009 != 0 ? 1009 : 1597);
}

template <typename T, int REDUCE, bool WEIGHTED, int STRATEGY, int VEC, int CF>
__global__ void __launch_bounds__(256) es_spmm(
    const i64* __restrict__ rowptr,  // (R + 1,) entry offsets of the target rows
    const int* __restrict__ col,     // (nnz,) gathered row of x for each entry
    const T* __restrict__ val,       // (nnz,) weights in CSR order (WEIGHTED only)
    const T* __restrict__ x,         // (num_cols, K)
    T* __restrict__ out,             // (R, K)
    i64 num_rows, i64 K,
    i64 S,                           // width: the most entries a row keeps (1 .. 512)
    i64 seedmix) {                   // ES_RANDOM: seed * 0x9E3779B97F4A7C15 mod 2^64, as signed bits
  constexpr int TILE = 32 * VEC * CF;
  constexpr bool EXTREMUM = (REDUCE == GF_MAX || REDUCE == GF_MIN);
  constexpr bool STAGE_W = WEIGHTED || STRATEGY == ES_RANDOM;
  constexpr unsigned FULL = 0xffffffffu;
  static_assert(sizeof(T) % 4 == 0, "the weight slots hold the high words of Floyd's offsets");

  extern __shared__ __align__(16) unsigned char es_smem[];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const i64 r = (i64)blockIdx.x * ES_WARPS + warp;
  if (r >= num_rows) return;  // the whole warp leaves together

  // This warp's slots (see the layout in the header comment).
  T* w_s = reinterpret_cast<T*>(es_smem) + (i64)warp * S;
  int* c_s = reinterpret_cast<int*>(es_smem + (STAGE_W ? (i64)ES_WARPS * S * (i64)sizeof(T) : 0)) +
             (i64)warp * S;

  const i64 beg = rowptr[r];
  const i64 d = rowptr[r + 1] - beg;
  const int n = (int)min(d, S);  // kept entries (warp-uniform)

  // ---- stage 1: sample and cache the kept entries -------------------------------------------------------
  if (STRATEGY == ES_RANDOM && d > S) {
    // Floyd: slot t ends up holding the kept offset (lo word in c_s[t], hi word in the first 4 bytes of
    // w_s[t]). The candidates c_t do not depend on earlier steps: lane l draws those of steps t0 + l.
    unsigned* lo = reinterpret_cast<unsigned*>(c_s);
    unsigned* hi = reinterpret_cast<unsigned*>(w_s);
    constexpr int HI = sizeof(T) / 4;  // stride of the hi words (one per weight slot)
    const i64 base = d - S;
    for (int t0 = 0; t0 < n; t0 += 32) {
      i64 my_c = 0;
      if (t0 + lane < n) {
        const i64 b = base + t0 + lane;
        const double u = es_uniform((unsigned long long)seedmix, r, t0 + lane);
        my_c = (i64)(u * (double)(b + 1));
        if (my_c > b) my_c = b;
      }
      const int steps = min(32, n - t0);
      for (int i = 0; i < steps; ++i) {  // warp-uniform trip count
        const int t = t0 + i;
        const i64 c = __shfl_sync(FULL, my_c, i);
        const unsigned c_lo = (unsigned)c, c_hi = (unsigned)((unsigned long long)c >> 32);
        bool hit = false;
        for (int s = lane; s < t; s += 32) hit |= (lo[s] == c_lo && hi[s * HI] == c_hi);
        const bool taken = __any_sync(FULL, hit);
        if (lane == 0) {
          const i64 kept = taken ? base + t : c;  // b is larger than every offset kept so far
          lo[t] = (unsigned)kept;
          hi[t * HI] = (unsigned)((unsigned long long)kept >> 32);
        }
        __syncwarp();  // slot t is visible to the next step's scan
      }
    }
    // Turn each slot's offset into its (col, weight) pair in place (each lane only touches its own slots).
    for (int s = lane; s < n; s += 32) {
      const i64 off = (i64)(((unsigned long long)hi[s * HI] << 32) | lo[s]);
      const int c = col[beg + off];
      const T w = WEIGHTED ? val[beg + off] : T(1);  // reads of slot s precede its writes (data dependence)
      c_s[s] = c;
      if (WEIGHTED) w_s[s] = w;
    }
  } else {
    // All d entries (d <= S), the first S (bucket), or FastRand's S offsets: every slot independent.
    const i64 prime = (STRATEGY == ES_FASTRAND && d > S) ? es_fastrand_prime(d) : 0;
    const bool narrow = d < (1ll << 32);  // s * prime < 512 * 1597: a 32-bit modulo suffices (warp-uniform)
    for (int s = lane; s < n; s += 32) {
      i64 off = s;
      if (prime) off = narrow ? (i64)((unsigned)(s * prime) % (unsigned)d) : ((i64)s * prime) % d;
      c_s[s] = col[beg + off];
      if (WEIGHTED) w_s[s] = val[beg + off];
    }
  }
  __syncwarp();  // the cache is complete before any lane reads it

  // ---- stage 2: aggregate over the cached entries -------------------------------------------------------
  const i64 k_base = (i64)blockIdx.y * TILE;
  T acc[CF][VEC];
#pragma unroll
  for (int f = 0; f < CF; ++f)
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[f][i] = gf_identity<T, REDUCE>();

#pragma unroll 4
  for (int j = 0; j < n; ++j) {
    const T* xr = x + (i64)c_s[j] * K;  // broadcast read: every lane reads slot j
    const T w = WEIGHTED ? w_s[j] : T(1);
#pragma unroll
    for (int f = 0; f < CF; ++f) {
      const i64 k = k_base + (i64)(f * 32 + lane) * VEC;
      if (k < K) {
        T v[VEC];
        gf_load<T, VEC>(xr + k, v);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const T m = WEIGHTED ? w * v[i] : v[i];
          if (EXTREMUM) {
            acc[f][i] = gf_pick<T, REDUCE>(acc[f][i], m);
          } else {
            acc[f][i] += m;
          }
        }
      }
    }
  }

  // sum: d / S for sampled rows (computed in double, as the reference's scale); mean: 1 / min(d, S).
  T scale = T(1);
  if (REDUCE == GF_SUM && d > S) scale = (T)((double)d / (double)S);
  if (REDUCE == GF_MEAN && n > 0) scale = T(1) / T(n);
  T* dst = out + r * K;
#pragma unroll
  for (int f = 0; f < CF; ++f) {
    const i64 k = k_base + (i64)(f * 32 + lane) * VEC;
    if (k < K) {
      T o[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) o[i] = EXTREMUM ? (n == 0 ? T(0) : acc[f][i]) : acc[f][i] * scale;
      gf_store<T, VEC>(dst + k, o);
    }
  }
}
