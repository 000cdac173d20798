"""Benchmark graphs shared by the bench_*.py scripts: the MatrixMarket / edge-list files of ../shared/datasets
(carried as .benchdata) and the RMAT family of graphfuse.data.synthetic.rmat_graph; ``interleaved_samples``,
the scripts' timing loop; and ``write_report``, how every script writes its JSON and markdown (with the git
commit measured and the versions).

Shapes:
    every function returns ``(edge_index (2, E) int64 on device, num_nodes)``; graphs are symmetrised and
    deduplicated, edges sorted by (source, target).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Callable
from pathlib import Path

import torch
from torch_geometric.utils import to_undirected

from graphfuse.data.synthetic import rmat_graph

ROUNDS = 4  # interleaved timing rounds (see interleaved_samples)


def interleaved_samples(calls: dict[str, Callable[[], object]], repeats: int,
                        sample: Callable[[Callable[[], object], int], list[float]], rounds: int = ROUNDS,
                        warmup: int = 3) -> dict[str, list[float] | None]:
    """The times in ms of ``repeats`` runs of each call (None on out-of-memory), ``sample(fn, n)`` timing ``n``
    runs of one call (CUDA events or synchronised wall time), taken in ``rounds`` interleaved rounds (every
    contestant in turn, each round), so that a stretch of host or clock noise on the machine falls on all
    contestants rather than on whichever was being timed then."""
    samples: dict[str, list[float] | None] = {}
    for name, fn in calls.items():
        try:
            for _ in range(warmup):
                fn()
            torch.cuda.synchronize()
            samples[name] = []
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            samples[name] = None
    for r in range(rounds):  # exactly ``repeats`` runs, spread as evenly as the rounds allow
        runs = repeats // rounds + (r < repeats % rounds)
        for name, fn in calls.items():
            if samples[name] is None or not runs:
                continue
            try:
                samples[name] += sample(fn, runs)
            except torch.cuda.OutOfMemoryError:
                torch.cuda.empty_cache()
                samples[name] = None
    return samples


def read_mtx(path: Path, device: str) -> tuple[torch.Tensor, int]:
    """A MatrixMarket pattern file (1-based, one triangle stored), symmetrised."""
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("%")]
    n = int(lines[0].split()[0])
    pairs = torch.tensor([[int(v) for v in ln.split()[:2]] for ln in lines[1:]], dtype=torch.long) - 1
    return to_undirected(pairs.t().contiguous().to(device), num_nodes=n), n


def read_edge_csv(path: Path, device: str) -> tuple[torch.Tensor, int]:
    """A ``id_1,id_2`` edge list with a header line (MUSAE Facebook), symmetrised."""
    rows = path.read_text().splitlines()[1:]
    pairs = torch.tensor([[int(v) for v in ln.split(",")] for ln in rows if ln], dtype=torch.long)
    n = int(pairs.max()) + 1
    return to_undirected(pairs.t().contiguous().to(device), num_nodes=n), n


def rmat(scale: int, drawn: int, seed: int, device: str) -> tuple[torch.Tensor, int]:
    """RMAT (a=0.57, b=c=0.19) with ``drawn`` edges over 2**scale nodes, ids permuted, symmetrised."""
    return rmat_graph(scale, drawn, seed, device), 1 << scale


def git_commit() -> str:
    """The checkout's commit (short hash, ``-dirty`` when tracked files differ from it; "unknown" outside git)."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        return commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def measured_commit() -> str:
    """The commit a measurement is recorded under: ``$GRAPHFUSE_COMMIT`` when set (for a copy of the tree whose
    git metadata is missing or stale, as on a lent GPU machine), else :func:`git_commit`."""
    return os.environ.get("GRAPHFUSE_COMMIT") or git_commit()


def versions() -> dict[str, str | None]:
    """The versions a measurement depends on: Python, torch, its CUDA and CuPy (None where absent)."""
    try:
        import cupy
    except ImportError:
        cupy = None
    return {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cupy": None if cupy is None else cupy.__version__}


def write_report(report: dict, out: Path, md: Path, markdown: Callable[[dict], str]) -> None:
    """Write ``report`` as JSON to ``out`` and ``markdown(report)`` to ``md``, creating their folders; both record
    the git commit measured (``report["commit"]``, set here to :func:`measured_commit` when the script did not).
    The JSON also records :func:`versions` (``report["versions"]``)."""
    report.setdefault("commit", measured_commit())
    report.setdefault("versions", versions())
    for path in (out, md):
        path.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    md.write_text(markdown(report).rstrip("\n") + f"\n\nMeasured at commit {report['commit']}.\n")
