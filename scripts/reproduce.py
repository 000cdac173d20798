"""Reproduce the accuracy table: run experiments over seeds 0..N-1 and write docs/results/accuracy.{json,md}.

Every run trains in this process through ``graphfuse.trainers.run.train`` and reports the test accuracy of
its best-validation checkpoint. ``--pyg`` adds, for every ``gcn_*`` and ``gat_*`` experiment, its PyTorch
Geometric twin (``model.name=pyg_gcn`` / ``pyg_gat``): the same data, split, layer stack and
hyper-parameters with PyG's ``GCNConv`` / ``GATConv`` in place of graphfuse's.

Results are merged into an existing accuracy.json (entries that were re-run are replaced), and accuracy.md is
regenerated from the merged file. A sweep that was stopped (SIGTERM, Ctrl-C) continues with the same command and
``--resume``: each seed's finished run of the same settings is kept, the one that was stopped continues from its
last.ckpt, and the others start.

Examples:
    python scripts/reproduce.py --experiments gcn_cora gat_cora sage_cora --seeds 5
    python scripts/reproduce.py --experiments gcn_facebook gat_facebook --seeds 5 --pyg
    python scripts/reproduce.py --experiments gcn_cora --seeds 1 --out /tmp/acc --runs-dir /tmp/acc/runs
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PYG_TWINS = {"gcn": "pyg_gcn", "gat": "pyg_gat"}
"""Model of an experiment → its PyG reference twin."""


def variants(experiment: str, model: str, pyg: bool) -> list[tuple[str, list[str]]]:
    """The (result name, extra overrides) runs of ``experiment`` whose model is ``model``."""
    runs = [(experiment, [])]
    if pyg and model in PYG_TWINS:
        runs.append((f"{experiment}_pyg", [f"model.name={PYG_TWINS[model]}"]))
    return runs


def summarize(name: str, experiment: str, runs: list[dict[str, Any]], overrides: list[str]) -> dict[str, Any]:
    """One accuracy.json entry from the metrics.json contents of ``runs`` (one per seed), with the commit run."""
    from bench_graphs import measured_commit

    test = [r["test"]["acc"] for r in runs]
    return {
        "name": name,
        "experiment": experiment,
        "model": runs[0]["model"],
        "dataset": runs[0]["dataset"],
        "overrides": overrides,
        "seeds": [r["seed"] for r in runs],
        "test_acc": test,
        "test_f1_micro": [r["test"]["f1_micro"] for r in runs],
        "val_acc": [r["val"]["acc"] for r in runs],
        "best_epoch": [r["best_epoch"] for r in runs],
        "epochs_run": [r["epochs_run"] for r in runs],
        "mean": statistics.fmean(test),
        "std": statistics.stdev(test) if len(test) > 1 else 0.0,
        "mean_epoch_time_s": statistics.fmean(r["mean_epoch_time_s"] for r in runs),
        "median_epoch_time_s": statistics.fmean(r["median_epoch_time_s"] for r in runs),
        "device": runs[0]["device"],
        "versions": runs[0]["versions"],
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": measured_commit(),
    }


def _epoch_ms(r: dict[str, Any]) -> str:
    if "median_epoch_time_s" in r:
        return f"{r['median_epoch_time_s'] * 1e3:.1f}"
    return f"{r['mean_epoch_time_s'] * 1e3:.1f}*"


def _settings(r: dict[str, Any]) -> list[str]:
    """A result's command-line overrides that change what was trained: not the PyG twin's model switch, logging
    and display switches, nor trainer.resume."""
    return [o for o in r["overrides"] if not o.startswith(("model.name=", "logger.", "trainer.resume=",
                                                            "trainer.progress_bar="))]


def markdown(results: dict[str, dict[str, Any]]) -> str:
    """The markdown table of ``results`` (accuracy.json's ``results``), with PyG twins side by side."""
    lines = [
        "# Accuracy",
        "",
        "Test accuracy of the best-validation checkpoint, mean ± sample standard deviation over seeds 0..N-1.",
        "`*_pyg` rows are the PyTorch Geometric reference: the same data, split, layer stack and",
        "hyper-parameters with PyG's GCNConv/GATConv. Written by `scripts/reproduce.py`. ms/epoch: the median",
        "epoch time after the first epoch (which compiles kernels and builds formats), averaged over seeds; `*`: a",
        "row recorded before that figure existed, holding the mean over all epochs, the first included. An epoch",
        "is Lightning's training loop with its logging, which on graphs this small costs both stacks most of the",
        "time; the model's own training step against PyG's is in docs/benchmarks/train_step.md.",
        "",
        "| run | model | dataset | seeds | test acc (%) | Δ vs PyG (points) | val acc (%) | ms/epoch | device | date "
        "| overrides |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in sorted(results):
        r = results[name]
        twin = results.get(f"{name}_pyg")
        # else Δ compared other hyper-parameters, seeds or devices
        same = twin is not None and all(twin[k] == r[k] for k in ("seeds", "device")) and _settings(twin) == _settings(r)
        delta = f"{(r['mean'] - twin['mean']) * 100:+.2f}" if same else ""
        lines.append(
            f"| {name} | {r['model']} | {r['dataset']} | {len(r['seeds'])} | "
            f"{r['mean'] * 100:.2f} ± {r['std'] * 100:.2f} | {delta} | "
            f"{statistics.fmean(r['val_acc']) * 100:.2f} | {_epoch_ms(r)} | {r['device']} | "
            f"{r['date'][:10]} | {' '.join(_settings(r))} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", nargs="+", default=["gcn_cora"], help="experiment names (configs/experiment)")
    parser.add_argument("--seeds", type=int, default=5, help="run seeds 0..N-1 (default 5)")
    parser.add_argument("--pyg", action="store_true", help="also run the PyG twins of gcn_*/gat_* experiments")
    parser.add_argument("--out", type=Path, default=Path("docs/results"),
                        help="folder of accuracy.json and accuracy.md (default docs/results)")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/reproduce"),
                        help="folder of the run directories <name>/seed<k> (default runs/reproduce)")
    parser.add_argument("--resume", action="store_true",
                        help="continue a stopped sweep: keep each seed's finished run of the same settings, continue "
                             "a stopped one from its last.ckpt, start the others")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="config overrides applied to every run, e.g. trainer.accelerator=cpu (before "
                             "--experiments, or after --)")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds must be >= 1; got {args.seeds}")
    for name in args.experiments:  # --experiments takes every later word: an override would land here
        if "=" in name:
            parser.error(f"--experiments got {name!r}: put key=value overrides before --experiments or after --")
    keys = {item.partition("=")[0].lstrip("+") for item in args.overrides}
    if "experiment" in keys:  # it replaced every --experiments entry, whose names the results then carried
        parser.error("experiment cannot be overridden: name the experiments with --experiments")
    if "trainer.resume" in keys:  # it applied to every seed, and a seed with no last.ckpt was refused
        parser.error("trainer.resume cannot be overridden: --resume continues a stopped sweep seed by seed")
    overridden = sorted(keys & {"seed", "output_dir"})
    if overridden:
        parser.error(f"{', '.join(overridden)} cannot be overridden: every seed 0..N-1 runs in its own directory "
                     "under --runs-dir (use --seeds and --runs-dir)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the reproduction; return the exit status (2 on a bad config or missing dataset, 143/130 when stopped
    by SIGTERM/Ctrl-C; the experiments that finished are written in every case)."""
    args = parse_args(argv)
    from graphfuse.data import DatasetNotFoundError
    from graphfuse.trainers.cli import interrupted, quiet_lightning
    from graphfuse.trainers.config import ConfigError, last_checkpoint, load_config
    from graphfuse.trainers.run import finished_run, train

    quiet_lightning()
    results: dict[str, dict[str, Any]] = {}
    status = 0
    cfg = None  # the running seed's config
    try:
        # every experiment composed before any trains: a typo in the last one must not cost the earlier runs
        models = {e: load_config([f"experiment={e}", *args.overrides]).model.name for e in args.experiments}
        for experiment, model in models.items():
            for name, extra in variants(experiment, model, args.pyg):
                overrides = [*args.overrides, *extra]
                runs = []
                for seed in range(args.seeds):
                    cfg = load_config([
                        f"experiment={experiment}", f"seed={seed}", "trainer.progress_bar=false",
                        f"output_dir={args.runs_dir / name / f'seed{seed}'}", *overrides,
                    ])
                    metrics = finished_run(cfg) if args.resume else None
                    kept = metrics is not None
                    if not kept:
                        cfg.trainer.resume = args.resume and last_checkpoint(cfg).is_file()
                        metrics = train(cfg, verbose=False)
                    print(f"{name} seed {seed}: test acc {metrics['test']['acc']:.4f} (best epoch "
                          f"{metrics['best_epoch']}, {metrics['wall_time_s']:.1f} s{', kept' if kept else ''})",
                          flush=True)
                    runs.append(metrics)
                results[name] = summarize(name, experiment, runs, overrides)
                r = results[name]
                seeds = f"{len(runs)} seed{'s' if len(runs) != 1 else ''}"
                print(f"{name}: {r['mean'] * 100:.2f} ± {r['std'] * 100:.2f} over {seeds}", flush=True)
    except (ConfigError, DatasetNotFoundError) as error:  # e.g. a later experiment's dataset is missing
        print(f"reproduce: error: {error} (each seed runs in --runs-dir/<name>/seed<k>: another --runs-dir keeps "
              "earlier runs)", file=sys.stderr)
        status = 2
    except (KeyboardInterrupt, SystemExit) as stop:  # SIGTERM or Ctrl-C inside a run
        status = interrupted("reproduce", stop, cfg, "run the same command with --resume")
    if not results:
        return status
    args.out.mkdir(parents=True, exist_ok=True)  # the experiments that finished are kept
    path = args.out / "accuracy.json"
    merged: dict[str, dict[str, Any]] = {}
    if path.is_file():
        merged = json.loads(path.read_text()).get("results", {})
    merged.update(results)
    path.write_text(json.dumps({"results": dict(sorted(merged.items()))}, indent=2) + "\n")
    (args.out / "accuracy.md").write_text(markdown(merged))
    print(f"wrote {path} and {args.out / 'accuracy.md'}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
