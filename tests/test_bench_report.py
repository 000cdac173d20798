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
