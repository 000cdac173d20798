"""scripts/reproduce.py on one seed of a tiny synthetic experiment writes valid accuracy.json/.md."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reproduce.py"


def _load_script():
    if str(SCRIPT.parent) not in sys.path:  # as when run: the script's folder is on the path (bench_graphs)
        sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("reproduce", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reproduce_one_seed_writes_json_and_markdown(tmp_path, tiny_settings):
    reproduce = _load_script()
    out = tmp_path / "results"
    settings = [item for item in tiny_settings if not item.startswith("experiment=")]
    argv = ["--experiments", "gcn_synthetic", "--seeds", "1", "--out", str(out), "--runs-dir",
            str(tmp_path / "runs"), *settings, "trainer.max_epochs=2"]
    assert reproduce.main(argv) == 0
    results = json.loads((out / "accuracy.json").read_text())["results"]
    entry = results["gcn_synthetic"]
    assert entry["seeds"] == [0] and len(entry["test_acc"]) == 1
    assert entry["mean"] == entry["test_acc"][0] and entry["std"] == 0.0
    assert 0.0 <= entry["mean"] <= 1.0 and entry["model"] == "gcn" and entry["device"]
    assert entry["commit"]  # the commit the accuracy was measured at (review)
    metrics = json.loads((tmp_path / "runs" / "gcn_synthetic" / "seed0" / "metrics.json").read_text())
    assert 0 < metrics["median_epoch_time_s"] and entry["median_epoch_time_s"] == metrics["median_epoch_time_s"]
    table = (out / "accuracy.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| gcn_synthetic | gcn | synthetic | 1 |"))
    assert f"| {entry['median_epoch_time_s'] * 1e3:.1f} |" in row  # the median after the first epoch, no '*'


def test_pyg_twins_follow_gcn_and_gat_experiments():
    reproduce = _load_script()
    assert reproduce.variants("gat_cora", "gat", pyg=True)[1] == ("gat_cora_pyg", ["model.name=pyg_gat"])
    assert len(reproduce.variants("sage_cora", "sage", pyg=True)) == 1
    assert len(reproduce.variants("gcn_cora", "gcn", pyg=False)) == 1


def test_the_pyg_delta_compares_runs_of_the_same_settings_and_the_table_shows_them():
    """A rerun with overrides (trainer.max_epochs=2) replaced an experiment's row and was compared with a PyG row
    of other settings: Δ -61.74 points, the overrides nowhere in the table (review)."""
    reproduce = _load_script()

    def result(overrides, mean):
        return {"overrides": overrides, "mean": mean, "std": 0.0, "model": "gcn", "dataset": "cora", "seeds": [0],
                "val_acc": [mean], "median_epoch_time_s": 0.01, "device": "cpu", "date": "2026-11-25"}

    results = {"gcn_cora": result(["logger.wandb=false", "trainer.max_epochs=2"], 0.2),
               "gcn_cora_pyg": result(["logger.wandb=false", "model.name=pyg_gcn"], 0.8)}
    row = next(line for line in reproduce.markdown(results).splitlines() if line.startswith("| gcn_cora |"))
    assert row.startswith("| gcn_cora | gcn | cora | 1 | 20.00 ± 0.00 |  |") and row.endswith("| trainer.max_epochs=2 |")
    results["gcn_cora_pyg"]["overrides"] = ["trainer.max_epochs=2", "model.name=pyg_gcn", "trainer.resume=true"]
    row = next(line for line in reproduce.markdown(results).splitlines() if line.startswith("| gcn_cora |"))
    assert "| 20.00 ± 0.00 | -60.00 |" in row
    for key, other in (("seeds", [0, 1, 2, 3, 4]), ("device", "NVIDIA H100 80GB HBM3")):  # review: no Δ either
        twin = {**results["gcn_cora_pyg"], key: other}
        row = next(line for line in reproduce.markdown({**results, "gcn_cora_pyg": twin}).splitlines()
                   if line.startswith("| gcn_cora |"))
        assert "| 20.00 ± 0.00 |  |" in row, key


def test_bad_arguments_fail_before_anything_trains(tmp_path, tiny_settings, capsys):
    import pytest

    reproduce = _load_script()
    runs = tmp_path / "runs"
    common = ["--seeds", "1", "--out", str(tmp_path / "results"), "--runs-dir", str(runs)]
    with pytest.raises(SystemExit) as stop:  # the override after --experiments was taken as an experiment name
        reproduce.main([*common, *tiny_settings, "--experiments", "gcn_synthetic", "trainer.max_epochs=2"])
    assert stop.value.code == 2 and "put key=value overrides before --experiments" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:  # every seed would have run with seed 7
        reproduce.main([*common, "--experiments", "gcn_synthetic", "--", *tiny_settings[1:], "seed=7"])
    assert stop.value.code == 2 and "seed cannot be overridden" in capsys.readouterr().err
    # a typo in the last experiment: refused before gcn_synthetic trains
    settings = [item for item in tiny_settings if not item.startswith("experiment=")]
    assert reproduce.main([*common, "--experiments", "gcn_synthetic", "nope", "--", *settings]) == 2
    assert "unknown experiment 'nope'" in capsys.readouterr().err and not runs.exists()

    with pytest.raises(SystemExit) as stop:  # it replaced every --experiments entry, under their names
        reproduce.main([*common, "--experiments", "gcn_cora", "--", *tiny_settings])
    assert stop.value.code == 2 and "experiment cannot be overridden" in capsys.readouterr().err


def _second_experiment_stops(tmp_path, tiny_settings, monkeypatch, error: BaseException) -> tuple[int, set]:
    """Run gcn_synthetic then graphsaint_rw_synthetic, whose training raises ``error``; the exit status and the
    experiments accuracy.json holds."""
    import graphfuse.trainers.run as run

    real = run.train

    def train(cfg, verbose=True):
        if cfg.sampler.name is not None:
            raise error
        return real(cfg, verbose=verbose)

    monkeypatch.setattr(run, "train", train)
    settings = [item for item in tiny_settings if not item.startswith("experiment=")]
    out = tmp_path / "results"
    argv = ["--seeds", "1", "--out", str(out), "--runs-dir", str(tmp_path / "runs"), "--experiments",
            "gcn_synthetic", "graphsaint_rw_synthetic", "--", *settings, "trainer.max_epochs=1"]
    status = _load_script().main(argv)
    return status, set(json.loads((out / "accuracy.json").read_text())["results"])


def test_finished_experiments_are_written_when_a_later_one_fails(tmp_path, tiny_settings, monkeypatch):
    """A later experiment's missing dataset exited 2 and threw away the results of those already trained."""
    from graphfuse.data import DatasetNotFoundError

    missing = DatasetNotFoundError("the second experiment's files are missing", tmp_path / "nowhere")
    assert _second_experiment_stops(tmp_path, tiny_settings, monkeypatch, missing) == (2, {"gcn_synthetic"})


def test_finished_experiments_are_written_when_a_later_one_is_stopped(tmp_path, tiny_settings, monkeypatch):
    """A SIGTERM during a later experiment exited 0 and threw away the finished experiments' results."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    stop = SIGTERMException()
    assert _second_experiment_stops(tmp_path, tiny_settings, monkeypatch, stop) == (143, {"gcn_synthetic"})


def _metrics(seed, acc, model="gcn"):
    """A metrics.json content as train() returns it (only what reproduce.py reads)."""
    return {"seed": seed, "model": model, "dataset": "synthetic", "test": {"acc": acc, "f1_micro": acc},
            "val": {"acc": acc}, "best_epoch": 1, "epochs_run": 2, "mean_epoch_time_s": 0.01,
            "median_epoch_time_s": 0.01, "device": "cpu", "versions": {}, "wall_time_s": 0.1}


def test_summary_std_is_the_sample_standard_deviation():
    reproduce = _load_script()
    accs = [0.5, 0.7, 0.8]
    entry = reproduce.summarize("x", "x", [_metrics(s, a) for s, a in enumerate(accs)], [])
    assert entry["mean"] == pytest.approx(sum(accs) / 3)
    assert entry["std"] == pytest.approx(((sum((a - entry["mean"]) ** 2 for a in accs)) / 2) ** 0.5)  # n - 1
    assert entry["std"] == pytest.approx(statistics.stdev(accs)) and entry["seeds"] == [0, 1, 2]


def test_rerun_entries_replace_the_old_ones_and_the_others_stay(tmp_path, tiny_settings, monkeypatch):
    import graphfuse.trainers.run as run

    reproduce = _load_script()
    monkeypatch.setattr(run, "train", lambda cfg, verbose=True: _metrics(cfg.seed, 0.9))
    out = tmp_path / "results"
    out.mkdir()
    old = reproduce.summarize("gcn_synthetic", "gcn_synthetic", [_metrics(0, 0.1)], [])
    other = reproduce.summarize("gat_cora", "gat_cora", [_metrics(0, 0.8, "gat")], [])
    (out / "accuracy.json").write_text(json.dumps({"results": {"gcn_synthetic": old, "gat_cora": other}}))
    settings = [item for item in tiny_settings if not item.startswith("experiment=")]
    assert reproduce.main(["--seeds", "2", "--out", str(out), "--runs-dir", str(tmp_path / "runs"),
                                "--experiments", "gcn_synthetic", "--", *settings]) == 0
    results = json.loads((out / "accuracy.json").read_text())["results"]
    assert results["gcn_synthetic"]["mean"] == pytest.approx(0.9) and results["gcn_synthetic"]["seeds"] == [0, 1]
    assert results["gat_cora"] == other


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "0"], "--seeds must be >= 1"),
    (["--", "output_dir=/tmp/one_folder"], "output_dir cannot be overridden"),
])
def test_arguments_that_would_train_nothing_or_mix_seeds_are_refused(argv, message, tmp_path, capsys, monkeypatch):
    """--seeds 0 trained nothing and exited 0; one output_dir for every seed made each seed's run replace (or
    refuse) the last."""
    import graphfuse.trainers.run as run

    monkeypatch.setattr(run, "train", lambda cfg, verbose=True: _metrics(cfg.seed, 0.9))  # nothing trains
    reproduce = _load_script()
    with pytest.raises(SystemExit) as stop:
        reproduce.main(["--experiments", "gcn_synthetic", "--out", str(tmp_path / "r"), *argv])
    assert stop.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_a_stopped_sweep_continues_with_resume(tmp_path, tiny_settings, monkeypatch, capsys):
    """A sweep stopped during seed 1 told the user to rerun with trainer.resume=true, which then applied to every
    seed: the finished seed 0 was tested again and seed 2, with no checkpoint, was refused (exit 2, no results);
    rerunning without it replaced every finished run. --resume keeps, continues and starts seed by seed."""
    import graphfuse.trainers.run as run

    reproduce = _load_script()
    settings = [item for item in tiny_settings if not item.startswith("experiment=")]
    runs, out = tmp_path / "runs", tmp_path / "results"

    def sweep(seeds, *extra):  # extra: --resume, or one more override
        flags = [e for e in extra if e.startswith("--")]
        overrides = [e for e in extra if not e.startswith("--")]
        return reproduce.main(["--seeds", str(seeds), "--out", str(out), "--runs-dir", str(runs), *flags,
                               "--experiments", "gcn_synthetic", "--", *settings, "trainer.max_epochs=2",
                               *overrides])

    assert sweep(2) == 0
    first = json.loads((out / "accuracy.json").read_text())["results"]["gcn_synthetic"]
    (runs / "gcn_synthetic" / "seed1" / "metrics.json").unlink()  # seed 1 stopped after its last.ckpt
    calls, real = [], run.train
    monkeypatch.setattr(run, "train", lambda cfg, verbose=True: calls.append((cfg.seed, cfg.trainer.resume))
                        or real(cfg, verbose=verbose))
    assert sweep(3, "--resume") == 0
    assert calls == [(1, True), (2, False)]  # seed 0 kept, seed 1 continued (tested), seed 2 started
    entry = json.loads((out / "accuracy.json").read_text())["results"]["gcn_synthetic"]
    assert entry["seeds"] == [0, 1, 2] and entry["test_acc"][:2] == first["test_acc"]
    assert "gcn_synthetic seed 0: test acc" in capsys.readouterr().out.split("kept)")[0]
    with pytest.raises(SystemExit) as stop:  # it would apply to every seed: --resume does it per seed
        sweep(1, "trainer.resume=true")
    assert stop.value.code == 2 and "trainer.resume cannot be overridden" in capsys.readouterr().err
