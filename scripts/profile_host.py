"""Where a small graph's eager time goes: for pieces of the GE-SpMM path and for cuSPARSE, the CUDA-event time
of one call after a sync (what bench_spmm reports), the host cost per call when calls are issued back to back,
and the synchronised wall latency. Needs a GPU; prints one table per graph and K.

Usage: python scripts/profile_host.py [--data .benchdata]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import torch
from bench_graph_processing import wall_ms

import graphfuse
from bench_graphs import read_mtx, rmat
from bench_spmm import gcn_operands, host_overhead_us, time_ms
from graphfuse.engine import autograd


def pieces(g: graphfuse.Graph, a: torch.Tensor, x: torch.Tensor) -> dict[str, Callable[[], object]]:
    n, k = x.shape
    plan = autograd.gespmm_plan(g, "csr", x, weighted=True)
    w = autograd._permuted(g, g.edge_weight, "csr")
    out = torch.empty(n, k, device="cuda")
    return {
        "nothing": lambda: None,
        "torch.empty": lambda: torch.empty(n, k, device="cuda"),
        "x.add(1)": lambda: x.add(1),
        "cusparse": lambda: torch.sparse.mm(a, x),
        "plan (alloc + launch)": lambda: plan(x, w),
        "launch only": lambda: plan._launch(x, w, None, None, out, None),
        "engine function": lambda: autograd.gespmm_aggregate(g, x),
        "aggregate, gespmm": lambda: graphfuse.aggregate(g, x, backend="gespmm"),
        "aggregate, auto": lambda: graphfuse.aggregate(g, x),
        "aggregate, hpspmm": lambda: graphfuse.aggregate(g, x, backend="hpspmm"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(".benchdata"), help="folder with cora.mtx")
    args = parser.parse_args()
    graphs = [("subgraph RMAT s13 (8K)", lambda: rmat(13, 100_000, 3, "cuda"))]
    if (args.data / "cora.mtx").exists():
        graphs.insert(0, ("cora", lambda: read_mtx(args.data / "cora.mtx", "cuda")))
    for name, make in graphs:
        ei, n = make()
        _, g, a = gcn_operands(ei, n)
        for k in (64, 256):
            x = torch.randn(n, k, device="cuda")
            print(f"== {name}: {n:,} nodes, {ei.size(1):,} nnz, K={k} (us: event / host / wall)")
            for label, fn in pieces(g, a, x).items():
                print(f"{label:24s} {time_ms(fn, 50) * 1e3:7.1f} {host_overhead_us(fn, 1000):7.1f} "
                      f"{wall_ms(fn, 200) * 1e3:7.1f}")


if __name__ == "__main__":
    main()
