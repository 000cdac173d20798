"""scripts/profile_spmm_counters.py: ncu's per-kernel rows are given to the right calls and summed."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.fixture
def counters(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    return importlib.import_module("profile_spmm_counters")


def write_csv(path: Path, metrics: list[str], kernels: list[tuple[str, dict]]) -> None:
    lines = ["==PROF== Connected to process 1", '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"']
    for i, (name, values) in enumerate(kernels):
        lines += [f'"{i}","{name}","{m}","u","{values.get(m, 1):,}"' for m in metrics]
    path.write_text("\n".join(lines) + "\n")


def test_kernels_go_to_their_calls(counters, tmp_path):
    t, l2 = "gpu__time_duration.sum", "lts__throughput.avg.pct_of_peak_sustained_elapsed"
    profile = [("void gespmm_rows<float, 0>(int)", {t: 4000, l2: 90}), ("void gespmm_combine<float>(int)", {t: 1000, l2: 50}),
               ("void at::vectorized_elementwise_kernel<4>(int)", {t: 500, l2: 80}), ("void hp_spmm<float>(int)", {t: 6000, l2: 80}),
               ("void at::vectorized_elementwise_kernel<4>(int)", {t: 500, l2: 80}),
               ("void cusparse::matrix_scalar_multiply_kernel(int)", {t: 500, l2: 80}),
               ("void cusparse::csrmm_alg2_kernel(int)", {t: 8000, l2: 60}),
               ("void gespmm_rows<float, 0>(int)", {t: 3000, l2: 90})]
    write_csv(tmp_path / "c.csv", list(counters.METRICS), profile)
    calls = [{"graph": "RMAT g", "nodes": 4, "nnz": 8, "k": 64, "contestant": c} for c in counters.CONTESTANTS]
    (tmp_path / "m.json").write_text(json.dumps({"device": "H", "calls": calls}))
    with pytest.raises(SystemExit, match="4 calls found in the profile, 3 in the manifest"):
        counters.report(tmp_path / "c.csv", tmp_path / "m.json")
    write_csv(tmp_path / "c.csv", list(counters.METRICS), profile[:-1])
    rep = counters.report(tmp_path / "c.csv", tmp_path / "m.json")
    row, = rep["rows"]
    assert row["gespmm"]["ms"] == pytest.approx(0.005)
    assert row["gespmm"]["l2_floor_ms"] == pytest.approx(0.0041)  # 4 µs × 0.9 + 1 µs × 0.5
    assert row["hpspmm"]["ms"] == pytest.approx(0.0065)  # its zeroing included
    assert row["cusparse"]["ms"] == pytest.approx(0.009)
    assert row["cusparse"]["l2_pct"] == pytest.approx((500 * 80 + 500 * 80 + 8000 * 60) / 9000)
    assert row["gespmm"]["speedup"] == pytest.approx(1.8)
    assert row["gespmm"]["bound"] == pytest.approx(0.009 / 0.0041)
    assert rep["summary"]["gespmm"]["speedup"] == {"64": pytest.approx(1.8), "128": None, "256": None}
    assert rep["summary"]["hpspmm"]["speedup_all"] == pytest.approx(0.009 / 0.0065)
    text = counters.markdown(rep)
    assert "| RMAT g | 64 | 0.009 |" in text and "K = 64: 1.80× (bound 2.20×); all 1 cells 1.80×" in text
