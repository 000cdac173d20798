#!/usr/bin/env bash
# One command for the GPU machine: install the carried wheels and the project, run the GPU test suite (every
# gpu-marked test), compute-sanitizer memcheck on a representative subset, and the benchmarks. Logs and JSON
# go to $OUT; a short table is printed last.
#
#   scripts/gpu_check.sh [full|quick]     (run from the repository root; carry .whl and .benchdata)
#   STEPS="tests memcheck spmm sddmm samplers graph" scripts/gpu_check.sh quick    (a subset; default: all)
#   STEPS=counters scripts/gpu_check.sh     (not in the default: the SpMM kernels' hardware counters under ncu)
#
# One-time setup on the development machine (both folders are git-ignored through .git/info/exclude):
#   echo /.whl/ >> .git/info/exclude && mkdir -p .whl && cp ../shared/wheels/py312/*.whl .whl/
#   echo /.benchdata/ >> .git/info/exclude && mkdir -p .benchdata && \
#     cp ../shared/datasets/mtx/*.mtx ../shared/datasets/musae/facebook/facebook_edges.csv .benchdata/
# Timeouts: TEST_TIMEOUT, MEMCHECK_TIMEOUT, BENCH_TIMEOUT (seconds); MEMCHECK_SUBSET (a pytest -k expression).
# GRAPHFUSE_COMMIT: the commit the benchmark records name, for a copy of the tree without up-to-date git metadata
# (the device tool's copy keeps a stale .git): GRAPHFUSE_COMMIT=<git rev-parse --short HEAD on the dev machine>.
#
# quick: the GPU suite stops at the first failures, the benchmark skips the three large RMAT graphs.
set -uo pipefail
MODE=${1:-full}
FINAL_OUT=${OUT:-/tmp/graphfuse_gpu_check}
# Results are written to a folder of the checkout (kept on a warm machine between calls) and copied to $OUT.
OUT=$PWD/.gpu_results
rm -rf "$OUT" && mkdir -p "$OUT" "$FINAL_OUT"
export PYTHONUNBUFFERED=1

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 || {
  cat "$OUT/install.log"; exit 1; }

{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, cupy; print('torch', torch.__version__, 'cupy', cupy.__version__, torch.cuda.get_device_name())"
} 2>&1 | tee "$OUT/device.txt"

STEPS=" ${STEPS:-tests memcheck spmm sddmm samplers graph} "
step() { [[ "$STEPS" == *" $1 "* ]]; }
TEST_RC=skipped MEMCHECK_RC=skipped BENCH_RC=skipped SDDMM_RC=skipped SAMPLERS_RC=skipped GRAPH_RC=skipped
COUNTERS_RC=skipped
MAXFAIL=$([ "$MODE" = quick ] && echo 10 || echo 50)
# The whole GPU suite took 470 s on an H100 (4,025 tests, session 24), 359 s and 380 s on H200s (4,201 and 4,206
# tests, sessions 27 and 28, one call on a fresh machine). Since session 28's half-precision tests it no longer fits
# one 600 s call: split it with PYTEST_ADDOPTS="-k 'not half_precision'" (4,231 tests, 488 s on a fresh H200,
# session 29) and then PYTEST_ADDOPTS="-k half_precision" (715 tests, 153 s on the warm machine). With the device
# tool's 600 s per call, run the steps in separate calls
# (STEPS=tests, STEPS=memcheck, STEPS=spmm, then the rest). The memcheck subset took 433 s on an H100 (428 tests)
# and 361 s on an H200 (446 tests, session 27), each run straight after the tests step on the same warm machine
# (CuPy's kernel cache filled); on a fresh machine, where every kernel compiles under the sanitizer, it had not
# finished after 250 s. Under memcheck, memory is held from test to test (see SUBSET below): session 29's subset with
# 184 half-precision tests added passed 376 tests (those 184 among them) without an access error, then ran out of
# the H200's memory (hp_sddmm on the big hub). The SpMM benchmark (STEPS=spmm, full) took about 180 s on an H200.
TEST_TIMEOUT=${TEST_TIMEOUT:-$([ "$MODE" = quick ] && echo 300 || echo 560)}
if step tests; then
  timeout "$TEST_TIMEOUT" python3 -m pytest -m gpu tests -q -p no:cacheprovider --maxfail="$MAXFAIL" \
    -W ignore::UserWarning 2>&1 | tee "$OUT/gpu_tests.log" | tail -n 40
  TEST_RC=${PIPESTATUS[0]}
fi

# The subset leaves out the 602-column tests on the 100,000-degree hub: under memcheck, about ten of them in a
# row exhaust the H100's 80 GB (memory held between tests, also without the caching allocator; not understood
# yet, the plain suite passes them), after which every later test fails to allocate.
SUBSET=${MEMCHECK_SUBSET:-'matches_reference and (unsorted or bipartite or no_edges or single_node or big_hub) and (41 or 602 or 7) and not (602 and big_hub)'}
if step memcheck; then
# No caching allocator under memcheck: every tensor is its own allocation, so a read past a tensor's end is
# caught even where the caching allocator would have put a neighbouring tensor (and memory is returned). Tests
# that capture CUDA graphs cannot run this way (cudaMalloc during capture: cudaErrorStreamCaptureUnsupported,
# which memcheck counts as errors; session 31), so the subset leaves them out.
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout "${MEMCHECK_TIMEOUT:-540}" compute-sanitizer --tool memcheck \
  --error-exitcode 97 --print-limit 20 \
  python3 -m pytest -m gpu tests/kernels/test_kernels_gpu.py tests/kernels/test_es_spmm_gpu.py \
  tests/graph/test_processing_gpu.py -q -p no:cacheprovider -x -k "$SUBSET or radix_path or (radix_sort and (4095 or 100003)) or (multihead and unsorted and gespmm) or (multihead and bipartite and gar) or (sddmm_and and unsorted) or (hp_sddmm and (unsorted or big_hub or no_edges) and (7 or 1500)) or (hp_spmm_every and (big_hub or hub) and 100) or (es_spmm_matches and hub and not big_hub and sum and 64) or (kept_set_is_exact and hub and random) or (split_rows_fold_again and (7 or 64 or 602) and (sum or max)) or (matches_reference and (unsorted or hub) and not big_hub and (32 or 64 or 256) and (gespmm or hpspmm))" \
  >"$OUT/memcheck.log" 2>&1
MEMCHECK_RC=$?
tail -n 8 "$OUT/memcheck.log"
fi

# bench NAME TIMEOUT SCRIPT ARGS...: run one benchmark script, log to $OUT/NAME.log, print its tail.
bench() {
  local name=$1 limit=$2
  shift 2
  timeout "$limit" python3 "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 4 "$OUT/$name.log"
  return $rc
}
QUICK=$([ "$MODE" = quick ] && echo 1 || echo "")
if step spmm; then
  bench bench "${BENCH_TIMEOUT:-420}" scripts/bench_spmm.py --data .benchdata --out "$OUT/spmm.json" \
    --md "$OUT/spmm.md" ${QUICK:+--quick --ks 32 64 128 256} $([ -z "$QUICK" ] && echo --reorder)
  BENCH_RC=$?
fi
if step sddmm; then
  bench sddmm "${SDDMM_TIMEOUT:-200}" scripts/bench_sddmm.py --data .benchdata --out "$OUT/sddmm.json" \
    --md "$OUT/sddmm.md" ${QUICK:+--quick}
  SDDMM_RC=$?
fi
if step samplers; then  # needs .gfdata (Facebook raw files) carried; see scripts/bench_samplers.py
  export GRAPHFUSE_DATA_MIRROR=${GRAPHFUSE_DATA_MIRROR:-$PWD/.gfdata} GRAPHFUSE_DATA_ROOT=${GRAPHFUSE_DATA_ROOT:-/tmp/gfroot}
  bench samplers "${SAMPLERS_TIMEOUT:-300}" scripts/bench_samplers.py --devices cuda --out "$OUT/samplers.json" \
    --md "$OUT/samplers.md" ${QUICK:+--samplers neighbor,saint_rw --no-norm --iters 20}
  SAMPLERS_RC=$?
fi
if step graph; then
  bench graph "${GRAPH_TIMEOUT:-300}" scripts/bench_graph_processing.py --data .benchdata \
    --out "$OUT/graph_processing.json" --md "$OUT/graph_processing.md" ${QUICK:+--quick}
  GRAPH_RC=$?
fi
if step counters; then  # ncu reads the counters of every profiled call; the report sums them per call
  timeout "${COUNTERS_TIMEOUT:-500}" ncu --clock-control none --profile-from-start off --csv \
    --metrics "$(python3 scripts/profile_spmm_counters.py --metrics)" python3 scripts/profile_spmm_counters.py \
    --run --data .benchdata --manifest "$OUT/spmm_counters_calls.json" >"$OUT/spmm_counters.csv" \
    2>"$OUT/spmm_counters.log" &&
    python3 scripts/profile_spmm_counters.py --report "$OUT/spmm_counters.csv" \
      --manifest "$OUT/spmm_counters_calls.json" --out "$OUT/spmm_counters.json" >>"$OUT/spmm_counters.log" 2>&1
  COUNTERS_RC=$?
  tail -n 4 "$OUT/spmm_counters.log"
fi

{
echo "== gpu_check ($MODE) on $(head -2 "$OUT/device.txt" | tail -1)"
echo "pytest -m gpu rc=$TEST_RC: $(tail -n 1 "$OUT/gpu_tests.log" 2>/dev/null)"
echo "memcheck rc=$MEMCHECK_RC: $(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/memcheck.log" 2>/dev/null | tail -n 2 | tr '\n' ' ')"
echo "bench rc=$BENCH_RC sddmm rc=$SDDMM_RC samplers rc=$SAMPLERS_RC graph rc=$GRAPH_RC counters rc=$COUNTERS_RC"
[ -f "$OUT/spmm.md" ] && sed -n '/## Summary/,$p' "$OUT/spmm.md"
[ -f "$OUT/sddmm.md" ] && sed -n "/## Summary/,\$p" "$OUT/sddmm.md"
[ -f "$OUT/samplers.md" ] && grep -E '^\| (rmat|facebook)' "$OUT/samplers.md"
[ -f "$OUT/graph_processing.md" ] && sed -n '/## Acceptance/,$p' "$OUT/graph_processing.md"
[ -f "$OUT/spmm_counters.md" ] && grep '^| ' "$OUT/spmm_counters.md"
} 2>&1 | tee "$OUT/summary.txt"
cp "$OUT"/* "$FINAL_OUT"/ 2>/dev/null || true
