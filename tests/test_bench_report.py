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


@pytest.fixture
def scripts(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    return lambda name: importlib.import_module(name)


DOCS = SCRIPTS.parent / "docs" / "benchmarks"


def test_bench_spmm_report_says_why_a_time_is_missing(scripts):
    """A contestant left out for a wrong output was shown as OOM and summarised as 'a time missing'; a width
    with no ratio printed 'OOMx'; the replayed geomeans never said how many cells they cover (review)."""
    bench = scripts("bench_spmm")
    report = json.loads((DOCS / "spmm.json").read_text())
    cora = report["graphs"][0]
    row = cora["results"]["64"]
    row["output_problems"] = {"gespmm": "max excess 1e-3"}
    row["ms"]["gespmm"] = row["gflops"]["gespmm"] = row["floor_fraction"]["gespmm"] = None
    row["graph_replay_ms"]["gespmm"] = None
    cora["results"]["128"]["ms"]["cusparse"] = None  # out of memory
    report["summary"] = bench.summarise(report["graphs"])
    assert report["summary"]["missing"] == ["cora.mtx K=64 (wrong output)", "cora.mtx K=128 (out of memory)"]
    assert report["summary"]["graph_replay_missing"] == ["cora.mtx K=64 (wrong output)"]
    md = bench.markdown(report)
    line = next(ln for ln in md.splitlines() if ln.startswith("| cora.mtx | 2,708 | 13,264 | 64 |"))
    assert "| WRONG | – |" in line and "OOM" not in line
    assert "- those geometric means cover 25 cells; left out: cora.mtx K=64 (wrong output), cora.mtx K=128 " \
           "(out of memory)" in md
    assert "- the replayed geometric means cover 26 cells; left out: cora.mtx K=64 (wrong output)" in md
    hp = report["graphs"][-1]["results"]["64"]["graph_replay_ms"]
    hp["hpspmm"] = None
    report["summary"] = bench.summarise(report["graphs"])
    replayed = report["summary"]["hpspmm_graph_replay"]
    assert replayed["cells"] == 14
    assert replayed["missing"] == [f"{report['graphs'][-1]['name']} K=64 (not capturable or out of memory)"]
    assert "- same, both captured in a CUDA graph and replayed (GPU time only) (subgraph" in bench.markdown(report)
    only_32 = [{**gr, "results": {"32": gr["results"]["32"]}} for gr in report["graphs"]]
    assert "geometric mean at K=64: –x" in bench.markdown({**report, "summary": bench.summarise(only_32)})


def test_bench_sddmm_nan_output_is_wrong_and_an_oom_is_reported(scripts):
    """max_rel_err dropped NaN (Python's max(0.0, nan) is 0.0), so a NaN output passed the check; an
    out-of-memory HP-SDDMM made the markdown raise, losing the table and the graphs after it (review)."""
    import torch

    bench = scripts("bench_sddmm")
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(6, 5, generator=gen), torch.randn(6, 5, generator=gen)
    src, dst = torch.tensor([0, 1, 2, 5]), torch.tensor([1, 2, 3, 0])
    out = (a[dst] * b[src]).sum(-1)
    assert bench.max_rel_err(out, a, b, src, dst) < 1e-6
    for bad in (0, slice(None)):
        poisoned = out.clone()
        poisoned[bad] = float("nan")
        assert not bench.max_rel_err(poisoned, a, b, src, dst) <= bench.MAX_REL_ERR
    report = json.loads((DOCS / "sddmm.json").read_text())
    row = report["graphs"][0]["results"]["32"]
    row["ms"]["hp_sddmm"] = row["max_rel_err_vs_fp64"] = row["speedup_vs_cusparse"] = row["speedup_vs_pytorch"] = None
    line = next(ln for ln in bench.markdown(report).splitlines() if ln.startswith("| cora.mtx |"))
    assert line == "| cora.mtx | 2,708 | 13,264 | 32 | OOM | 0.089 | 0.148 | – | 0.093 | – | OOM |"


def test_interleaved_samples_takes_exactly_the_runs_asked_for(scripts, monkeypatch):
    """Rounds of ceil(repeats / rounds) took 24 samples for --repeats 21 while the report said 21 (review)."""
    import torch

    bench = scripts("bench_graphs")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    for repeats in (1, 20, 21, 30, 40):
        got = bench.interleaved_samples({"a": lambda: None, "b": lambda: None}, repeats,
                                        lambda fn, n: [0.0] * n, rounds=4, warmup=0)
        assert [len(v) for v in got.values()] == [repeats, repeats]


def test_bench_graph_processing_acceptance_depends_on_correctness(scripts):
    """PASS never depended on the outputs: a processed graph of another structure, or attention coefficients
    far from float64, still read PASS; full-graph Facebook's check sat under the graph before it (review)."""
    bench = scripts("bench_graph_processing")
    report = json.loads((DOCS / "graph_processing.json").read_text())
    cora = next(gr for gr in report["graphs"] if gr["name"] == "cora")
    att = cora["results"]["gat_attention_fwd"]
    att["max_abs_err_vs_fp64"] = {"ours": 1e-7, "pyg": 2e-7}
    line = bench.correctness(cora)
    assert line.startswith("- cora: ") and line.count("PASS") == 2 and "FAIL" not in line
    att["max_abs_err_vs_fp64"] = {"ours": 3e-6, "pyg": 1e-6}
    assert bench.correctness(cora).endswith("FAIL)")
    cora["results"]["gcn"]["check"]["structure_equal"] = False
    assert "True" not in bench.correctness(cora) and bench.correctness(cora).count("FAIL") == 2
    lines = bench.acceptance(report["graphs"])
    assert sum(ln.startswith("- facebook: ") for ln in lines) == 1


def test_git_commit_is_marked_dirty_exactly_when_tracked_files_differ(scripts, monkeypatch):
    bench = scripts("bench_graphs")

    def git(status):
        def run(args, **kwargs):
            out = {"rev-parse": "abc1234\n", "status": status}[args[1]]
            return subprocess.CompletedProcess(args, 0, stdout=out, stderr="")
        return run

    monkeypatch.setattr(bench.subprocess, "run", git(" M framework/graph/norm.py\n"))
    assert bench.git_commit() == "abc1234-dirty"
    monkeypatch.setattr(bench.subprocess, "run", git(""))
    assert bench.git_commit() == "abc1234"


def _edges(edge_index) -> list[tuple[int, int]]:
    return sorted(map(tuple, edge_index.t().tolist()))


@pytest.mark.parametrize(("reader", "name", "text"), [
    ("read_mtx", "g.mtx", "%%MatrixMarket matrix coordinate pattern symmetric\n% a comment\n3 3 2\n1 2\n3 2\n"),  # 1-based
    ("read_edge_csv", "edges.csv", "id_1,id_2\n0,1\n2,1\n"),  # a header line
])
def test_graph_readers_number_from_zero_and_symmetrise(scripts, tmp_path, reader, name, text):
    bench = scripts("bench_graphs")
    path = tmp_path / name
    path.write_text(text)
    edge_index, n = getattr(bench, reader)(path, "cpu")
    assert n == 3 and _edges(edge_index) == [(0, 1), (1, 0), (1, 2), (2, 1)]


def test_bench_samplers_merge_replaces_only_rows_of_the_same_device(scripts, tmp_path):
    """A GPU run replaces the GPU rows of a graph and sampler and keeps the CPU rows, with their own run's
    'measured' (date, torch, commit)."""
    import json

    bench = scripts("bench_samplers")

    def row(device, device_name, ms):
        return {"device": device, "device_name": device_name, "graph": "facebook", "sampler": "saint_rw",
                "ms_per_batch": ms}

    path = tmp_path / "samplers.json"
    old = {"date": "2026-01-01", "torch": "2.12.0", "commit": "aaa1111"}
    new = {"date": "2026-02-01", "torch": "2.13.0", "commit": "bbb2222"}
    path.write_text(json.dumps(bench.merge(path, [row("cpu", "cpu (x86_64, 16 cores)", 40.0),
                                                  row("cuda", "NVIDIA H100", 2.0)], old)))
    merged = bench.merge(path, [row("cuda", "NVIDIA H100", 1.5)], new)
    by_device = {r["device_name"]: r for r in merged["results"]}
    assert len(merged["results"]) == 2 and merged["meta"] == new
    assert (by_device["NVIDIA H100"]["ms_per_batch"], by_device["NVIDIA H100"]["measured"]) == (1.5, new)
    assert (by_device["cpu (x86_64, 16 cores)"]["ms_per_batch"], by_device["cpu (x86_64, 16 cores)"]["measured"]) == \
        (40.0, old)


def _cell(ms, problems=None):
    return {"ms": ms, "output_problems": problems or {}}


def test_bench_spmm_summary_names_a_wrong_baseline_and_the_worst_cell(scripts):
    """A cell whose cuSPARSE output was wrong (no baseline time) is left out as 'wrong output', not as out of
    memory; the worst cell is the one with the smallest speedup."""
    bench = scripts("bench_spmm")
    graphs = [{"name": "g1", "results": {"32": _cell({"cusparse": 2.0, "gespmm": 1.0}),        # 2.0x
                                         "64": _cell({"cusparse": 1.0, "gespmm": 2.0})}},      # 0.5x
              {"name": "g2", "results": {"32": _cell({"cusparse": None, "gespmm": 1.0}, {"cusparse": "NaN rows"}),
                                         "64": _cell({"cusparse": None, "gespmm": 1.0})}}]     # out of memory
    summary = bench.speedup_summary(graphs, "gespmm", ("32", "64"))
    assert summary["missing"] == ["g2 K=32 (wrong output)", "g2 K=64 (out of memory)"]
    assert summary["worst_cell"] == {"speedup": 0.5, "graph": "g1", "K": 64}
    assert summary["cells"] == 2 and summary["geomean"] == pytest.approx(1.0)


def test_bench_graph_processing_attention_check_is_floored_at_1e_6(scripts):
    """PyG's float32 error can be tiny on a small graph: ours passes while within ATTENTION_SLACK x 1e-6."""
    bench = scripts("bench_graph_processing")

    def graph(ours, pyg):
        return {"name": "cora", "results": {"gcn": {"check": {"structure_equal": True, "max_rel_value_diff": 1e-7}},
                                            "gat_attention_fwd": {"max_abs_err_vs_fp64": {"ours": ours, "pyg": pyg}}}}

    assert bench.ATTENTION_SLACK * 1e-6 > 1.5e-6
    line = bench.correctness(graph(1.5e-6, 1e-8))
    assert line.count("PASS") == 2 and "FAIL" not in line
    assert bench.correctness(graph(bench.ATTENTION_SLACK * 1e-6 * 1.5, 1e-8)).endswith("FAIL)")


def test_bench_train_step_counts_only_the_sync_warnings(scripts, monkeypatch):
    """Entering torch's sync debug mode warns once per process that it "does not yet detect all synchronizing
    operations": that notice is not a sync (it made the first call measured in a process report one)."""
    import warnings

    import torch

    bench = scripts("bench_train_step")
    notice = "Synchronization debug mode is a prototype feature and does not yet detect all synchronizing operations"
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: warnings.warn(notice) if mode == "warn" else None)
    assert bench.syncs_of(lambda: None) == 0
    assert bench.syncs_of(lambda: [warnings.warn("called a synchronizing CUDA operation") for _ in range(2)]) == 2
