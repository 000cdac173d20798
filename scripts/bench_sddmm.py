"""SDDMM benchmark: graphfuse's HP-SDDMM against the PyTorch path on the same GPU, in the same process.

Per-edge dot products ``out[e] = <a[dst_e], b[src_e]>`` (a, b: (N, K) fp32) on the SpMM suite's graphs
(scripts/bench_spmm.py's ``graph_specs``), K ∈ {32, 64, 128} by default. Contestants:
- hp_sddmm: ``graphfuse.sddmm(graph, a, b, backend="gespmm")`` (COO-order output; the graph's CSR is cached,
  as in training);
- gar_sddmm: the earlier kernel, fuseGNN GAR's backward pass with only the edge-weight gradient;
- cusparse: ``torch.sparse.sampled_addmm`` (cuSPARSE SDDMM) on the graph's CSR pattern, its CSR-order values
  put back in COO order (as the others return them; the pattern and the permutation are built once);
- pytorch: ``(a[dst] * b[src]).sum(-1)`` (gather both endpoints, multiply, sum).
Timing: CUDA events around each call, median of ``--repeats`` runs after warm-up; out of memory is null.
Writes JSON (device, versions) and a markdown table with the speedups over PyTorch (the issue's criterion) and
over cuSPARSE; geometric means say how many cells they cover (an out-of-memory baseline leaves its cell out).

Usage: python scripts/bench_sddmm.py --data .benchdata --out docs/benchmarks/sddmm.json --md docs/benchmarks/sddmm.md
"""

from __future__ import annotations

import argparse
import datetime
import math
from collections.abc import Callable
from pathlib import Path

import torch

import graphfuse
from bench_graphs import write_report
from bench_spmm import fmt, fmt_ratio, geomean, graph_specs, time_ms
from graphfuse.kernels import gar as gar_kernels

KS = [32, 64, 128]
MAX_REL_ERR = 1e-4  # float32 dot products against float64, relative to the largest |result|


def max_rel_err(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
                chunk: int = 1 << 22) -> float:
    """max |out - ref| / max |ref| against the float64 dot products, computed in edge chunks (the full
    float64 gathers of a 79M-edge graph would not fit); NaN when any output is not finite."""
    if not bool(torch.isfinite(out).all()):
        return math.nan
    err = peak = 0.0
    for lo in range(0, src.numel(), chunk):
        ref = (a[dst[lo:lo + chunk]].double() * b[src[lo:lo + chunk]].double()).sum(-1)
        err = max(err, float((out[lo:lo + chunk].double() - ref).abs().max()))
        peak = max(peak, float(ref.abs().max()))
    return err / max(peak, 1e-30)


def checked_error(fn: Callable[[], object], name: str, a: torch.Tensor, b: torch.Tensor, src: torch.Tensor,
                  dst: torch.Tensor) -> float | None:
    """:func:`max_rel_err` of a contestant's output, checked before it is timed (None when it runs out of memory:
    the timing records that)."""
    try:
        out = fn()
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return None
    return max_rel_err(out[1] if name == "gar_sddmm" else out, a, b, src, dst)


def cusparse_sddmm(g: graphfuse.Graph) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``(a, b) -> <a[dst_e], b[src_e]>`` in COO order through cuSPARSE's SDDMM (``torch.sparse.sampled_addmm``)
    on ``g``'s CSR pattern (rows = targets, int32 indices as in bench_spmm), built once with the CSR → COO
    permutation."""
    csr = g.csr
    pattern = torch.sparse_csr_tensor(csr.rowptr.int(), csr.col.int(), torch.ones(g.num_edges, device=csr.col.device),
                                      size=(g.num_dst, g.num_src))
    to_coo = torch.argsort(csr.perm)
    return lambda a, b: torch.sparse.sampled_addmm(pattern, a, b.t(), beta=0.0).values().index_select(0, to_coo)


def bench_graph(name: str, ei: torch.Tensor, n: int, ks: list[int], repeats: int) -> dict:
    g = graphfuse.Graph(ei, num_nodes=n)
    src, dst = ei
    csc = g.csc
    row32 = csc.row.int()
    cusparse = cusparse_sddmm(g)
    record = {"name": name, "nodes": n, "nnz": ei.size(1), "results": {}}
    for k in ks:
        gen = torch.Generator(device="cuda").manual_seed(k)
        a = torch.randn(n, k, device="cuda", generator=gen)
        b = torch.randn(n, k, device="cuda", generator=gen)
        calls = {
            "hp_sddmm": lambda: graphfuse.sddmm(g, a, b, backend="gespmm"),
            "gar_sddmm": lambda: gar_kernels.gar_backward(csc.colptr, row32, a, b, None, edge_perm=csc.perm,
                                                          need_dx=False, need_dw=True, validate=False),
            "cusparse": lambda: cusparse(a, b),
            "pytorch": lambda: (a.index_select(0, dst) * b.index_select(0, src)).sum(-1),
        }
        errs = {c: checked_error(fn, c, a, b, src, dst) for c, fn in calls.items()}
        wrong = [c for c, e in errs.items() if e is not None and not e <= MAX_REL_ERR]  # NaN is wrong too
        for c in wrong:
            print(f"  K={k} {c}: WRONG OUTPUT (max rel err {errs[c]:.2e}); left out of the timings", flush=True)
        row = {"max_rel_err_vs_fp64": errs["hp_sddmm"], "cusparse_max_rel_err_vs_fp64": errs["cusparse"],
               "max_rel_errs_vs_fp64": errs, "wrong": wrong,
               "ms": {c: None if c in wrong else time_ms(fn, repeats) for c, fn in calls.items()}}
        ms = row["ms"]
        for base in ("pytorch", "cusparse"):
            row[f"speedup_vs_{base}"] = None if None in (ms["hp_sddmm"], ms[base]) else ms[base] / ms["hp_sddmm"]
        record["results"][str(k)] = row
        a = b = calls = None
        torch.cuda.empty_cache()
    return record


def fmt_err(err: float | None) -> str:
    """An output's error in a table cell (None: the contestant ran out of memory before it could be checked)."""
    return "OOM" if err is None else f"{err:.1e}"


def markdown(report: dict) -> str:
    lines = [f"# SDDMM benchmark ({report['device']})", "",
             f"torch {report['torch']}, {report['date']}. fp32, median of {report['repeats']} CUDA-event-timed "
             "runs after warm-up, output allocation included (cuSPARSE's reorder into COO order too). Times in ms; "
             "x = baseline time / HP-SDDMM time.", "",
             "| graph | nodes | nnz | K | HP-SDDMM | GAR SDDMM | cuSPARSE | x | PyTorch | x | max rel err |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for gr in report["graphs"]:
        for k, r in gr["results"].items():
            def cell(c):
                return "WRONG" if c in r.get("wrong", []) else fmt(r["ms"].get(c))
            lines.append(f"| {gr['name']} | {gr['nodes']:,} | {gr['nnz']:,} | {k} | {cell('hp_sddmm')} | "
                         f"{cell('gar_sddmm')} | {cell('cusparse')} | {fmt_ratio(r.get('speedup_vs_cusparse'))} | "
                         f"{cell('pytorch')} | {fmt_ratio(r['speedup_vs_pytorch'])} | {fmt_err(r['max_rel_err_vs_fp64'])} |")
    lines += ["", "## Summary", ""]
    wrong = [f"{gr['name']} K={k} {c}" for gr in report["graphs"] for k, r in gr["results"].items()
             for c in r.get("wrong", [])]
    lines.append(f"- every output checked against float64 before timing (max rel err <= {MAX_REL_ERR:g}): " +
                 (f"WRONG, left out of the timings: {', '.join(wrong)}" if wrong else "all correct"))
    for k, bases in report["summary"].items():
        for base, (gm, worst, cells) in bases.items():
            lines.append(f"- K={k}: HP-SDDMM vs {base} on the RMAT graphs, geometric mean {fmt_ratio(gm)}x, worst "
                         f"{fmt_ratio(worst)}x ({cells})")
    return "\n".join(lines) + "\n"


def write(report: dict, args: argparse.Namespace) -> None:
    rmat = [gr for gr in report["graphs"] if gr["name"].startswith("RMAT")]
    report["summary"] = {}
    for k in map(str, args.ks):
        report["summary"][k] = {}
        for base in ("PyTorch", "cuSPARSE"):
            found = [(gr["name"], gr["results"][k].get(f"speedup_vs_{base.lower()}")) for gr in rmat]
            ratios = [r for _, r in found if r]
            missing = [name for name, r in found if not r]
            cells = f"{len(ratios)} of {len(found)} graphs" + (f"; no ratio on {', '.join(missing)}" if missing else "")
            report["summary"][k][base] = (geomean(ratios), min(ratios) if ratios else None, cells)
    write_report(report, args.out, args.md, markdown)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None, help="folder with cora.mtx, pubmed.mtx, facebook_edges.csv")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks/sddmm.json"))
    parser.add_argument("--md", type=Path, default=Path("docs/benchmarks/sddmm.md"))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--ks", type=int, nargs="*", default=KS)
    parser.add_argument("--quick", action="store_true", help="skip the three large RMAT graphs")
    args = parser.parse_args()
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "repeats": args.repeats,
              "ks": args.ks, "graphs": []}
    for name, make in graph_specs(args.data, args.quick):
        ei, n = make("cuda")
        print(f"{name}: {n:,} nodes, {ei.size(1):,} nnz", flush=True)
        report["graphs"].append(bench_graph(name, ei, n, args.ks, args.repeats))
        del ei
        torch.cuda.empty_cache()
        write(report, args)  # after every graph: a run cut short keeps what it measured
    print(markdown(report))


if __name__ == "__main__":
    main()
