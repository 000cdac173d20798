"""Model-level speed against PyG: one full-graph training step and one eval forward pass of an experiment's model
against its PyG twin (the same layer stack with PyG's ``GCNConv`` / ``GATConv``, as in ``reproduce.py --pyg``).

A training step is: zero the gradients, forward over the whole graph, cross-entropy on the training nodes
(an index gathered once, so no mask sync is timed), backward, Adam step. The eval pass is one forward under
``torch.no_grad()`` in eval mode. Both models come from the experiment's config (``build_model``) with the same
seed, on the same device-resident batch (``FullGraphDataModule.device_batch``), in the same process. The first
calls are warm-up: kernels compile and each stack builds what it caches (graphfuse caches formats and the GCN
normalisation on the Graph; PyG's ``GCNConv`` recomputes its normalisation every call by default, so GCN gets a
third contestant, PyG with ``cached=True``, PyG's own option for a fixed full graph).

Reported per model: CUDA-event median of ``--repeats`` calls after warm-up, in 4 interleaved rounds
(``bench_graphs.interleaved_samples``), the speedup of graphfuse over each PyG contestant, the host syncs of one
step (``torch.cuda.set_sync_debug_mode``) and its peak memory above the resident tensors. This is the model's
share of a Lightning epoch; docs/results/accuracy.md's ms/epoch also holds Lightning's loop and logging, the same
for both stacks. Needs a GPU.

Usage:
    python scripts/bench_train_step.py --experiments gcn_facebook gat_facebook \\
        "gcn_synthetic data.options.num_nodes=200000 data.options.avg_degree=32" [key=value ...]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from reproduce import PYG_TWINS

from bench_graphs import interleaved_samples, write_report
from bench_spmm import _event_samples
from graphfuse.trainers.build import PygGCN, build_datamodule, build_dataset, build_model, model_kwargs
from graphfuse.trainers.config import load_config


def step_calls(model: torch.nn.Module, batch, train_idx: torch.Tensor, lr: float,
               weight_decay: float) -> dict[str, Callable[[], object]]:
    """The timed calls of one model: a training step and an eval forward pass."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    target = batch.y.index_select(0, train_idx)

    def train_step() -> None:
        model.train()
        optimizer.zero_grad(set_to_none=True)
        logits = model(batch.x, batch.graph).index_select(0, train_idx)
        F.cross_entropy(logits, target).backward()
        optimizer.step()

    @torch.no_grad()
    def eval_forward() -> None:
        model.eval()
        model(batch.x, batch.graph)

    return {"train_step": train_step, "eval_forward": eval_forward}


SYNC_WARNING = "called a synchronizing CUDA operation"


def syncs_of(fn: Callable[[], object]) -> int:
    """Host syncs of one call, as counted by PyTorch's sync debug mode: its warnings that say so (entering the mode
    warns once per process that it is a prototype which "does not detect all synchronizing operations"; counting
    every message with "synchroniz" in it gave the first call measured in a process one sync it did not make)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum(SYNC_WARNING in str(w.message) for w in caught)


def peak_mib(fn: Callable[[], object]) -> float:
    """Peak memory of one call above what was allocated before it, in MiB."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


def bench_experiment(spec: str, overrides: list[str], repeats: int, device: torch.device = torch.device("cuda"),
                     sample: Callable[[Callable[[], object], int], list[float]] = _event_samples) -> dict:
    """Time ``spec``'s model and its PyG contestants on ``device`` (``sample`` times n calls of one)."""
    name, *extra = spec.split()
    cfg = load_config([f"experiment={name}", *extra, *overrides])
    if cfg.sampler.name is not None:
        raise SystemExit(f"bench_train_step: {spec!r} is a sampled experiment; this benchmark times full-graph steps")
    if cfg.model.name not in PYG_TWINS:
        raise SystemExit(f"bench_train_step: {spec!r} trains {cfg.model.name!r}, which has no PyG twin "
                         f"(twins: {', '.join(PYG_TWINS)})")
    dataset = build_dataset(cfg.data)
    batch = build_datamodule(cfg, dataset).device_batch(device)
    train_idx = batch.train_mask.nonzero().view(-1)
    twin = load_config([f"experiment={name}", *extra, *overrides, f"model.name={PYG_TWINS[cfg.model.name]}"]).model
    builders = {"graphfuse": lambda: build_model(cfg.model, dataset.num_features, dataset.num_classes),
                "pyg": lambda: build_model(twin, dataset.num_features, dataset.num_classes)}
    if cfg.model.name == "gcn":
        builders["pyg_cached"] = lambda: PygGCN(dataset.num_features, twin.hidden, dataset.num_classes,
                                                **model_kwargs(twin), cached=True)
    calls, extras = {}, {}
    for stack, build in builders.items():
        torch.manual_seed(cfg.seed)
        model = build().to(device)
        for kind, fn in step_calls(model, batch, train_idx, cfg.optim.lr, cfg.optim.weight_decay).items():
            calls[f"{stack}/{kind}"] = fn
            fn()  # warm-up outside the timing: compiles, builds the caches of each stack
            extras[f"{stack}/{kind}"] = {"syncs": syncs_of(fn), "peak_mib": peak_mib(fn)}
    samples = interleaved_samples(calls, repeats, sample)
    record = {"experiment": spec, "model": cfg.model.name, "dataset": cfg.data.name,
              "nodes": batch.graph.num_nodes, "edges": batch.graph.num_edges, "features": dataset.num_features,
              "results": {}}
    for call, times in samples.items():
        record["results"][call] = {"ms": None if times is None else statistics.median(times), **extras[call]}
    for kind in ("train_step", "eval_forward"):
        ours = record["results"][f"graphfuse/{kind}"]["ms"]
        for stack in builders:
            theirs = record["results"][f"{stack}/{kind}"]["ms"]
            if stack != "graphfuse" and ours and theirs:
                record["results"][f"{stack}/{kind}"]["speedup"] = theirs / ours
    print(f"{spec}: " + ", ".join(f"{c} {r['ms']:.2f} ms" for c, r in record["results"].items() if r["ms"]),
          flush=True)
    return record


def markdown(report: dict) -> str:
    lines = ["# Training step and eval pass against PyG", "",
             f"{report['gpu']}, torch {report['torch']}, {report['date']}. Full graph, fp32; CUDA-event median of "
             f"{report['repeats']} calls after warm-up (interleaved rounds). `x` = the PyG contestant's time / "
             "graphfuse's. `pyg` is the trainer's PyG twin with PyG's defaults (GCNConv recomputes its "
             "normalisation every call), `pyg_cached` GCNConv(cached=True). syncs = host syncs of one call; peak = "
             "memory of one call above the resident tensors. Written by `scripts/bench_train_step.py`.", ""]
    for r in report["experiments"]:
        lines += [f"## {r['experiment']} ({r['model']} on {r['dataset']}: {r['nodes']:,} nodes, {r['edges']:,} "
                  f"edges, {r['features']:,} features)", "",
                  "| stack | train step ms | x | syncs | peak MiB | eval forward ms | x | syncs | peak MiB |",
                  "|---|---|---|---|---|---|---|---|---|"]
        stacks = sorted({call.split("/")[0] for call in r["results"]}, key=lambda s: (s != "graphfuse", s))
        for stack in stacks:
            cells = []
            for kind in ("train_step", "eval_forward"):
                res = r["results"][f"{stack}/{kind}"]
                ms = "OOM" if res["ms"] is None else f"{res['ms']:.2f}"
                speedup = f"{res['speedup']:.2f}" if "speedup" in res else "–"
                cells += [ms, speedup, str(res["syncs"]), f"{res['peak_mib']:.0f}"]
            lines.append(f"| {stack} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", nargs="+", default=["gcn_facebook", "gat_facebook"],
                        help="full-graph GCN/GAT experiments, each optionally followed by its own overrides (quote them)")
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks/train_step.json"))
    parser.add_argument("--md", type=Path, default=Path("docs/benchmarks/train_step.md"))
    parser.add_argument("overrides", nargs="*", help="config overrides applied to every experiment")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_train_step: needs a CUDA GPU")
    report = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name(), "repeats": args.repeats, "experiments": []}
    for spec in args.experiments:
        report["experiments"].append(bench_experiment(spec, args.overrides, args.repeats))
        write_report(report, args.out, args.md, markdown)
    print(markdown(report))


if __name__ == "__main__":
    main()
