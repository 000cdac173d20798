"""scripts/bench_graphs.write_report: every benchmark record names the git commit it measured."""

from __future__ import annotations

import importlib
import json
import subprocess
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.fixture
def bench_graphs(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    return importlib.import_module("bench_graphs")


def test_write_report_records_the_commit(bench_graphs, tmp_path, monkeypatch):
    monkeypatch.delenv("GRAPHFUSE_COMMIT", raising=False)
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=SCRIPTS, capture_output=True,
                              text=True).stdout.strip()
    except OSError:  # no git on the machine
        head = ""
    report = {"device": "cpu", "value": 1}
    bench_graphs.write_report(report, tmp_path / "r.json", tmp_path / "r.md", lambda r: f"# {r['device']}\n")
    commit = json.loads((tmp_path / "r.json").read_text())["commit"]
    if head:  # a git checkout (CI's is): the commit is HEAD's, possibly marked dirty
        assert commit.removesuffix("-dirty") == head
    else:
        assert commit == "unknown"
    assert (tmp_path / "r.md").read_text() == f"# cpu\n\nMeasured at commit {commit}.\n"


def test_write_report_keeps_a_commit_given_by_the_script(bench_graphs, tmp_path):
    report = {"commit": "abc1234"}
    bench_graphs.write_report(report, tmp_path / "r.json", tmp_path / "r.md", lambda r: "t")
    assert json.loads((tmp_path / "r.json").read_text())["commit"] == "abc1234"


def test_write_report_takes_the_commit_from_the_environment(bench_graphs, tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHFUSE_COMMIT", "1873d31")
    bench_graphs.write_report({}, tmp_path / "r.json", tmp_path / "r.md", lambda r: "t")
    assert json.loads((tmp_path / "r.json").read_text())["commit"] == "1873d31"


def test_bench_spmm_checks_every_output_before_timing(monkeypatch):
    """bench_spmm compared only GE-SpMM sum with cuSPARSE (and only recorded the error): a contestant giving a
    wrong answer was timed like the others."""
    import torch

    monkeypatch.syspath_prepend(str(SCRIPTS))
    bench = importlib.import_module("bench_spmm")
    import graphfuse

    n = 300
    gen = torch.Generator().manual_seed(0)
    ei = torch.randint(0, n, (2, 3000), generator=gen)
    ei = torch.cat([ei, torch.stack([torch.arange(100), torch.zeros(100, dtype=torch.long)])], 1)  # a hub > S
    w = bench.gcn_weights(ei, n)
    g = graphfuse.Graph(ei, num_nodes=n, edge_weight=w)
    a = torch.sparse_csr_tensor(g.csr.rowptr, g.csr.col, w[g.csr.perm], size=(n, n))
    x = torch.randn(n, 7, generator=gen)
    order = torch.randperm(n, generator=gen)
    gr = graphfuse.graph.permute_nodes(g, order)
    right = {
        "cusparse": lambda: torch.sparse.mm(a, x),
        "gespmm": lambda: graphfuse.aggregate(g, x),
        "gespmm_mean": lambda: graphfuse.aggregate(g, x, reduce="mean"),
        "gespmm_max": lambda: graphfuse.aggregate(g, x, reduce="max"),
        "es64": lambda: graphfuse.aggregate(g, x, sampling=graphfuse.EdgeSampling(bench.ES_WIDTH, "random")),
        "gespmm_reordered": lambda: graphfuse.aggregate(gr, x[order]),
    }
    assert bench.output_problems(g, a, x, right, order) == {}
    wrong = {
        "gas": lambda: graphfuse.aggregate(g, x) * 1.001,
        "gespmm_max": lambda: graphfuse.aggregate(g, x, reduce="max").roll(1, 0),
        "es64": lambda: graphfuse.aggregate(g, x, reduce="mean"),
        "gespmm_reordered": lambda: graphfuse.aggregate(gr, x),
        "hpspmm": lambda: torch.full((n, 7), float("nan")),
    }
    assert set(bench.output_problems(g, a, x, wrong, order)) == set(wrong)


def test_bench_spmm_cold_baseline(monkeypatch):
    """The cold cuSPARSE operand built from unsorted COO is the graph's matrix (duplicates summed as the
    COO-tensor way sums them), and a cold ratio is taken against the faster of cuSPARSE's two ways."""
    import torch

    monkeypatch.syspath_prepend(str(SCRIPTS))
    bench = importlib.import_module("bench_spmm")
    n = 50
    gen = torch.Generator().manual_seed(1)
    ei = torch.randint(0, n, (2, 400), generator=gen)
    ei[:, 1] = ei[:, 0]  # a duplicate
    w = torch.rand(400, generator=gen, dtype=torch.float64)
    x = torch.randn(n, 5, generator=gen, dtype=torch.float64)
    want = torch.zeros(n, 5, dtype=torch.float64).index_add_(0, ei[1], x[ei[0]] * w.unsqueeze(1))
    torch.testing.assert_close(torch.sparse.mm(bench.sorted_csr(ei, w, n), x), want)
    coo = torch.sparse_coo_tensor(torch.stack([ei[1], ei[0]]), w, (n, n)).to_sparse_csr()
    torch.testing.assert_close(torch.sparse.mm(coo, x), want)
    ms = {"cusparse": 1.0, "cusparse_cold": 4.0, "cusparse_cold_coo": 3.0, "gespmm_cold": 2.0, "hpspmm_cold": None}
    assert bench.speedup(ms, "gespmm_cold", cold=True) == 1.5
    assert bench.speedup(ms, "hpspmm_cold", cold=True) is None
    assert bench.speedup({"cusparse": 1.0, "cusparse_cold": 4.0, "cusparse_cold_coo": None, "gespmm_cold": 2.0},
                         "gespmm_cold", cold=True) == 2.0
