"""SpMM benchmark suite: graphfuse kernels against cuSPARSE and PyG-style gather/scatter on the same GPU.

Graphs: cora.mtx, pubmed.mtx, Facebook (MUSAE), uniform 65,536 nodes / 655,360 edges, RMAT scale 18 with
~4M and ~57M edges drawn, RMAT scale 21 with ~63M drawn (a=0.57, b=c=0.19, symmetrised, deduplicated, ids
permuted; generated on the GPU), and two sampled-subgraph-sized RMAT graphs (8K and 32K nodes).
K ∈ {32, 41, 64, 128, 256, 602}. fp32 features, GCN-normalised edge values.

Contestants (same process, same inputs; every timing includes allocating/zeroing the output and any
per-call format work):
- cusparse: ``torch.sparse.mm`` on a ``torch.sparse_csr_tensor`` (int32 indices) built once per graph;
- pyg: ``out.index_add_(0, dst, x[src] * w)`` on a zeroed output (PyG's gather/scatter);
- gespmm / gespmm_mean / gespmm_max / gar / gas / hpspmm: ``graphfuse.aggregate(graph, x, reduce=...,
  backend=...)`` (the graph's CSR/CSC and permuted weights are cached per graph, as in training);
- es64: edge-sampled inference, ``graphfuse.aggregate(graph, x, sampling=EdgeSampling(64, "random"))``
  (at most 64 in-edges per target; an approximation, timed for speed only).

Cold contestants (format conversion inside every call, as a sampled batch pays it; the warm ones above keep
each graph's CSR, as full-graph training does), from the same COO edge_index and weights:
- cusparse_cold: a CSR built the PyTorch way (stable ``torch.sort`` by target, bincount + cumsum pointers, int32
  indices, gathered values) then ``torch.sparse.mm``; cusparse_cold_coo: ``torch.sparse_coo_tensor(...)
  .to_sparse_csr()`` then ``torch.sparse.mm``. A cold ratio is taken against the faster of the two per cell;
- gespmm_cold / hpspmm_cold: ``graphfuse.aggregate`` on a ``graphfuse.Graph`` built in the call (with
  ``validate=False``, as the samplers build their batches), so its CSR (HP-SpMM: hybrid form), permuted weights,
  row-split schedule and plan are built in the call too.

Timing: CUDA events around each call, median of ``--repeats`` (>= 20) runs after warm-up, taken in four
interleaved rounds over the contestants (host noise falls on all of them alike); graphs under ``SMALL_NNZ``
entries, whose tens-of-microseconds cells swing ±30-50% with the host, take ``SMALL_FACTOR`` times as many
(still cheap); the JSON also keeps each cell's quartiles (``quartiles_ms``) and each graph's sample count. Out of memory is recorded as null. Writes JSON (with device name and
versions) and a markdown table.

Usage: python scripts/bench_spmm.py --data DIR --out docs/benchmarks/spmm.json --md docs/benchmarks/spmm.md
"""

from __future__ import annotations

import argparse
import datetime
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch_geometric.utils import to_undirected

import graphfuse
from bench_graphs import ROUNDS, interleaved_samples, read_edge_csv, read_mtx, rmat, write_report
from graphfuse.engine import reference
from graphfuse.engine.edge_sampling import kept_entries

KS = [32, 41, 64, 128, 256, 602]
REPLAYED = ("cusparse", "gespmm", "hpspmm")
GE_KS = ("64", "128", "256")  # GE-SpMM's acceptance widths
HP_KS = ("32", "64", "128")  # HP-SpMM's acceptance widths
ES_WIDTH = 64
SMALL_NNZ = 1_000_000  # graphs below this many entries take SMALL_FACTOR times the eager samples
SMALL_FACTOR = 10


# ------------------------------------------------------------------------------------------ graphs
def uniform_graph(n: int, drawn: int, seed: int, device: str) -> tuple[torch.Tensor, int]:
    gen = torch.Generator(device=device).manual_seed(seed)
    src = torch.randint(0, n, (drawn,), generator=gen, device=device)
    dst = torch.randint(0, n, (drawn,), generator=gen, device=device)
    return to_undirected(torch.stack([src, dst]), num_nodes=n), n


def graph_specs(data: Path | None, quick: bool) -> list[tuple[str, Callable[[str], tuple[torch.Tensor, int]]]]:
    specs = []
    if data is not None:
        for name in ("cora", "pubmed"):
            if (data / f"{name}.mtx").exists():
                specs.append((f"{name}.mtx", lambda d, name=name: read_mtx(data / f"{name}.mtx", d)))
        if (data / "facebook_edges.csv").exists():
            specs.append(("facebook", lambda d: read_edge_csv(data / "facebook_edges.csv", d)))
    specs += [
        ("subgraph RMAT s13 (8K)", lambda d: rmat(13, 100_000, 3, d)),
        ("subgraph RMAT s15 (32K)", lambda d: rmat(15, 400_000, 4, d)),
        ("uniform 65K/655K", lambda d: uniform_graph(65_536, 655_360, 5, d)),
        ("RMAT s18 4M drawn", lambda d: rmat(18, 4_000_000, 6, d)),
    ]
    if not quick:
        specs += [
            ("RMAT s18 57M drawn", lambda d: rmat(18, 57_000_000, 7, d)),
            ("RMAT s21 63M drawn", lambda d: rmat(21, 63_000_000, 8, d)),
        ]
    return specs


# ------------------------------------------------------------------------------------------ timing
def _event_samples(fn: Callable[[], object], repeats: int) -> list[float]:
    """``repeats`` CUDA-event times of ``fn`` in ms, each call after a sync."""
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def time_ms(fn: Callable[[], object], repeats: int, warmup: int = 3) -> float | None:
    """Median CUDA-event time of ``fn`` in ms (None on out-of-memory)."""
    return interleaved_ms({"fn": fn}, repeats, rounds=1, warmup=warmup)["fn"]


def interleaved_ms(calls: dict[str, Callable[[], object]], repeats: int, rounds: int = ROUNDS,
                   warmup: int = 3) -> dict[str, float | None]:
    """Median CUDA-event time in ms of each call (None on out-of-memory); see :func:`interleaved_samples`."""
    samples = interleaved_samples(calls, repeats, _event_samples, rounds, warmup)
    return {name: None if t is None else statistics.median(t) for name, t in samples.items()}


def graph_replay_ms(fn: Callable[[], object], repeats: int) -> float | None:
    """Median time of ``fn`` captured once in a CUDA graph and replayed: the GPU time without the host's
    launch overhead (None when the call cannot be captured or runs out of memory)."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        ms = time_ms(graph.replay, repeats)
        del graph
        return ms
    except Exception:  # noqa: BLE001 - capture support differs between libraries; recorded as null
        torch.cuda.synchronize()
        return None


def host_overhead_us(fn: Callable[[], object], calls: int = 2000) -> float:
    """Wall-clock microseconds per call when ``calls`` calls are issued back to back (host-bound for small
    inputs: what a tiny graph costs per aggregation)."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written."""
    a = torch.empty(1 << 29, device="cuda")  # 2 GiB
    b = torch.empty_like(a)
    ms = time_ms(lambda: b.copy_(a), 10)
    return 2 * (1 << 29) * 4 / (ms * 1e-3) / 1e9


def gcn_weights(ei: torch.Tensor, n: int) -> torch.Tensor:
    deg = torch.bincount(ei[1], minlength=n).float().clamp(min=1)
    return deg[ei[0]].rsqrt() * deg[ei[1]].rsqrt()


def gcn_operands(ei: torch.Tensor, n: int) -> tuple[torch.Tensor, graphfuse.Graph, torch.Tensor]:
    """One graph's GCN-normalised weights ``w``, its :class:`graphfuse.Graph` (CSR built and cached) and cuSPARSE's
    operand: a CSR tensor with int32 indices and ``w`` in CSR order (the warm contestants' inputs)."""
    w = gcn_weights(ei, n)
    g = graphfuse.Graph(ei, num_nodes=n, edge_weight=w)
    csr = g.csr
    return w, g, torch.sparse_csr_tensor(csr.rowptr.int(), csr.col.int(), w[csr.perm], size=(n, n))


def sorted_csr(ei: torch.Tensor, w: torch.Tensor, n: int) -> torch.Tensor:
    """The cuSPARSE operand built from COO the PyTorch way: rows (targets) by a stable sort, bincount + cumsum
    pointers, int32 indices (as the warm operand), values gathered into CSR order."""
    src, dst = ei
    perm = torch.sort(dst, stable=True).indices
    rowptr = torch.zeros(n + 1, dtype=torch.int32, device=ei.device)
    torch.cumsum(torch.bincount(dst, minlength=n), 0, out=rowptr[1:])
    return torch.sparse_csr_tensor(rowptr, src[perm].int(), w[perm], size=(n, n))


def contestants(g: graphfuse.Graph, a: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> dict:
    """The timed calls on one graph and feature matrix: warm ones on the cached formats, then the cold ones
    (format conversion from the COO ``g.edge_index`` and ``w`` inside every call)."""
    n, k = x.shape
    src, dst = ei = g.edge_index

    def fresh() -> graphfuse.Graph:
        return graphfuse.Graph(ei, num_nodes=n, edge_weight=w, validate=False)

    return {
        "cusparse": lambda: torch.sparse.mm(a, x),
        "pyg": lambda: torch.zeros(n, k, device="cuda").index_add_(0, dst, x.index_select(0, src) * w.unsqueeze(1)),
        "gespmm": lambda: graphfuse.aggregate(g, x, reduce="sum", backend="gespmm"),
        "gespmm_mean": lambda: graphfuse.aggregate(g, x, reduce="mean", backend="gespmm"),
        "gespmm_max": lambda: graphfuse.aggregate(g, x, reduce="max", backend="gespmm"),
        "gar": lambda: graphfuse.aggregate(g, x, reduce="sum", backend="gar"),
        "gas": lambda: graphfuse.aggregate(g, x, reduce="sum", backend="gas"),
        "hpspmm": lambda: graphfuse.aggregate(g, x, reduce="sum", backend="hpspmm"),
        "es64": lambda: graphfuse.aggregate(g, x, reduce="sum", sampling=graphfuse.EdgeSampling(ES_WIDTH, "random")),
        "cusparse_cold": lambda: torch.sparse.mm(sorted_csr(ei, w, n), x),
        "cusparse_cold_coo": lambda: torch.sparse.mm(
            torch.sparse_coo_tensor(torch.stack([dst, src]), w, (n, n)).to_sparse_csr(), x),
        "gespmm_cold": lambda: graphfuse.aggregate(fresh(), x, reduce="sum", backend="gespmm"),
        "hpspmm_cold": lambda: graphfuse.aggregate(fresh(), x, reduce="sum", backend="hpspmm"),
    }


def output_problems(g: graphfuse.Graph, a: torch.Tensor, x: torch.Tensor, calls: dict,
                    order: torch.Tensor | None = None) -> dict[str, str]:
    """Each contestant's output checked before it is timed (a wrong answer is not a speed): sums against
    cuSPARSE within the float32 summation bound ``1e-4 · (|A| |x|) + 1e-6`` (GCN weights are positive, so
    ``|A| = A``), the mean against it divided by the in-degree, the max (to 1e-6 relative) against the
    reference backend on 256 random rows, ES-SpMM on the rows it computes exactly (degree <= S), the renumbered
    graph's output in the renumbered order. Returns the contestants that failed, with the worst excess (one out
    of memory is left to the timing, which records it)."""
    ref = torch.sparse.mm(a, x)
    bound = torch.sparse.mm(a, x.abs()).mul_(1e-4).add_(1e-6)
    deg = g.in_degree.clamp(min=1).to(x.dtype).unsqueeze(1)
    rows = torch.randperm(g.num_dst, generator=torch.Generator().manual_seed(0))[:256].to(x.device)
    local = torch.full((g.num_dst,), -1, dtype=torch.long, device=x.device)
    local[rows] = torch.arange(rows.numel(), device=x.device)
    src, dst = g.edge_index
    picked = local[dst] >= 0
    sub = graphfuse.Graph(torch.stack([src[picked], local[dst[picked]]]), num_src=g.num_src, num_dst=rows.numel())
    ref_max = reference.aggregate(sub, x, g.edge_weight[picked], "max")  # float32 products, as the kernel's
    exact = g.in_degree <= ES_WIDTH
    every = torch.arange(g.num_dst, device=x.device)
    problems = {}
    for name, fn in calls.items():
        try:
            out = fn()
        except torch.cuda.OutOfMemoryError:  # timed (and recorded) as out of memory
            torch.cuda.empty_cache()
            continue
        if name == "gespmm_max":
            excess = _excess(out[rows], ref_max, 1e-6 * ref_max.abs(), torch.arange(rows.numel(), device=x.device))
        elif name == "gespmm_mean":
            excess = _excess(out, ref, bound, every, scale=deg)
        elif name == "es64":
            excess = _excess(out, ref, bound, exact.nonzero().view(-1))
        elif name == "gespmm_reordered":
            excess = _excess(out, ref, bound, order)
        else:
            excess = _excess(out, ref, bound, every)
        if not (excess <= 0 and bool(torch.isfinite(out).all())):
            problems[name] = f"max excess over the bound {excess:.3e}"
        del out
    return problems


def _excess(out: torch.Tensor, want: torch.Tensor, tol: torch.Tensor, index: torch.Tensor,
            scale: torch.Tensor | None = None, chunk: int = 1 << 14) -> float:
    """max over ``i`` of ``|out[r] - want[r] / scale[r]| - tol[r] / scale[r]`` with ``r = index[i]`` (out's rows
    in order when ``out`` has one row per ``index`` entry, else its row ``r``), in float64, by chunks of rows:
    on the largest graphs a whole (N, K) float64 temporary does not fit beside the inputs. -1 when empty."""
    worst = -1.0
    for lo in range(0, index.numel(), chunk):
        r = index[lo:lo + chunk]
        got = out[lo:lo + chunk] if out.size(0) == index.numel() else out[r]
        w, t = want[r].double(), tol[r].double()
        if scale is not None:
            w, t = w / scale[r], t / scale[r]
        worst = max(worst, float(((got.double() - w).abs() - t).max()))
    return worst


def reordered(g: graphfuse.Graph) -> tuple[graphfuse.Graph, torch.Tensor, float]:
    """The graph renumbered by graph clustering, the order, and the one-off cost in seconds (clustering,
    renumbering and the renumbered graph's CSR/CSC)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    order = graphfuse.graph.cluster_order(g)
    gr = graphfuse.graph.permute_nodes(g, order)
    gr.csr, gr.csc  # noqa: B018 - built here so that their cost is counted
    torch.cuda.synchronize()
    return gr, order, time.perf_counter() - start


def bench_graph(name: str, ei: torch.Tensor, n: int, ks: list[int], repeats: int, bw: float,
                reorder: bool = False) -> dict:
    w, g, a = gcn_operands(ei, n)
    nnz = ei.size(1)
    deg = g.in_degree
    kept = kept_entries(g.csr, graphfuse.EdgeSampling(ES_WIDTH, "random"))[0].numel()
    record = {"name": name, "nodes": n, "nnz": nnz, "max_in_degree": int(deg.max()), "results": {},
              "es_kept_fraction": kept / max(nnz, 1),
              "eager_samples": repeats * (SMALL_FACTOR if nnz < SMALL_NNZ else 1)}
    if reorder:
        gr, order, record["reorder_s"] = reordered(g)
    for k in ks:
        x = torch.randn(n, k, device="cuda")
        calls = contestants(g, a, x, w)
        if reorder:
            xr = x[order]
            calls["gespmm_reordered"] = lambda: graphfuse.aggregate(gr, xr, reduce="sum", backend="gespmm")
        ref = torch.sparse.mm(a, x)
        got = graphfuse.aggregate(g, x, reduce="sum", backend="gespmm")
        err = float((got - ref).abs().max() / ref.abs().max().clamp(min=1e-30))
        ref = got = None
        problems = output_problems(g, a, x, calls, order if reorder else None)
        for cname, problem in problems.items():  # recorded, not timed
            print(f"  K={k} {cname}: WRONG OUTPUT ({problem}); left out of the timings", flush=True)
            calls.pop(cname)
        floor_bytes = nnz * 8 + (n + 1) * 8 + 2 * n * k * 4
        floor_ms = floor_bytes / (bw * 1e9) * 1e3
        row = {"max_rel_err_vs_cusparse": err, "output_problems": problems, "floor_ms": floor_ms, "ms": {},
               "gflops": {}, "floor_fraction": {}, "quartiles_ms": {}}
        for cname in problems:
            row["ms"][cname] = row["quartiles_ms"][cname] = row["gflops"][cname] = row["floor_fraction"][cname] = None
        for cname, samples in interleaved_samples(calls, record["eager_samples"], _event_samples).items():
            ms = None if samples is None else statistics.median(samples)
            row["ms"][cname] = ms
            row["quartiles_ms"][cname] = None if samples is None else statistics.quantiles(samples, n=4)
            row["gflops"][cname] = None if ms is None else 2 * nnz * k / (ms * 1e-3) / 1e9
            row["floor_fraction"][cname] = None if ms is None else floor_ms / ms
        row["graph_replay_ms"] = {c: graph_replay_ms(calls[c], repeats) if c in calls else None for c in REPLAYED}
        record["results"][str(k)] = row
        x = xr = calls = None
        torch.cuda.empty_cache()
    return record


def bench_gar_training(ei: torch.Tensor, n: int, k: int, repeats: int) -> dict:
    """Forward + backward with the edge-weight gradient (GAT-like): fused GAR vs PyG gather/scatter;
    plus a bitwise determinism check of GAR (and GE-SpMM) across two runs."""
    g = graphfuse.Graph(ei, num_nodes=n)
    src, dst = ei
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, k, device="cuda", generator=gen).requires_grad_(True)
    w = (torch.rand(ei.size(1), device="cuda", generator=gen) + 0.5).requires_grad_(True)
    grad = torch.randn(n, k, device="cuda", generator=gen)

    def ours(backend: str):
        def step():
            x.grad = w.grad = None
            graphfuse.aggregate(g, x, w, "sum", backend=backend).backward(grad)
        return step

    def pyg():
        x.grad = w.grad = None
        out = torch.zeros(n, k, device="cuda").index_add_(0, dst, x.index_select(0, src) * w.unsqueeze(1))
        out.backward(grad)

    result = {"K": k, "nnz": ei.size(1), "ms": {}}
    for name, fn in (("gar", ours("gar")), ("gespmm", ours("gespmm")), ("gas", ours("gas")), ("pyg", pyg)):
        result["ms"][name] = time_ms(fn, repeats, warmup=2)
        torch.cuda.empty_cache()
    deterministic = {}
    for backend in ("gar", "gespmm"):
        runs = []
        for _ in range(2):
            x.grad = w.grad = None
            out = graphfuse.aggregate(g, x, w, "sum", backend=backend)
            out.backward(grad)
            runs.append((out.detach().clone(), x.grad.clone(), w.grad.clone()))
        deterministic[backend] = all(torch.equal(a, b) for a, b in zip(*runs))
        del runs
    result["bitwise_deterministic"] = deterministic
    pyg_ms, gar_ms = result["ms"]["pyg"], result["ms"]["gar"]
    result["gar_speedup_vs_pyg"] = None if (pyg_ms is None or gar_ms is None) else pyg_ms / gar_ms
    return result


def overhead_report(data: Path | None) -> dict:
    """Per-call host cost on a small graph (Cora-sized, K=64): the public op (its plan cached on the graph), the
    launcher function ``spmm.gespmm`` (which builds a plan on every call, hence slower than the op), cuSPARSE."""
    from graphfuse.kernels import spmm as spmm_kernels

    ei, n = uniform_graph(2708, 5300, 9, "cuda")
    w, g, a = gcn_operands(ei, n)
    csr = g.csr
    x = torch.randn(n, 64, device="cuda")
    col32, wv = csr.col.int(), w[csr.perm].contiguous()
    return {
        "aggregate_gespmm": host_overhead_us(lambda: graphfuse.aggregate(g, x, reduce="sum", backend="gespmm")),
        "launcher_gespmm_plan_per_call": host_overhead_us(lambda: spmm_kernels.gespmm(csr.rowptr, col32, x, wv, validate=False)),
        "cusparse": host_overhead_us(lambda: torch.sparse.mm(a, x)),
        "empty_like": host_overhead_us(lambda: torch.empty_like(x)),
    }


# ------------------------------------------------------------------------------------------ report
def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def cusparse_ms(ms: dict, cold: bool = False) -> float | None:
    """cuSPARSE's time in one cell: warm, or cold (the faster of its two ways of building the CSR)."""
    if not cold:
        return ms.get("cusparse")
    return min((ms[c] for c in ("cusparse_cold", "cusparse_cold_coo") if ms.get(c)), default=None)


def speedup(ms: dict, name: str, cold: bool = False) -> float | None:
    """cuSPARSE time (warm, or cold: see :func:`cusparse_ms`) / ``name``'s time in one cell (None when either is
    missing)."""
    base = cusparse_ms(ms, cold)
    return base / ms[name] if (base and ms.get(name)) else None


def why_missing(row: dict, name: str, timing: str = "ms") -> str:
    """Why a cell of ``row`` has no ratio for ``name``: a contestant left out for a wrong output, or a time
    missing (out of memory; not capturable when replayed)."""
    if name in row.get("output_problems", {}) or "cusparse" in row.get("output_problems", {}):
        return "wrong output"
    return "not capturable or out of memory" if timing == "graph_replay_ms" else "out of memory"


def speedup_summary(graphs: list[dict], name: str, ks: tuple[str, ...], prefixes: tuple[str, ...] = ("",),
                    timing: str = "ms", cold: bool = False) -> dict:
    """``name`` against cuSPARSE (times under ``timing``: "ms" eager, "graph_replay_ms" replayed; the cold
    baseline with ``cold``) over the graphs whose name starts with one of ``prefixes``, at the widths ``ks``:
    geometric mean per K and over all those cells, the worst cell, the graphs and the number of cells covered,
    and the cells left out because a time is missing (see :func:`why_missing`)."""
    cells = [(speedup(gr["results"][k].get(timing, {}), name, cold), gr["name"], int(k), gr["results"][k])
             for gr in graphs if gr["name"].startswith(prefixes) for k in ks if k in gr["results"]]
    missing = [f"{graph} K={k} ({why_missing(row, name, timing)})" for ratio, graph, k, row in cells if not ratio]
    cells = [c[:3] for c in cells if c[0]]
    worst = min(cells, default=None)
    return {"geomean_per_k": {k: geomean([c[0] for c in cells if c[2] == int(k)]) for k in ks},
            "geomean": geomean([c[0] for c in cells]),
            "worst_cell": None if worst is None else {"speedup": worst[0], "graph": worst[1], "K": worst[2]},
            "graphs": list(dict.fromkeys(c[1] for c in cells)), "cells": len(cells), "missing": missing}


def summarise(graphs: list[dict]) -> dict:
    ge = speedup_summary(graphs, "gespmm", GE_KS)
    summary: dict = {"geomean_speedup_vs_cusparse": ge["geomean_per_k"], "worst_cell": ge["worst_cell"],
                     "cells": ge["cells"], "missing": ge["missing"], "mean_over_sum": [], "max_over_sum": []}
    replay = speedup_summary(graphs, "gespmm", GE_KS, timing="graph_replay_ms")
    summary["graph_replay_geomean_speedup_vs_cusparse"] = replay["geomean_per_k"]
    summary["graph_replay_cells"], summary["graph_replay_missing"] = replay["cells"], replay["missing"]
    summary["hpspmm"] = speedup_summary(graphs, "hpspmm", HP_KS, prefixes=("subgraph", "RMAT"))
    summary["hpspmm_graph_replay"] = speedup_summary(graphs, "hpspmm", HP_KS, prefixes=("subgraph", "RMAT"),
                                                     timing="graph_replay_ms")
    summary["cold"] = {"gespmm": speedup_summary(graphs, "gespmm_cold", GE_KS, cold=True),
                       "hpspmm": speedup_summary(graphs, "hpspmm_cold", HP_KS, prefixes=("subgraph", "RMAT"),
                                                 cold=True)}
    summary["es"] = {gr["name"]: {k: speedup(row["ms"], "es64") for k, row in gr["results"].items()}
                     for gr in graphs if gr["name"].startswith("RMAT s18 57M")}
    summary["es_kept_fraction"] = {gr["name"]: gr.get("es_kept_fraction") for gr in graphs
                                   if gr["name"].startswith("RMAT s18 57M")}
    cells = [gr["results"][k]["ms"] for gr in graphs for k in gr["results"]]
    for key, name in (("mean_over_sum", "gespmm_mean"), ("max_over_sum", "gespmm_max")):
        vals = [ms[name] / ms["gespmm"] for ms in cells if ms.get("gespmm") and ms.get(name)]
        summary[key] = {"max": max(vals), "geomean": geomean(vals), "cells": len(vals),
                        "of": len(cells)} if vals else None
    return summary


def fmt(v: float | None, digits: int = 3) -> str:
    """A time (None: out of memory) with ``digits`` decimals."""
    return "OOM" if v is None else f"{v:.{digits}f}"


def fmt_ratio(v: float | None) -> str:
    """A ratio to two decimals, "–" when a time it needs is missing."""
    return "–" if v is None else f"{v:.2f}"


def fmt_ms(row: dict, name: str, timing: str = "ms") -> str:
    """``name``'s time in a table cell: WRONG for a contestant left out for its output, OOM for one that ran out
    of memory (or, replayed, could not be captured)."""
    if name in row.get("output_problems", {}):
        return "WRONG"
    return fmt(row.get(timing, {}).get(name))


def ratio_lines(label: str, summ: dict) -> list[str]:
    """One summary line for a :func:`speedup_summary` (none when it has no cell)."""
    if not summ.get("geomean"):
        return []
    per_k = ", ".join(f"K={k} {fmt_ratio(v)}x" for k, v in summ["geomean_per_k"].items())
    w = summ["worst_cell"]
    left_out = f"; left out: {', '.join(summ['missing'])}" if summ.get("missing") else ""
    return [f"- {label} ({', '.join(summ['graphs'])}; {summ['cells']} cells), geometric mean {summ['geomean']:.2f}x "
            f"({per_k}); worst cell {w['speedup']:.2f}x on {w['graph']} at K={w['K']}{left_out}"]


def cold_lines(report: dict) -> list[str]:
    """The markdown section of the cold timings (format conversion inside every call)."""
    lines = ["", "## Format conversion included (cold)", "",
             "Every call builds its format from the COO edge_index: cuSPARSE from a sorted CSR (`sort`) or "
             "`to_sparse_csr` (`coo`), graphfuse from a `Graph` made in the call (CSR or hybrid form, permuted "
             "weights, row-split schedule and plan). `x` = the faster cuSPARSE way / ours. The warm table above "
             "keeps each graph's formats, as full-graph training does; a sampled batch pays this.", "",
             "| graph | K | cuSPARSE sort | cuSPARSE coo | GE-SpMM | x | HP-SpMM | x |", "|---|---|---|---|---|---|---|---|"]
    for gr in report["graphs"]:
        for k, row in gr["results"].items():
            ms = row["ms"]
            if "gespmm_cold" not in ms:
                continue
            lines.append(f"| {gr['name']} | {k} | {fmt_ms(row, 'cusparse_cold')} | {fmt_ms(row, 'cusparse_cold_coo')} | "
                         f"{fmt_ms(row, 'gespmm_cold')} | {fmt_ratio(speedup(ms, 'gespmm_cold', cold=True))} | "
                         f"{fmt_ms(row, 'hpspmm_cold')} | {fmt_ratio(speedup(ms, 'hpspmm_cold', cold=True))} |")
    cold = report["summary"]["cold"]
    return [*lines, "", *ratio_lines("GE-SpMM cold vs cuSPARSE cold", cold["gespmm"]),
            *ratio_lines("HP-SpMM cold vs cuSPARSE cold on the subgraph-sized and RMAT graphs", cold["hpspmm"])]


def gar_lines(t: dict) -> list[str]:
    """The markdown section of :func:`bench_gar_training`'s record ``t``."""
    ratio = t["gar_speedup_vs_pyg"]
    return [f"## GAR forward + backward (edge-weight gradient), {t['graph']}, K={t['K']}", "",
            "| " + " | ".join(t["ms"]) + " |", "|" + "---|" * len(t["ms"]),
            "| " + " | ".join(fmt(v) for v in t["ms"].values()) + " |", "",
            ("GAR speedup over PyG gather/scatter: " + (f"{ratio:.1f}x" if ratio else
             "not measured (PyG ran out of GPU memory)")) +
            f"; bitwise deterministic across two runs: {t['bitwise_deterministic']}"]


def gar_markdown(report: dict) -> str:
    """The markdown of a ``--gar-only`` run."""
    return "\n".join([f"# GAR training benchmark ({report['device']})", "",
                      f"torch {report['torch']}, cupy {report['cupy']}, {report['date']}. fp32, median of "
                      f"{report['repeats']} CUDA-event-timed forward + backward steps after warm-up.", "",
                      *gar_lines(report["gar_training"])]) + "\n"


def markdown(report: dict) -> str:
    lines = [
        f"# SpMM benchmark ({report['device']})",
        "",
        (f"torch {report['torch']}, cupy {report['cupy']}, {report['date']}. fp32, GCN-normalised weights, "
        f"median of {report['repeats']} CUDA-event-timed runs after warm-up ({SMALL_FACTOR}x as many on graphs under "
        f"{SMALL_NNZ:,} nnz; in {ROUNDS} rounds interleaved over the contestants); output allocation/zeroing "
        "included. Copy bandwidth (read + write): "
        f"{report['copy_bandwidth_gbs']:.0f} GB/s. Times in ms; `x` = cuSPARSE time / GE-SpMM time; "
        "floor = fraction of the bandwidth floor (CSR + x read once + out written once) GE-SpMM reaches; "
        "(graph) = the same call captured in a CUDA graph and replayed (GPU time without host launch cost; "
        "OOM also stands for 'not capturable')."),
        "",
        ("| graph | nodes | nnz | K | cuSPARSE | GE-SpMM sum | x | mean | max | GAR | GAS | HP-SpMM | x | "
         f"ES S={ES_WIDTH} | x | PyG | GFLOP/s | floor | cuSPARSE (graph) | GE-SpMM (graph) | HP-SpMM (graph) |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for gr in report["graphs"]:
        for k, row in gr["results"].items():
            ms = row["ms"]
            gflops, floor = row["gflops"]["gespmm"], row["floor_fraction"]["gespmm"]
            lines.append(
                f"| {gr['name']} | {gr['nodes']:,} | {gr['nnz']:,} | {k} | {fmt_ms(row, 'cusparse')} | "
                f"{fmt_ms(row, 'gespmm')} | {fmt_ratio(speedup(ms, 'gespmm'))} | {fmt_ms(row, 'gespmm_mean')} | "
                f"{fmt_ms(row, 'gespmm_max')} | {fmt_ms(row, 'gar')} | {fmt_ms(row, 'gas')} | {fmt_ms(row, 'hpspmm')} | "
                f"{fmt_ratio(speedup(ms, 'hpspmm'))} | {fmt_ms(row, 'es64')} | {fmt_ratio(speedup(ms, 'es64'))} | "
                f"{fmt_ms(row, 'pyg')} | {'–' if gflops is None else f'{gflops:.0f}'} | {fmt_ratio(floor)} | "
                + " | ".join(fmt_ms(row, c, "graph_replay_ms") for c in REPLAYED) + " |"
            )
    s = report["summary"]
    lines += ["", "## Summary", ""]
    for k, v in s["geomean_speedup_vs_cusparse"].items():
        lines.append(f"- GE-SpMM sum vs cuSPARSE, geometric mean at K={k}: {fmt_ratio(v)}x")
    if "cells" in s:
        left_out = f"; left out: {', '.join(s['missing'])}" if s["missing"] else ""
        lines.append(f"- those geometric means cover {s['cells']} cells{left_out}")
    for k, v in s.get("graph_replay_geomean_speedup_vs_cusparse", {}).items():
        lines.append(f"- same, both captured in a CUDA graph and replayed (GPU time only), K={k}: {fmt_ratio(v)}x")
    if "graph_replay_cells" in s:
        left_out = f"; left out: {', '.join(s['graph_replay_missing'])}" if s["graph_replay_missing"] else ""
        lines.append(f"- the replayed geometric means cover {s['graph_replay_cells']} cells{left_out}")
    if s["worst_cell"]:
        w = s["worst_cell"]
        lines.append(f"- worst cell (K in 64/128/256): {w['speedup']:.2f}x on {w['graph']} at K={w['K']}")
    for key in ("mean_over_sum", "max_over_sum"):
        if s[key]:
            cover = f" ({s[key]['cells']} of {s[key]['of']} cells)" if "cells" in s[key] else ""
            lines.append(f"- {key.replace('_', ' ')}: max {s[key]['max']:.2f}, geomean {s[key]['geomean']:.2f}{cover}")
    if s.get("hpspmm"):
        lines += ratio_lines("HP-SpMM vs cuSPARSE on the subgraph-sized and RMAT graphs", s["hpspmm"])
    if s.get("hpspmm_graph_replay"):
        lines += ratio_lines("same, both captured in a CUDA graph and replayed (GPU time only)",
                             s["hpspmm_graph_replay"])
    for name, per_k in s.get("es", {}).items():
        kept = s.get("es_kept_fraction", {}).get(name)
        work = f"it keeps {kept:.0%} of the entries, " if kept else ""
        lines.append(f"- ES-SpMM S={ES_WIDTH} (random) vs exact cuSPARSE on {name} ({work}at most {ES_WIDTH} per row: "
                     "an approximation, so this is less work, not a faster exact SpMM): " + ", ".join(
                         f"K={k} {fmt_ratio(v)}x" for k, v in per_k.items()))
    wrong = [f"{gr['name']} K={k} {c}" for gr in report["graphs"] for k, row in gr["results"].items()
             for c in row.get("output_problems", {})]
    lines.append("- outputs checked before timing (sums within the float32 bound of cuSPARSE, max against the "
                 "reference on 256 rows, ES-SpMM on its exact rows): " +
                 (f"WRONG, left out of the timings: {', '.join(wrong)}" if wrong else "all correct"))
    if report.get("host_overhead_us"):
        lines.append("- host cost per call, Cora-sized graph, K=64 (us): " + ", ".join(
            f"{name} {value:.1f}" for name, value in report["host_overhead_us"].items()))
    if s["cold"]["gespmm"]["cells"] or s["cold"]["hpspmm"]["cells"]:
        lines += cold_lines(report)
    if report.get("gar_training"):
        lines += ["", *gar_lines(report["gar_training"])]
    reordered_graphs = [gr for gr in report["graphs"] if "reorder_s" in gr]
    if reordered_graphs:
        lines += ["", "## Graph-clustering reordering (GE-SpMM sum, the same graph renumbered)", "",
                  "| graph | one-off cost s | K | GE-SpMM ms | renumbered ms | gain |", "|---|---|---|---|---|---|"]
        for gr in reordered_graphs:
            for k, r in gr["results"].items():
                plain, renumbered = r["ms"]["gespmm"], r["ms"].get("gespmm_reordered")
                gain = None if None in (plain, renumbered) else plain / renumbered
                lines.append(f"| {gr['name']} | {gr['reorder_s']:.2f} | {k} | {fmt(plain)} | {fmt(renumbered)} | "
                             f"{fmt(gain, 2)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None, help="folder with cora.mtx, pubmed.mtx, facebook_edges.csv")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON record (default docs/benchmarks/spmm.json, or gar_training.json with --gar-only)")
    parser.add_argument("--md", type=Path, default=None, help="markdown table (default: --out with .md)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--ks", type=int, nargs="*", default=KS)
    parser.add_argument("--quick", action="store_true", help="skip the three large RMAT graphs")
    parser.add_argument("--gar-only", action="store_true",
                        help="only the GAR forward + backward comparison with PyG on RMAT s18 57M (needs a GPU with "
                             "room for PyG's (E, K) messages, e.g. an H200)")
    parser.add_argument("--reorder", action="store_true",
                        help="also time GE-SpMM on each graph renumbered by graph clustering (with its one-off cost)")
    args = parser.parse_args()
    if args.repeats < 20:
        parser.error("--repeats must be at least 20")
    args.out = args.out or Path("docs/benchmarks") / ("gar_training.json" if args.gar_only else "spmm.json")
    args.md = args.md or args.out.with_suffix(".md")
    import cupy

    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cupy": cupy.__version__,
              "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "repeats": args.repeats}
    if args.gar_only:
        name = "RMAT s18 57M drawn"
        ei, n = dict(graph_specs(None, quick=False))[name]("cuda")
        report["gar_training"] = dict(graph=name, **bench_gar_training(ei, n, 64, args.repeats))
        write_report(report, args.out, args.md, gar_markdown)
        print(gar_markdown(report))
        return
    bw = copy_bandwidth()
    report.update(copy_bandwidth_gbs=bw, ks=args.ks, graphs=[])
    training_graph = None
    for name, make in graph_specs(args.data, args.quick):
        ei, n = make("cuda")
        print(f"{name}: {n:,} nodes, {ei.size(1):,} nnz", flush=True)
        report["graphs"].append(bench_graph(name, ei, n, args.ks, args.repeats, bw, args.reorder))
        if name.startswith("RMAT s18 57M") or (args.quick and name.startswith("RMAT s18 4M")):
            training_graph = (name, ei, n)
        else:
            del ei
        torch.cuda.empty_cache()
    if training_graph is not None:
        name, ei, n = training_graph
        report["gar_training"] = dict(graph=name, **bench_gar_training(ei, n, 64, args.repeats))
        del ei
    report["summary"] = summarise(report["graphs"])
    report["host_overhead_us"] = overhead_report(args.data)
    write_report(report, args.out, args.md, markdown)
    print(markdown(report))


if __name__ == "__main__":
    main()
