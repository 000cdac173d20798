"""GE-SpMM on float16/bfloat16 features against float32 GE-SpMM, cuSPARSE (float32 and bfloat16) and the
reference backend (what ``"auto"`` ran for half precision before GE-SpMM took it).

Weighted sums with GCN-normalised weights (stored in the features' dtype, as ``aggregate`` casts them) and the
unweighted mean of a GraphSAGE layer, on the suite's PubMed, RMAT s15 subgraph and RMAT s18 graphs at K = 64,
128, 256. Each call is timed eagerly (CUDA events around one call after a sync, median of 20, or 200 on graphs
under 1,000,000 nnz, interleaved over the contestants, output allocation included), as bench_spmm does. The
half-precision outputs are checked against the float64 reference before timing.

Usage: python scripts/bench_half.py [--data .benchdata] [--out docs/benchmarks/half_h200.json --md docs/benchmarks/half_h200.md]
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import torch

import graphfuse
from bench_graphs import read_mtx, rmat, write_report
from bench_spmm import SMALL_NNZ, gcn_operands, interleaved_ms
from graphfuse.engine import reference

KS = [64, 128, 256]
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 2e-2}


def graphs(data: Path) -> list[tuple[str, object]]:
    specs = [("subgraph RMAT s15 (32K)", lambda: rmat(15, 400_000, 4, "cuda")),
             ("RMAT s18 4M drawn", lambda: rmat(18, 4_000_000, 6, "cuda")),
             ("RMAT s18 57M drawn", lambda: rmat(18, 57_000_000, 7, "cuda"))]
    if (data / "pubmed.mtx").exists():
        specs.insert(0, ("pubmed.mtx", lambda: read_mtx(data / "pubmed.mtx", "cuda")))
    return specs


def checked(g: graphfuse.Graph, x: torch.Tensor, reduce: str, rows: int = 4096) -> bool:
    """The GE-SpMM output's first ``rows`` rows within the dtype's tolerance of the float64 reference (scaled by
    the sum of |terms|), the reference run on those rows' in-edges only (its messages of the whole 57M-edge graph
    would take 75 GiB at K = 128)."""
    rows = min(rows, g.num_dst)
    out = graphfuse.aggregate(g, x, reduce=reduce, backend="gespmm")[:rows].double()
    keep = g.edge_index[1] < rows
    w = None if g.edge_weight is None else g.edge_weight[keep].double()
    sub = graphfuse.Graph(g.edge_index[:, keep], num_src=g.num_src, num_dst=rows)
    ref = reference.aggregate(sub, x.double(), w, reduce)
    scale = reference.aggregate(sub, x.double().abs(), None if w is None else w.abs(), reduce)
    tol = TOLERANCE[x.dtype]
    return bool(((out - ref).abs() <= tol + tol * scale).all())


def bench_graph(name: str, ei: torch.Tensor, n: int) -> list[dict]:
    w, g32, a32 = gcn_operands(ei, n)
    typed = {key: graphfuse.Graph(ei, num_nodes=n, edge_weight=w.to(dt)) for key, dt in DTYPES.items()}
    plain = {key: graphfuse.Graph(ei, num_nodes=n) for key in DTYPES}
    a16 = a32.to(torch.bfloat16)
    repeats = 200 if ei.size(1) < SMALL_NNZ else 20
    rows = []
    for k in KS:
        x32 = torch.randn(n, k, device="cuda")
        xs = {key: x32.to(dt) for key, dt in DTYPES.items()}
        ok = all(checked(typed[key], xs[key], "sum") and checked(plain[key], xs[key], "mean") for key in DTYPES)
        calls = {"cusparse_fp32": lambda: torch.sparse.mm(a32, x32),
                 "cusparse_bf16": lambda: torch.sparse.mm(a16, xs["bf16"]),
                 "gespmm_fp32": lambda: graphfuse.aggregate(g32, x32, backend="gespmm"),
                 "reference_bf16": lambda: graphfuse.aggregate(typed["bf16"], xs["bf16"], backend="reference"),
                 "mean_reference_bf16": lambda: graphfuse.aggregate(plain["bf16"], xs["bf16"], reduce="mean",
                                                                    backend="reference")}
        for key in DTYPES:
            calls[f"gespmm_{key}"] = lambda key=key: graphfuse.aggregate(typed[key], xs[key], backend="gespmm")
            calls[f"mean_gespmm_{key}"] = lambda key=key: graphfuse.aggregate(plain[key], xs[key], reduce="mean",
                                                                              backend="gespmm")
        try:
            torch.sparse.mm(a16, xs["bf16"])
        except RuntimeError:  # a torch build without bfloat16 sparse CSR products
            del calls["cusparse_bf16"]
        times = interleaved_ms(calls, repeats)
        rows.append({"graph": name, "nodes": n, "nnz": ei.size(1), "k": k, "checked": ok, "ms": times})
        print(name, k, ok, {c: None if t is None else round(t, 4) for c, t in times.items()}, flush=True)
    return rows


def ratio(row: dict, a: str, b: str) -> float | None:
    ta, tb = row["ms"].get(a), row["ms"].get(b)
    return None if ta is None or tb is None else ta / tb


def markdown(report: dict) -> str:
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    lines = [f"# GE-SpMM in half precision ({report['gpu']})", "",
             f"torch {report['torch']}, {report['date']}. Eager CUDA-event medians in ms (output allocation "
             "included); sums weighted by GCN weights in the features' dtype, means unweighted. x = time of the "
             "named contestant / GE-SpMM bf16.", "",
             "| graph | nnz | K | cuSPARSE fp32 | cuSPARSE bf16 | GE-SpMM fp32 | GE-SpMM bf16 | GE-SpMM fp16 | "
             "reference bf16 | x cuSPARSE fp32 | x cuSPARSE bf16 | x GE fp32 | x reference | mean GE bf16 | "
             "mean reference bf16 | x |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        t = r["ms"]
        lines.append(
            f"| {r['graph']} | {r['nnz']:,} | {r['k']} | {fmt(t['cusparse_fp32'])} | {fmt(t.get('cusparse_bf16'))} | "
            f"{fmt(t['gespmm_fp32'])} | {fmt(t['gespmm_bf16'])} | {fmt(t['gespmm_fp16'])} | "
            f"{fmt(t['reference_bf16'])} | {fmt(ratio(r, 'cusparse_fp32', 'gespmm_bf16'))} | "
            f"{fmt(ratio(r, 'cusparse_bf16', 'gespmm_bf16'))} | {fmt(ratio(r, 'gespmm_fp32', 'gespmm_bf16'))} | "
            f"{fmt(ratio(r, 'reference_bf16', 'gespmm_bf16'))} | {fmt(t['mean_gespmm_bf16'])} | "
            f"{fmt(t['mean_reference_bf16'])} | {fmt(ratio(r, 'mean_reference_bf16', 'mean_gespmm_bf16'))} |")
    lines += ["", "Outputs checked against the float64 reference before timing: "
              + ("all within tolerance" if all(r["checked"] for r in report["rows"]) else "SOME FAILED")]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(".benchdata"), help="folder with pubmed.mtx")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks/half_h200.json"))
    parser.add_argument("--md", type=Path, default=Path("docs/benchmarks/half_h200.md"))
    args = parser.parse_args()
    report = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name(), "rows": []}
    for name, make in graphs(args.data):
        ei, n = make()
        report["rows"] += bench_graph(name, ei, n)
        del ei
        torch.cuda.empty_cache()
    write_report(report, args.out, args.md, markdown)
    print(markdown(report))


if __name__ == "__main__":
    main()
