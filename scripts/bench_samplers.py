"""Sampler benchmark: batches per second of every graphfuse sampler, on CPU and on the GPU when present.

Graphs: Facebook Page-Page (``graphfuse.data.load_dataset("facebook")``, 22,470 nodes) and an RMAT graph of
scale 21 (2,097,152 nodes; 63M edges drawn with a=0.57, b=c=0.19, symmetrised, deduplicated, ids permuted;
~116.2M directed edges; 100 random features), generated on the fastest device present.

Samplers (issue 5's acceptance settings): GraphSAINT random walk (6,000 roots, walk length 2), node (budget
6,000), edge (budget 4,000), and neighbour sampling (fan-outs [15, 10, 5], 1,024 seeds from the training nodes,
shuffled). A batch is ``loader.sample()``: drawing, subgraph extraction and relabelling, and gathering
features, labels and the training mask on the device — everything a training step receives. Per-graph
structures (CSR, CSC, the owned adjacency, the edge-sampling CDF) are built once before timing and reported as
``prepare_s``.

Also measured: GraphSAINT normalisation pre-sampling at coverage 50 (``compute_saint_norm`` without the disk
cache; skipped on CPU for graphs over 5M edges, where it takes hours), and one training step (forward,
backward, Adam step) of a GraphSAGE model (hidden 256, one layer per hop; 2 layers for GraphSAINT batches) on a
sampled batch, giving the share of a step spent sampling: ``sample / (sample + step)``.

Timing: CUDA synchronised around every batch; the mean over ``--iters`` batches after ``--warmup``, and the
median (at most 5 batches on CPU for graphs over 5M edges). Results are merged into the JSON file (replacing rows of the same device, graph and sampler) and the
markdown table is rewritten from it.

Usage:
    python scripts/bench_samplers.py                       # all graphs, cpu + cuda when present
    python scripts/bench_samplers.py --graphs facebook --devices cpu --iters 5 --out /tmp/s.json --md /tmp/s.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

import graphfuse
from bench_graphs import measured_commit, versions, write_report
from graphfuse.data import load_dataset
from graphfuse.data.synthetic import rmat_graph
from graphfuse.nn import GraphSAGE
from graphfuse.samplers import (
    NeighborLoader,
    SaintEdgeSampler,
    SaintLoader,
    SaintNodeSampler,
    SaintRandomWalkSampler,
    compute_saint_norm,
    edge_sampling_cdf,
)
from graphfuse.samplers.subgraph import owned_adjacency

COVERAGE = 50
FANOUTS = [15, 10, 5]
SEEDS_PER_BATCH = 1024
CPU_NORM_EDGE_LIMIT = 5_000_000
SAINT = {
    "saint_rw": SaintRandomWalkSampler(roots=6000, walk_length=2),
    "saint_node": SaintNodeSampler(budget=6000),
    "saint_edge": SaintEdgeSampler(budget=4000),
}


# ------------------------------------------------------------------------------------------ graphs
class Workload:
    """A graph with node data, on one device."""

    def __init__(self, name: str, edge_index: torch.Tensor, num_nodes: int, x: torch.Tensor, y: torch.Tensor,
                 train_mask: torch.Tensor, num_classes: int) -> None:
        self.name = name
        self.graph = graphfuse.Graph(edge_index, num_nodes=num_nodes, validate=False)
        self.x, self.y, self.train_mask, self.num_classes = x, y, train_mask, num_classes

    def to(self, device: str) -> Workload:
        return Workload(self.name, self.graph.edge_index.to(device), self.graph.num_nodes, self.x.to(device),
                        self.y.to(device), self.train_mask.to(device), self.num_classes)


def facebook(device: str) -> Workload:
    ds = load_dataset("facebook")
    return Workload("facebook", ds.edge_index, ds.num_nodes, ds.x, ds.y, ds.train_mask, ds.num_classes).to(device)


def rmat(scale: int, drawn: int, device: str, seed: int = 0) -> Workload:
    edge_index = rmat_graph(scale, drawn, seed, device)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    n = 1 << scale
    x = torch.randn(n, 100, generator=gen, device=device)
    y = torch.randint(0, 47, (n,), generator=gen, device=device)
    train = torch.rand(n, generator=gen, device=device) < 0.6
    return Workload(f"rmat{scale}", edge_index, n, x, y, train, 47)


# ------------------------------------------------------------------------------------------ timing
def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_calls(fn: Callable[[], object], device: str, warmup: int, iters: int) -> tuple[list[float], object]:
    """Seconds per call, synchronised, after ``warmup`` calls; also the last result."""
    out = None
    for _ in range(warmup):
        out = fn()
    sync(device)
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        out = fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return times, out


def train_step_seconds(work: Workload, batch, num_layers: int, device: str, warmup: int, iters: int) -> float:
    model = GraphSAGE(work.x.size(1), 256, work.num_classes, num_layers=num_layers).to(device)
    optimiser = torch.optim.Adam(model.parameters(), lr=0.01)
    rows = batch.batch_size

    def step() -> None:
        optimiser.zero_grad(set_to_none=True)
        out = model(batch.x, batch.graph)[:rows]
        F.cross_entropy(out, batch.y[:rows]).backward()
        optimiser.step()

    times, _ = time_calls(step, device, warmup, iters)
    return statistics.mean(times)


def endless(loader: NeighborLoader) -> Callable[[], object]:
    """Next batch of ``loader``, starting a new epoch when one ends."""
    batches = iter(loader)

    def draw() -> object:
        nonlocal batches
        try:
            return next(batches)
        except StopIteration:
            batches = iter(loader)
            return next(batches)

    return draw


def row(work: Workload, device: str, sampler: str, params: dict, times: list[float], batch) -> dict:
    mean = statistics.mean(times)
    return {
        "graph": work.name, "device": device, "device_name": device_name(device), "sampler": sampler,
        "params": params, "num_nodes": work.graph.num_nodes, "num_edges": work.graph.num_edges,
        "ms_per_batch": 1e3 * mean, "ms_per_batch_median": 1e3 * statistics.median(times),
        "batches_per_s": 1 / mean, "batch_nodes": batch.num_nodes, "batch_edges": batch.graph.num_edges,
        "iters": len(times),
    }


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"cpu ({torch.get_num_threads()} threads)"


def bench_workload(work: Workload, device: str, args: argparse.Namespace) -> list[dict]:
    results = []
    graph = work.graph
    start = time.perf_counter()
    _ = (graph.csr, graph.csc, owned_adjacency(graph), edge_sampling_cdf(graph))
    sync(device)
    prepare = time.perf_counter() - start
    node_data = {"train_mask": work.train_mask}
    for name in args.samplers:
        if name == "neighbor":
            loader = NeighborLoader(graph, FANOUTS, input_nodes=work.train_mask, batch_size=SEEDS_PER_BATCH,
                                    shuffle=True, x=work.x, y=work.y, node_data=node_data, seed=0)
            draw = endless(loader)
            params, layers = {"num_neighbors": FANOUTS, "batch_size": SEEDS_PER_BATCH}, len(FANOUTS)
        else:
            sampler = SAINT[name]
            loader = SaintLoader(graph, sampler, x=work.x, y=work.y, node_data=node_data, seed=0)
            draw, params, layers = loader.sample, dict(vars(sampler)), 2
        iters = args.iters if device != "cpu" or graph.num_edges <= CPU_NORM_EDGE_LIMIT else min(args.iters, 5)
        times, batch = time_calls(draw, device, args.warmup, iters)
        result = row(work, device, name, params, times, batch)
        result["prepare_s"] = prepare
        if not args.no_train:
            step = train_step_seconds(work, batch, layers, device, args.warmup, max(iters // 2, 1))
            result["train_step_ms"] = 1e3 * step
            result["sampling_share"] = statistics.mean(times) / (statistics.mean(times) + step)
        if name != "neighbor" and not args.no_norm:
            if device == "cpu" and graph.num_edges > CPU_NORM_EDGE_LIMIT:
                result["norm_presampling_s"] = None
                result["norm_note"] = f"skipped on CPU (> {CPU_NORM_EDGE_LIMIT:,} edges)"
            else:
                sync(device)
                start = time.perf_counter()
                norm = compute_saint_norm(graph, SAINT[name], sample_coverage=COVERAGE, seed=0)
                sync(device)
                result["norm_presampling_s"] = time.perf_counter() - start
                result["norm_subgraphs"] = norm.num_samples
        results.append(result)
        print(f"{work.name:>9} {device:>5} {name:>10}: {result['ms_per_batch']:8.2f} ms/batch "
              f"({result['batch_nodes']} nodes, {result['batch_edges']} edges)"
              + (f", norm {result['norm_presampling_s']:.2f} s" if result.get("norm_presampling_s") else ""),
              flush=True)
    return results


# ------------------------------------------------------------------------------------------ output
def merge(path: Path, new: list[dict], meta: dict) -> dict:
    """The rows of ``path`` with ``new`` rows replacing those of the same device, graph and sampler. Each new row
    carries its own date, versions and commit (``measured``): a merge keeps older rows, which ``meta`` (this
    run's) would otherwise relabel."""
    old = json.loads(path.read_text()) if path.exists() else {"results": []}
    new = [{**r, "measured": meta} for r in new]
    def key(r):
        return (r["device_name"], r["graph"], r["sampler"])
    fresh = {key(r) for r in new}
    results = [r for r in old.get("results", []) if key(r) not in fresh] + new
    return {"meta": meta, "results": sorted(results, key=lambda r: (r["graph"], r["device"], r["sampler"]))}


def _measured(row: dict) -> str:
    """When, with which torch and at which commit a row was measured ('–' for rows from before rows said so)."""
    m = row.get("measured")
    return "–" if m is None else f"{m['date'][:10]}, torch {m['torch']}, {m['commit']}"


def markdown(report: dict) -> str:
    lines = [
        "# Sampler benchmark",
        "",
        (f"Written by `scripts/bench_samplers.py` (latest run {report['meta']['date']}, torch {report['meta']['torch']}; "
        "each row's own run in its last column). "
        "A batch includes drawing, subgraph extraction and feature/label gathering on the device. "
        f"Normalisation pre-sampling at coverage {COVERAGE}. Training step: GraphSAGE, hidden 256, Adam."),
        "",
        ("| graph | device | sampler | ms / batch (mean) | median | batches / s | batch nodes | batch edges "
        "| train step ms | sampling share | norm pre-sampling s | measured |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def fmt(value, spec: str) -> str:
        return "–" if value is None else format(value, spec)

    for r in report["results"]:
        lines.append(
            f"| {r['graph']} | {r['device_name']} | {r['sampler']} | {r['ms_per_batch']:.2f} | "
            f"{r['ms_per_batch_median']:.2f} | {r['batches_per_s']:.1f} | {r['batch_nodes']:,} | "
            f"{r['batch_edges']:,} | {fmt(r.get('train_step_ms'), '.2f')} | {fmt(r.get('sampling_share'), '.0%')} | "
            f"{fmt(r.get('norm_presampling_s'), '.2f')} | {_measured(r)} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", default="facebook,rmat", help="comma-separated: facebook, rmat")
    parser.add_argument("--devices", default=None, help="comma-separated; default cpu plus cuda when present")
    parser.add_argument("--samplers", default="saint_rw,saint_node,saint_edge,neighbor")
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rmat-scale", type=int, default=21)
    parser.add_argument("--rmat-edges", type=int, default=63_000_000, help="RMAT edges drawn before symmetrising")
    parser.add_argument("--no-norm", action="store_true", help="skip the normalisation pre-sampling timing")
    parser.add_argument("--no-train", action="store_true", help="skip the training-step timing")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks/samplers.json"))
    parser.add_argument("--md", type=Path, default=Path("docs/benchmarks/samplers.md"))
    args = parser.parse_args()
    args.samplers = args.samplers.split(",")
    unknown = set(args.samplers) - set(SAINT) - {"neighbor"}
    if unknown:
        parser.error(f"unknown sampler(s) {sorted(unknown)}; choose from {sorted(SAINT) + ['neighbor']}")
    devices = args.devices.split(",") if args.devices else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    build_on = "cuda" if "cuda" in devices else "cpu"

    results = []
    for name in args.graphs.split(","):
        if name == "facebook":
            base = facebook(build_on)
        elif name == "rmat":
            base = rmat(args.rmat_scale, args.rmat_edges, build_on)
        else:
            parser.error(f"unknown graph {name!r}; choose from facebook, rmat")
        print(f"{base.name}: {base.graph.num_nodes:,} nodes, {base.graph.num_edges:,} edges", flush=True)
        for device in devices:
            work = base if device == build_on else base.to(device)
            results += bench_workload(work, device, args)
            del work
            if device.startswith("cuda"):
                torch.cuda.empty_cache()

    meta = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), **versions(),
            "commit": measured_commit()}
    report = merge(args.out, results, meta)
    write_report(report, args.out, args.md, markdown)
    print(f"wrote {args.out} and {args.md}")


if __name__ == "__main__":
    main()
