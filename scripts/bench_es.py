"""Edge-sampled inference (ES-SpMM): accuracy and forward time of a trained model for each width S and strategy.

For each experiment (any config of configs/experiment, plus overrides): train it once (``trainers.run.train``,
run directory under ``--runs-dir``), reload the best checkpoint, evaluate the full-graph forward pass without
sampling, then under ``graphfuse.use_sampling(EdgeSampling(S, strategy))`` for S in ``--widths`` and each
strategy. Every ``aggregate`` of the model is sampled (GCN, GraphSAGE, GraphSAINT layers). Reported: test
accuracy, its change against the unsampled model, and the median time of the forward pass (CUDA events on a GPU,
synchronised wall time on a CPU; 20 runs after warm-up) with its speedup.

The sampled path runs the engine's ``sampled_aggregate`` op: the ES-SpMM kernel on CUDA (kernels/es_spmm.cu),
the plain-PyTorch reference on CPU; both keep the same entries, so the accuracies agree and only the times say
which device ran.

Usage:
    python scripts/bench_es.py --experiments gcn_facebook "gcn_facebook model=sage model.aggr=mean" \\
        --out docs/benchmarks/es.json --md docs/benchmarks/es.md [key=value ...]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time
from pathlib import Path

import torch

import graphfuse
from bench_graphs import write_report
from graphfuse.data import DatasetNotFoundError
from graphfuse.engine.edge_sampling import STRATEGIES, EdgeSampling
from graphfuse.trainers.build import build_datamodule, build_dataset, build_model
from graphfuse.trainers.config import ConfigError, load_config
from graphfuse.trainers.module import NodeClassifier
from graphfuse.trainers.run import train

WIDTHS = [16, 32, 64, 128, 256, 512]


def forward_ms(module: NodeClassifier, batch, repeats: int = 20, warmup: int = 3) -> float:
    """Median time of one eval forward pass (ms) over ``repeats`` runs after ``warmup``: CUDA events around each
    pass on a GPU (after a sync), synchronised wall time on a CPU."""
    for _ in range(warmup):
        module(batch.x, batch.graph)
    times = []
    for _ in range(repeats):
        if batch.x.is_cuda:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            module(batch.x, batch.graph)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            begin = time.perf_counter()
            module(batch.x, batch.graph)
            times.append((time.perf_counter() - begin) * 1e3)
    return statistics.median(times)


def bench_experiment(spec: str, overrides: list[str], runs_dir: Path, widths: list[int]) -> dict:
    name, *extra = spec.split()
    folder = "_".join([*spec.split(), *overrides]).replace("=", "-").replace("/", "-")  # a run per settings
    cfg = load_config([f"experiment={name}", *extra, *overrides, f"output_dir={runs_dir / folder}"])
    metrics = train(cfg, verbose=False)
    dataset = build_dataset(cfg.data)
    model = build_model(cfg.model, dataset.num_features, dataset.num_classes)
    module = NodeClassifier(model, dataset.num_classes, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
    state = torch.load(metrics["best_checkpoint"], map_location="cpu", weights_only=False)["state_dict"]
    module.load_state_dict(state)
    device = torch.device("cuda" if torch.cuda.is_available() and cfg.trainer.accelerator != "cpu" else "cpu")
    module.to(device).eval()
    batch = build_datamodule(cfg, dataset).device_batch(device)
    degree = batch.graph.in_degree.float()
    record = {"experiment": spec, "model": cfg.model.name, "dataset": cfg.data.name, "device": str(device),
              "nodes": batch.graph.num_nodes, "edges": batch.graph.num_edges, "mean_in_degree": float(degree.mean()),
              "max_in_degree": int(degree.max()), "rows": []}
    with torch.no_grad():
        base = module.evaluate(batch)["test/acc"]
        base_ms = forward_ms(module, batch)
        record["full"] = {"test_acc": base, "forward_ms": base_ms}
        for width in widths:
            for strategy in STRATEGIES:
                with graphfuse.use_sampling(EdgeSampling(width, strategy)):
                    acc = module.evaluate(batch)["test/acc"]
                    ms = forward_ms(module, batch)
                kept = float(degree.clamp(max=width).sum() / degree.sum())
                record["rows"].append({"width": width, "strategy": strategy, "test_acc": acc,
                                       "delta_points": 100 * (acc - base), "forward_ms": ms,
                                       "speedup": base_ms / ms, "edges_kept": kept})
    print(f"{spec}: full test acc {100 * base:.2f}", flush=True)
    return record


def markdown(report: dict) -> str:
    lines = ["# Edge-sampled inference (ES-SpMM semantics)", "",
             f"{report['date']}, torch {report['torch']}{', ' + report['gpu'] if report.get('gpu') else ''}. Test "
             "accuracy of the best checkpoint with every aggregation sampled to at most S in-edges per node; Δ in "
             "points against the unsampled model; forward = one eval pass in ms (median of 20 after warm-up: CUDA "
             "events on a GPU, synchronised wall time on a CPU). On CUDA "
             "the sampled path is the ES-SpMM kernel and the unsampled one the default (\"auto\") backend; on CPU "
             "both are the plain-PyTorch reference.", ""]
    for r in report["experiments"]:
        lines += [f"## {r['experiment']} ({r['model']} on {r['dataset']}, {r['device']})", "",
                  f"{r['nodes']:,} nodes, {r['edges']:,} edges, mean in-degree {r['mean_in_degree']:.1f}, max "
                  f"{r['max_in_degree']:,}. Unsampled: test {100 * r['full']['test_acc']:.2f}%, forward "
                  f"{r['full']['forward_ms']:.2f} ms.", "",
                  "| S | strategy | edges kept | test acc (%) | Δ (points) | forward ms | speedup |",
                  "|---|---|---|---|---|---|---|"]
        for row in r["rows"]:
            lines.append(f"| {row['width']} | {row['strategy']} | {100 * row['edges_kept']:.1f}% | "
                         f"{100 * row['test_acc']:.2f} | {row['delta_points']:+.2f} | {row['forward_ms']:.2f} | "
                         f"{row['speedup']:.2f} |")
        lines.append("")
        for strategy in STRATEGIES:
            ok = [row for row in r["rows"] if row["strategy"] == strategy and row["delta_points"] > -1.0]
            best = min(ok, key=lambda row: row["width"]) if ok else None
            lines.append(f"- {strategy}: smallest S losing < 1 point: "
                         + (f"{best['width']} ({best['delta_points']:+.2f} points, {best['speedup']:.2f}x)"
                            if best else "none"))
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", nargs="+", default=["gcn_facebook", "gcn_facebook model=sage model.aggr=mean"],
                        help="experiment names, each optionally followed by its own overrides (quote them)")
    parser.add_argument("--widths", type=int, nargs="+", default=WIDTHS)
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/bench_es"))
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks/es.json"))
    parser.add_argument("--md", type=Path, default=Path("docs/benchmarks/es.md"))
    parser.add_argument("overrides", nargs="*", help="config overrides applied to every experiment")
    args = parser.parse_args()
    report = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None, "experiments": []}
    for spec in args.experiments:
        try:
            report["experiments"].append(bench_experiment(spec, args.overrides, args.runs_dir, args.widths))
        except (ConfigError, DatasetNotFoundError) as error:  # e.g. the run folder holds a run of other settings
            raise SystemExit(f"bench_es: error: {error} (runs go under --runs-dir={args.runs_dir})") from None
        write_report(report, args.out, args.md, markdown)
    print(markdown(report))


if __name__ == "__main__":
    main()
