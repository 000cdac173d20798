"""Hardware counters of the SpMM contestants under Nsight Compute: where their gathers are served and how close
each kernel runs to the L2's throughput ceiling (GE-SpMM sum, HP-SpMM sum and cuSPARSE on the graphs of
scripts/bench_spmm.py, fp32, GCN-normalised values).

Two steps (``STEPS=counters scripts/gpu_check.sh`` runs both):

  ncu --clock-control none --profile-from-start off --csv --metrics "$(python3 scripts/profile_spmm_counters.py
      --metrics)" python3 scripts/profile_spmm_counters.py --run --data DIR --manifest M.json > C.csv
  python3 scripts/profile_spmm_counters.py --report C.csv --manifest M.json --out docs/benchmarks/spmm_counters.json

``--run`` calls each contestant once per graph and K, after warm-up, inside ``cudaProfilerStart``/``Stop``,
always in the order of ``CONTESTANTS``, and writes that call order to the manifest. ``--report`` gives each
profiled kernel to a call by its name (an unnamed kernel, the output zeroing, to the call of the next named one)
and sums each call's kernels. ``l2_floor_ms`` = the sum over its kernels of time × L2 throughput / peak: the
time the call would take with its L2 traffic at the L2's peak rate, a floor for any kernel that moves the same
sectors. ``bound`` = cuSPARSE's time / that floor: the most a kernel with this L2 traffic can gain on cuSPARSE.
ncu serialises kernels and leaves the clocks alone: times are per kernel, without launch overhead, and
differ from the CUDA-event times of spmm.md by a few percent.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
from pathlib import Path

METRICS = {
    "gpu__time_duration.sum": "ns",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "l2_pct",
    "lts__t_sectors_srcunit_tex_op_read.sum": "l2_read_sectors",
    "lts__t_sector_hit_rate.pct": "l2_hit_pct",
    "l1tex__t_sector_hit_rate.pct": "l1_hit_pct",
    "dram__bytes_read.sum": "dram_read_bytes",
}
# contestant: the kernel-name prefixes that are its own (cuSPARSE also runs a transpose/analysis kernel).
CONTESTANTS = {"gespmm": ("gespmm_",), "hpspmm": ("hp_spmm",), "cusparse": ("cusparse::",)}
KS = [32, 64, 128, 256]


def run(data: Path | None, ks: list[int], manifest: Path) -> None:
    import torch

    from bench_spmm import graph_specs

    calls = []
    for name, make in graph_specs(data, quick=False):
        profile_graph(name, *make("cuda"), ks, calls)
        torch.cuda.empty_cache()
    manifest.write_text(json.dumps({"device": torch.cuda.get_device_name(), "calls": calls}, indent=1) + "\n")


def profile_graph(name: str, ei, n: int, ks: list[int], calls: list[dict]) -> None:
    import torch

    import graphfuse
    from bench_spmm import gcn_operands

    _, g, a = gcn_operands(ei, n)
    for k in ks:
        x = torch.randn(n, k, device="cuda")
        fns = {"gespmm": lambda: graphfuse.aggregate(g, x, reduce="sum", backend="gespmm"),
               "hpspmm": lambda: graphfuse.aggregate(g, x, reduce="sum", backend="hpspmm"),
               "cusparse": lambda: torch.sparse.mm(a, x)}
        for fn in fns.values():  # compile, build the cached formats and plans
            fn()
        torch.cuda.synchronize()
        for contestant in CONTESTANTS:
            torch.cuda.profiler.start()
            fns[contestant]()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            calls.append({"graph": name, "nodes": n, "nnz": ei.size(1), "k": k, "contestant": contestant})


def owner(kernel: str) -> str | None:
    names = [c for c, prefixes in CONTESTANTS.items() if any(p in kernel for p in prefixes)]
    return names[0] if names else None


def kernels(csv_path: Path) -> list[dict]:
    """ncu's CSV (one row per kernel and metric) as one dict per kernel, in launch order."""
    lines = [ln for ln in csv_path.read_text().splitlines() if ln.startswith('"')]
    by_id: dict[str, dict] = {}
    for row in csv.DictReader(lines):
        entry = by_id.setdefault(row["ID"], {"kernel": row["Kernel Name"]})
        entry[METRICS[row["Metric Name"]]] = float(row["Metric Value"].replace(",", ""))
    return list(by_id.values())


def group(profiled: list[dict], expected: int) -> list[list[dict]]:
    """Consecutive kernels of one call: an unnamed kernel joins the call of the next named one."""
    groups, pending, last = [], [], None
    for k in profiled:
        who = owner(k["kernel"])
        if who is None:
            pending.append(k)
            continue
        if who != last or pending:
            groups.append([])
        groups[-1] += pending + [k]
        pending, last = [], who
    if pending or len(groups) != expected:
        raise SystemExit(f"{len(groups)} calls found in the profile, {expected} in the manifest: the kernels do "
                         "not match the calls (a contestant's kernel names changed?)")
    return groups


def call_totals(call: dict, ks: list[dict]) -> dict:
    """One call's record: its kernels' times, L2 floor and traffic summed, the hit rates of its longest kernel."""
    main = max(ks, key=lambda k: k["ns"])
    ms = sum(k["ns"] for k in ks) / 1e6
    return {**call, "kernels": [k["kernel"].split("(")[0][:60] for k in ks], "ms": ms,
            "l2_floor_ms": sum(k["ns"] * k["l2_pct"] / 100 for k in ks) / 1e6,
            "l2_pct": sum(k["ns"] * k["l2_pct"] for k in ks) / 1e6 / ms,
            "l2_read_sectors": sum(k["l2_read_sectors"] for k in ks),
            "dram_read_bytes": sum(k["dram_read_bytes"] for k in ks),
            "l1_hit_pct": main["l1_hit_pct"], "l2_hit_pct": main["l2_hit_pct"]}


def report(csv_path: Path, manifest: Path) -> dict:
    meta = json.loads(manifest.read_text())
    calls = [call_totals(c, ks) for c, ks in zip(meta["calls"], group(kernels(csv_path), len(meta["calls"])))]
    rows: dict[tuple, dict] = {}
    for c in calls:
        rows.setdefault((c["graph"], c["k"]), {"graph": c["graph"], "nodes": c["nodes"], "nnz": c["nnz"], "k": c["k"]})[
            c["contestant"]] = {key: c[key] for key in ("ms", "l2_floor_ms", "l2_pct", "l2_read_sectors",
                                                        "dram_read_bytes", "l1_hit_pct", "l2_hit_pct", "kernels")}
    for row in rows.values():
        for ours in ("gespmm", "hpspmm"):
            row[ours]["speedup"] = row["cusparse"]["ms"] / row[ours]["ms"]
            row[ours]["bound"] = row["cusparse"]["ms"] / row[ours]["l2_floor_ms"]
    rows = list(rows.values())
    return {"device": meta["device"], "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "metrics": list(METRICS), "rows": rows, "summary": summary(rows)}


def summary(rows: list[dict]) -> dict:
    """Geometric means of the measured gain and of the bound over the cells of each acceptance target, in
    kernel time: GE-SpMM over every graph at bench_spmm.GE_KS, HP-SpMM over the subgraph-sized and RMAT graphs
    at bench_spmm.HP_KS."""
    from bench_spmm import GE_KS, HP_KS, geomean

    out = {}
    for ours, ks, prefixes in (("gespmm", GE_KS, ("",)), ("hpspmm", HP_KS, ("subgraph", "RMAT"))):
        cells = [r for r in rows if str(r["k"]) in ks and r["graph"].startswith(prefixes)]
        out[ours] = {key: {k: geomean([r[ours][key] for r in cells if str(r["k"]) == k]) for k in ks}
                     for key in ("speedup", "bound")} | {"cells": len(cells),
                                                         "speedup_all": geomean([r[ours]["speedup"] for r in cells])}
    return out


def markdown(rep: dict) -> str:
    lines = [f"# SpMM hardware counters ({rep['device']})", "",
             "Nsight Compute, one call per contestant after warm-up, clocks left alone (scripts/profile_spmm_counters.py). "
             "ms: kernel time summed over the call's kernels (no launch overhead); L2 %: time-weighted L2 throughput "
             "as a share of its peak; sectors: L2 sectors read for the L1 (millions); L1 hit: the main kernel's L1 "
             "sector hit rate; bound: cuSPARSE ms / (ms × L2 %), the most a kernel moving the same L2 sectors can "
             "gain on cuSPARSE; x: the measured gain.", "",
             "| graph | K | cuSPARSE ms | L2 % | sectors | L1 hit | GE-SpMM ms | L2 % | sectors | L1 hit | x | bound | "
             "HP-SpMM ms | L2 % | x | bound |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rep["rows"]:
        c, ge, hp = r["cusparse"], r["gespmm"], r["hpspmm"]
        lines.append(
            f"| {r['graph']} | {r['k']} | {c['ms']:.3f} | {c['l2_pct']:.0f} | {c['l2_read_sectors'] / 1e6:.1f} | "
            f"{c['l1_hit_pct']:.1f} | {ge['ms']:.3f} | {ge['l2_pct']:.0f} | {ge['l2_read_sectors'] / 1e6:.1f} | "
            f"{ge['l1_hit_pct']:.1f} | {ge['speedup']:.2f} | {ge['bound']:.2f} | {hp['ms']:.3f} | "
            f"{hp['l2_pct']:.0f} | {hp['speedup']:.2f} | {hp['bound']:.2f} |")
    lines += ["", "## Summary (kernel time, geometric means)", ""]
    for ours, label, over in (("gespmm", "GE-SpMM", "every graph"), ("hpspmm", "HP-SpMM", "the subgraph-sized and RMAT graphs")):
        summ = rep["summary"][ours]
        if not summ["cells"]:
            continue
        gains = ", ".join(f"K = {k}: {g:.2f}× (bound {summ['bound'][k]:.2f}×)" for k, g in summ["speedup"].items() if g)
        lines.append(f"- {label} sum vs cuSPARSE over {over}: {gains}; all {summ['cells']} cells "
                     f"{summ['speedup_all']:.2f}×")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--metrics", action="store_true", help="print the metric list for ncu --metrics")
    mode.add_argument("--run", action="store_true", help="make the calls (under ncu)")
    mode.add_argument("--report", type=Path, metavar="CSV", help="summarise ncu's CSV output")
    parser.add_argument("--manifest", type=Path, default=Path("spmm_counters_calls.json"))
    parser.add_argument("--data", type=Path, default=None, help="folder with cora.mtx, pubmed.mtx, facebook_edges.csv")
    parser.add_argument("--ks", type=int, nargs="*", default=KS)
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks/spmm_counters.json"))
    parser.add_argument("--md", type=Path, default=None, help="markdown table (default: --out with .md)")
    args = parser.parse_args()
    if args.metrics:
        print(",".join(METRICS))
    elif args.run:
        run(args.data, args.ks, args.manifest)
    else:
        from bench_graphs import write_report

        rep = report(args.report, args.manifest)
        write_report(rep, args.out, args.md or args.out.with_suffix(".md"), markdown)
        print(markdown(rep))


if __name__ == "__main__":
    main()
