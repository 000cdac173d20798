"""scripts/bench_graphs.write_report: every benchmark record names the git commit it measured."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_graphs.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("bench_graphs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_write_report_records_the_commit(tmp_path, monkeypatch):
    monkeypatch.delenv("GRAPHFUSE_COMMIT", raising=False)
    bench_graphs = _load_script()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=SCRIPT.parent, capture_output=True,
                          text=True).stdout.strip()
    report = {"device": "cpu", "value": 1}
    bench_graphs.write_report(report, tmp_path / "r.json", tmp_path / "r.md", lambda r: f"# {r['device']}\n")
    commit = json.loads((tmp_path / "r.json").read_text())["commit"]
    if head:  # a git checkout (CI's is): the commit is HEAD's, possibly marked dirty
        assert commit.removesuffix("-dirty") == head
    else:
        assert commit == "unknown"
    assert (tmp_path / "r.md").read_text() == f"# cpu\n\nMeasured at commit {commit}.\n"


def test_write_report_keeps_a_commit_given_by_the_script(tmp_path):
    bench_graphs = _load_script()
    report = {"commit": "abc1234"}
    bench_graphs.write_report(report, tmp_path / "r.json", tmp_path / "r.md", lambda r: "t")
    assert json.loads((tmp_path / "r.json").read_text())["commit"] == "abc1234"


def test_write_report_takes_the_commit_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHFUSE_COMMIT", "1873d31")
    bench_graphs = _load_script()
    bench_graphs.write_report({}, tmp_path / "r.json", tmp_path / "r.md", lambda r: "t")
    assert json.loads((tmp_path / "r.json").read_text())["commit"] == "1873d31"
