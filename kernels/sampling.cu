// Neighbour sampling without replacement (samplers/neighbor.py): Floyd's algorithm, one thread per row.
//
// Row r draws k distinct offsets in [0, max(deg_r, k)). Step t uses the pre-drawn uniform u[r, t]:
// b = max(deg, k) - k + t, c = min(floor(u * (b + 1)), b); c is kept unless an earlier step kept it, else b
// is kept. The k offsets are then sorted ascending (insertion sort in place). The result equals, bit for bit,
// the PyTorch loop in samplers/neighbor.py given the same draws (same double products, same truncation), so
// a seeded run samples the same neighbours with or without this kernel. Work O(k^2) per row, in the output
// row itself (k is a fan-out: small).
#include "common.cuh"

__global__ void __launch_bounds__(256) floyd_picks(
    const i64* __restrict__ degree,  // (R,)
    const double* __restrict__ u,    // (R, k) uniform draws in [0, 1)
    i64* __restrict__ picks,         // (R, k) out: sorted distinct offsets
    i64 num_rows, i64 k) {
  const i64 r = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= num_rows) return;
  const i64 deg = degree[r];
  const i64 base = (deg > k ? deg : k) - k;
  const double* ur = u + r * k;
  i64* pr = picks + r * k;
  for (i64 t = 0; t < k; ++t) {
    const i64 b = base + t;
    i64 c = (i64)(ur[t] * (double)(b + 1));
    if (c > b) c = b;
    for (i64 s = 0; s < t; ++s) {
      if (pr[s] == c) {
        c = b;
        break;
      }
    }
    // insertion into the sorted prefix pr[0..t)
    i64 s = t;
    while (s > 0 && pr[s - 1] > c) {
      pr[s] = pr[s - 1];
      --s;
    }
    pr[s] = c;
  }
}
