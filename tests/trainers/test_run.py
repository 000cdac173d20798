"""Training runs: resume from last.ckpt, fresh restarts, early stopping and the full-graph data module."""

from __future__ import annotations

import csv
import json
import logging
import shutil
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from omegaconf import OmegaConf

from graphfuse.data import load_dataset
from graphfuse.graph import cluster_order
from graphfuse.nn.models import GCN
from graphfuse.trainers.config import ConfigError, load_config
from graphfuse.trainers.datamodule import FullGraphDataModule
from graphfuse.trainers.module import NodeClassifier
from graphfuse.trainers.run import _check_rerun, _remove_unrecorded_best, train


def _train_epochs(run_dir, version: int) -> list[int]:
    """Epochs with a training row in the CSV log of one run (one logs/version_* folder per run)."""
    with open(run_dir / "logs" / f"version_{version}" / "metrics.csv") as f:
        return sorted({int(row["epoch"]) for row in csv.DictReader(f) if row.get("train/loss")})


def test_resume_continues_from_the_checkpoint_epoch(tiny, tmp_path):
    run = tmp_path / "run"
    first = train(load_config([*tiny, "trainer.max_epochs=2"]), verbose=False)
    assert first["epochs_run"] == 2
    assert _train_epochs(run, 0) == [0, 1]

    resumed = train(load_config([*tiny, "trainer.max_epochs=4", "trainer.resume=true"]), verbose=False)
    assert _train_epochs(run, 1) == [2, 3]
    assert resumed["epochs_run"] == 4 and resumed["epochs_this_run"] == 2
    assert resumed["resumed_from"].endswith("last.ckpt")
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["epoch"] == 3
    assert json.loads((run / "metrics.json").read_text())["epochs_run"] == 4


def test_last_checkpoint_is_the_last_epoch_not_the_best(tiny, tmp_path):
    # lr=1e-30 (below any weight's rounding): val/acc never improves after epoch 0, so the best checkpoint stays at epoch 0 while last.ckpt must
    # follow every epoch (resume would otherwise go back to the best epoch and train its successors again).
    run = tmp_path / "run"
    first = train(load_config([*tiny, "optim.lr=1e-30", "optim.weight_decay=0", "trainer.max_epochs=3"]), verbose=False)
    assert first["best_epoch"] == 0
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["epoch"] == 2
    resumed = train(load_config([*tiny, "optim.lr=1e-30", "optim.weight_decay=0", "trainer.max_epochs=5",
                                 "trainer.resume=true"]), verbose=False)
    assert _train_epochs(run, 1) == [3, 4] and resumed["epochs_this_run"] == 2


def test_resume_keeps_this_runs_patience(tiny, tmp_path):
    # patience 1 stops the first run after epoch 1; resumed with patience 4, the run goes on (Lightning would
    # restore patience 1 from the checkpoint and stop again at once) until 4 checks have not improved.
    stall = [*tiny, "optim.lr=1e-30", "optim.weight_decay=0"]
    first = train(load_config([*stall, "trainer.patience=1", "trainer.max_epochs=50"]), verbose=False)
    assert first["epochs_run"] == 2 and first["stopped_early"]
    resumed = train(load_config([*stall, "trainer.patience=4", "trainer.max_epochs=50", "trainer.resume=true"]),
                    verbose=False)
    assert resumed["epochs_this_run"] == 3 and resumed["stopped_early"]


def test_resuming_a_run_that_stopped_early_with_its_patience_is_refused(tiny, tmp_path):
    """Lightning ran one more epoch past the stop (and kept going while it improved), so re-running a finished
    command with trainer.resume=true changed its result."""
    from graphfuse.trainers.config import ConfigError

    stall = [*tiny, "optim.lr=1e-30", "optim.weight_decay=0", "trainer.max_epochs=50"]
    first = train(load_config([*stall, "trainer.patience=1"]), verbose=False)
    assert first["stopped_early"]
    metrics = (tmp_path / "run" / "metrics.json").read_bytes()
    with pytest.raises(ConfigError, match="stopped early .* it has nothing to continue"):
        train(load_config([*stall, "trainer.patience=1", "trainer.resume=true"]), verbose=False)
    assert (tmp_path / "run" / "metrics.json").read_bytes() == metrics
    # a run whose own (larger) patience had not run out did not stop: resumed with less, it goes on, then stops
    shutil.rmtree(tmp_path / "run")  # (a fresh run of other settings leaves the first run alone)
    train(load_config([*stall, "trainer.patience=10", "trainer.max_epochs=4"]), verbose=False)
    resumed = train(load_config([*stall, "trainer.patience=2", "trainer.resume=true"]), verbose=False)
    assert resumed["epochs_this_run"] == 1 and resumed["stopped_early"]


def test_a_run_that_stopped_early_and_was_killed_before_its_test_is_tested_on_resume(tiny, tmp_path):
    """Killed in the final test (no metrics.json), the run was told to resume, and the resume was refused as
    "nothing to continue": only more patience (another result) or a fresh run got it tested."""
    stall = [*tiny, "optim.lr=1e-30", "optim.weight_decay=0", "trainer.max_epochs=50", "trainer.patience=1"]
    first = train(load_config(stall), verbose=False)
    assert first["stopped_early"]
    (tmp_path / "run" / "metrics.json").unlink()
    resumed = train(load_config([*stall, "trainer.resume=true"]), verbose=False)
    assert resumed["epochs_this_run"] == 0 and resumed["epochs_run"] == first["epochs_run"]
    assert resumed["stopped_early"] and resumed["best_epoch"] == first["best_epoch"]
    assert resumed["test"] == first["test"] and (tmp_path / "run" / "metrics.json").is_file()


def test_a_fresh_run_removes_only_checkpoints_from_the_checkpoints_folder(tiny, tmp_path):
    """It removed the whole folder, whatever it held."""
    from graphfuse.trainers.config import ConfigError

    folder = tmp_path / "run" / "checkpoints"
    train(load_config([*tiny, "trainer.max_epochs=1"]), verbose=False)
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"holds files that are not this kind of run's checkpoints \(notes.txt\)"):
        train(load_config([*tiny, "trainer.max_epochs=1"]), verbose=False)
    assert (folder / "notes.txt").read_text() == "mine" and (folder / "last.ckpt").is_file()
    (folder / "notes.txt").unlink()
    (folder / "notes").mkdir()  # refused before the data is built, naming a free folder
    from graphfuse.trainers import run as run_module

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_module, "build_dataset", lambda *a: pytest.fail("built before the refusal"))
        with pytest.raises(ConfigError, match=rf"checkpoints \(notes\).*output_dir={tmp_path / 'run-2'}"):
            train(load_config([*tiny, "trainer.max_epochs=1"]), verbose=False)
    (folder / "notes").rmdir()
    train(load_config([*tiny, "trainer.max_epochs=1"]), verbose=False)  # only its own files: cleared and rerun
    assert (folder / "last.ckpt").is_file()


def test_bad_config_or_resume_leaves_the_earlier_run_untouched(tiny, tmp_path):
    from graphfuse.trainers.config import ConfigError

    run = tmp_path / "run"
    train(load_config([*tiny, "trainer.max_epochs=3"]), verbose=False)
    before = {path.name: path.read_bytes() for path in [*run.glob("*.json"), *run.glob("*.yaml"),
                                                        *(run / "checkpoints").iterdir()]}
    with pytest.raises(ConfigError, match="model"):
        train(load_config([*tiny, "trainer.max_epochs=3", "model.num_layers=0"]), verbose=False)
    with pytest.raises(ConfigError, match="more than trainer.max_epochs=1"):
        train(load_config([*tiny, "trainer.max_epochs=1", "trainer.resume=true"]), verbose=False)
    with pytest.raises(ConfigError, match="model.hidden differ from the run being resumed"):
        train(load_config([*tiny, "trainer.max_epochs=5", "trainer.resume=true", "model.hidden=12"]), verbose=False)
    after = {path.name: path.read_bytes() for path in [*run.glob("*.json"), *run.glob("*.yaml"),
                                                       *(run / "checkpoints").iterdir()]}
    assert after == before
    # the engine backend and dropout do not shape the saved weights: a resume may change them
    resumed = train(load_config([*tiny, "trainer.max_epochs=4", "trainer.resume=true", "model.backend=reference",
                                 "model.dropout=0.1"]), verbose=False)
    assert resumed["epochs_this_run"] == 1


def test_resume_with_other_settings_names_the_saved_values(tiny, tmp_path):
    # the message named the keys only ("model.hidden differ ..."): the user had to find the old values to resume
    from graphfuse.trainers.config import ConfigError

    train(load_config([*tiny, "trainer.max_epochs=1"]), verbose=False)
    with pytest.raises(ConfigError) as error:
        train(load_config([*tiny, "trainer.max_epochs=2", "trainer.resume=true", "model.hidden=12",
                           "model.num_layers=3"]), verbose=False)
    message = str(error.value)
    assert "model.hidden=8 (this run: 12)" in message and "model.num_layers=2 (this run: 3)" in message


def test_fresh_run_over_old_checkpoints_removes_them(tiny, tmp_path, caplog):
    ckpts = tmp_path / "run" / "checkpoints"
    train(load_config([*tiny, "trainer.max_epochs=1"]), verbose=False)  # an earlier run of the same settings
    (ckpts / "best-epoch=099.ckpt").write_bytes(b"stale")
    with caplog.at_level(logging.WARNING, logger="graphfuse.trainers.run"):
        metrics = train(load_config([*tiny, "trainer.max_epochs=1"]), verbose=False)
    assert "starting fresh" in caplog.text
    assert not (ckpts / "best-epoch=099.ckpt").exists()
    assert metrics["epochs_run"] == 1 and metrics["resumed_from"] is None


def test_a_fresh_run_names_the_earlier_results_it_replaces(tiny, tmp_path, caplog):
    """A fresh run replaced the folder's config.yaml and metrics.json (a user's own too) without a word; the
    checkpoint warning named only the checkpoints (review)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text("{}")  # no run's config.yaml describes it: refused (see the next test)
    with pytest.raises(ConfigError, match=r"holds metrics.json with no config.yaml; .* \(e.g. output_dir=.*run-2\)"):
        train(load_config([*tiny, "trainer.max_epochs=1"]), verbose=False)
    (run / "metrics.json").unlink()
    train(load_config([*tiny, "trainer.max_epochs=1"]), verbose=False)
    with caplog.at_level(logging.WARNING, logger="graphfuse.trainers.run"):
        train(load_config([*tiny, "trainer.max_epochs=1"]), verbose=False)
    assert f"{run} holds config.yaml and metrics.json of an earlier run; replacing them" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="graphfuse.trainers.run"):
        train(load_config([*tiny, "trainer.max_epochs=2", "trainer.resume=true"]), verbose=False)
    assert "replacing them" not in caplog.text  # a resumed run continues its own results


def test_a_fresh_run_of_other_settings_leaves_an_earlier_run_alone(tiny, tmp_path, caplog):
    """A run of other settings into the same output_dir (the default runs/<experiment>/seed<seed> ignores
    model.hidden=64) deleted the earlier run's checkpoints and replaced its config.yaml with a warning; a user's
    own config.yaml was replaced too (review). A rerun of the same settings still replaces the earlier run."""
    run = tmp_path / "run"
    train(load_config([*tiny, "trainer.max_epochs=2"]), verbose=False)
    kept = sorted(p.name for p in (run / "checkpoints").iterdir())
    config = (run / "config.yaml").read_text()
    with pytest.raises(ConfigError, match=r"holds a run of other settings \(model.hidden=\d+ \(this run: 7\)\); a "
                       r"fresh run would replace its checkpoints. Give this run another folder \(e.g. output_dir=.*"
                       r"run-2\), or delete the folder"):  # no resume offered: it would refuse other model settings
        train(load_config([*tiny, "trainer.max_epochs=2", "model.hidden=7"]), verbose=False)
    with pytest.raises(ConfigError, match="continue that run with trainer.resume=true"):  # a resume could
        train(load_config([*tiny, "trainer.max_epochs=3"]), verbose=False)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == kept
    assert (run / "config.yaml").read_text() == config
    with caplog.at_level(logging.WARNING, logger="graphfuse.trainers.run"):  # a rerun, shown differently
        train(load_config([*tiny, "trainer.max_epochs=2", "trainer.progress_bar=false", "trainer.model_summary=false",
                           "model.backend=reference"]), verbose=False)
    assert "earlier run of the same settings; removing them" in caplog.text
    (run / "config.yaml").write_text("my own notes: do not delete\n")
    with pytest.raises(ConfigError, match="with a config.yaml that is not a graphfuse run's"):
        train(load_config([*tiny, "trainer.max_epochs=2"]), verbose=False)
    assert (run / "config.yaml").read_text() == "my own notes: do not delete\n"


def test_early_stopping_stops_when_val_acc_stalls(tiny):
    # lr=1e-30 keeps the weights (below their rounding), so val/acc never improves after epoch 0: patience 1 stops after epoch 1.
    metrics = train(load_config([*tiny, "optim.lr=1e-30", "trainer.patience=1", "trainer.max_epochs=50"]),
                    verbose=False)
    assert metrics["epochs_run"] == 2
    assert metrics["stopped_early"] and metrics["best_epoch"] == 0


def test_final_metrics_are_scored_in_the_runs_precision(tiny):
    """Under bf16-mixed the best checkpoint was re-scored in float32 for metrics.json: its val accuracy differed
    from its own best_val_acc (review; gat_cora: 0.7460 against 0.7440)."""
    metrics = train(load_config([*tiny, "model=gat", "model.hidden=4", "trainer.precision=bf16-mixed",
                                 "trainer.max_epochs=6"]), verbose=False)
    assert metrics["val"]["acc"] == metrics["best_val_acc"]
    logged = list(csv.DictReader((Path(metrics["output_dir"]) / "logs/version_0/metrics.csv").open()))
    at_best = [r for r in logged if r["val/loss"] and int(r["epoch"]) == metrics["best_epoch"]]
    assert float(at_best[0]["val/loss"]) == pytest.approx(metrics["val"]["loss"], rel=1e-6)


def test_datamodule_moves_the_batch_once_and_reuses_it():
    dataset = load_dataset("synthetic", num_nodes=50, num_features=4, num_classes=3)
    dm = FullGraphDataModule(dataset)
    dm.setup("fit")
    (batch,) = list(dm.train_dataloader())
    assert batch.x.shape == (50, 4) and batch.graph.num_nodes == 50
    moved = dm.transfer_batch_to_device(batch, torch.device("cpu"), 0)
    assert dm.transfer_batch_to_device(batch, torch.device("cpu"), 0) is moved
    assert next(iter(dm.val_dataloader())).graph is batch.graph
    assert int(batch.mask("train").sum()) > 0


def test_ogbn_datasets_are_also_scored_by_the_ogb_evaluator(tiny, tmp_path, monkeypatch):
    from graphfuse.trainers import run as run_module

    def synthetic_as_ogbn(cfg):
        dataset = load_dataset("synthetic", num_nodes=200, num_features=16, num_classes=4)
        dataset.ogb_name = "ogbn-arxiv"
        return dataset

    monkeypatch.setattr(run_module, "build_dataset", synthetic_as_ogbn)
    metrics = train(load_config([*tiny, "trainer.max_epochs=2"]), verbose=False)
    with open(tmp_path / "run" / "logs" / "version_0" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    scored = [r for r in rows if r.get("val/ogb_acc")]
    assert len(scored) == 2
    assert all(float(r["val/ogb_acc"]) == pytest.approx(float(r["val/acc"])) for r in scored)
    # the final scores carry ogb's metric too (it reached only metrics.csv: review)
    for stage in ("train", "val", "test"):
        assert metrics[stage]["ogb_acc"] == pytest.approx(metrics[stage]["acc"])
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["test"]["ogb_acc"] == metrics["test"]["ogb_acc"]


def test_reordered_batch_is_the_same_problem_renumbered():
    dataset = load_dataset("synthetic", num_nodes=200, num_features=4, num_classes=3)
    dm = FullGraphDataModule(dataset, reorder=True)
    dm.setup("fit")
    plain = dm.batch
    moved = dm.device_batch(torch.device("cpu"))
    assert dm.reorder_seconds is not None and dm.device_batch(torch.device("cpu")) is moved
    order = cluster_order(plain.graph)
    for name in ("x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(moved, name), getattr(plain, name)[order])
    src, dst = moved.graph.edge_index
    assert torch.equal(order[src], plain.graph.edge_index[0]) and torch.equal(order[dst], plain.graph.edge_index[1])


def test_batch_first_moved_in_validate_can_be_trained_on(tmp_path):
    """Trainer.validate before fit: the reordered batch was built and cached in inference mode, and every
    training step then failed ("Inference tensors cannot be saved for backward")."""
    dataset = load_dataset("synthetic", num_nodes=200, num_features=4, num_classes=3)
    dm = FullGraphDataModule(dataset, reorder=True)
    module = NodeClassifier(GCN(4, 8, 3), num_classes=3)
    kw = dict(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, default_root_dir=tmp_path)
    pl.Trainer(**kw).validate(module, dm, verbose=False)
    assert not dm.device_batch(torch.device("cpu")).x.is_inference()
    before = [p.detach().clone() for p in module.parameters()]
    pl.Trainer(num_sanity_val_steps=0, **kw).fit(module, dm)
    assert any(not torch.equal(a, b) for a, b in zip(before, module.parameters()))


def test_reorder_runs_end_to_end_and_reports_its_cost(tiny):
    metrics = train(load_config([*tiny, "trainer.max_epochs=2", "data.reorder=true"]), verbose=False)
    assert metrics["reorder_s"] is not None and metrics["epochs_run"] == 2


def test_epoch_lines_show_val_metrics_only_where_validation_ran(tiny, capsys):
    train(load_config([*tiny, "trainer.max_epochs=4", "trainer.check_val_every_n_epoch=2"]), verbose=True)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ")]
    val_acc = [line.split("val/acc ")[1].split()[0] for line in lines]
    assert len(val_acc) == 4 and val_acc[0] == val_acc[2] == "-" and "-" not in (val_acc[1], val_acc[3])


def test_the_validation_schedule_does_not_change_training(tiny_settings, tmp_path):
    """Each DataLoader iterator (the validation loader's too) drew its base seed from torch's global generator,
    so dropout's draws, and the trained weights, depended on trainer.check_val_every_n_epoch."""
    def losses(every):
        out = tmp_path / f"every{every}"
        train(load_config([*tiny_settings, "model.dropout=0.5", "trainer.max_epochs=4", f"output_dir={out}",
                           f"trainer.check_val_every_n_epoch={every}"]), verbose=False)
        with open(out / "logs" / "version_0" / "metrics.csv") as f:
            return {int(r["epoch"]): r["train/loss"] for r in csv.DictReader(f) if r.get("train/loss")}

    assert losses(1) == losses(2)


def test_resumed_run_with_dropout_repeats_the_uninterrupted_run(tiny_settings, tmp_path):
    """The checkpoints keep torch's random state, so dropout draws after a resume are those of a straight run."""

    def losses(run, versions):
        out = {}
        for version in versions:
            with open(run / "logs" / f"version_{version}" / "metrics.csv") as f:
                out.update({int(r["epoch"]): r["train/loss"] for r in csv.DictReader(f) if r.get("train/loss")})
        return out

    settings = [*tiny_settings, "model.dropout=0.5", "trainer.deterministic=true"]
    train(load_config([*settings, f"output_dir={tmp_path / 'straight'}", "trainer.max_epochs=6"]), verbose=False)
    split = [*settings, f"output_dir={tmp_path / 'split'}"]
    train(load_config([*split, "trainer.max_epochs=3"]), verbose=False)
    train(load_config([*split, "trainer.max_epochs=6", "trainer.resume=true"]), verbose=False)
    straight = losses(tmp_path / "straight", [0])
    assert len(straight) == 6 and losses(tmp_path / "split", [0, 1]) == straight


def test_fresh_run_forgets_an_earlier_runs_wandb_id(tiny, tmp_path):
    from graphfuse.trainers import run as run_module

    run = tmp_path / "run"
    run.mkdir()
    (run / run_module.WANDB_ID).write_text("old-run\n")  # as a wandb-logged run left it
    train(load_config([*tiny, "trainer.max_epochs=1"]), verbose=False)
    assert not (run / run_module.WANDB_ID).exists()  # a later resume must not continue old-run


def test_resume_trains_with_this_runs_optimiser_settings(tiny, tmp_path):
    # Lightning restores the optimiser's param groups from the checkpoint, lr and weight decay included: resumed
    # with lr=1e-30, the weights must stay as last.ckpt left them (optim.* may change on a resume).
    run = tmp_path / "run"
    train(load_config([*tiny, "trainer.max_epochs=2"]), verbose=False)
    before = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    train(load_config([*tiny, "trainer.max_epochs=4", "trainer.resume=true", "optim.lr=1e-30", "optim.weight_decay=0"]),
          verbose=False)
    after = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert after["epoch"] == 3
    assert [(g["lr"], g["weight_decay"]) for g in after["optimizer_states"][0]["param_groups"]] == [(1e-30, 0.0)]
    weights = [key for key in before if key.startswith("model.")]
    assert weights and all(torch.equal(before[key], after["state_dict"][key]) for key in weights)


def test_resume_from_an_unreadable_checkpoint_is_a_config_error(tiny, tmp_path):
    from graphfuse.trainers.config import ConfigError

    train(load_config([*tiny, "trainer.max_epochs=1"]), verbose=False)
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    for content in (last.read_bytes()[: last.stat().st_size // 2], b""):  # cut short, or empty
        last.write_bytes(content)
        with pytest.raises(ConfigError, match="cannot read .*last.ckpt"):
            train(load_config([*tiny, "trainer.max_epochs=2", "trainer.resume=true"]), verbose=False)


def test_resume_removes_a_best_checkpoint_the_stopped_run_did_not_record(tiny, tmp_path):
    # A run stopped after writing best-epoch=002.ckpt but before last.ckpt (epoch 1) left that file; the resumed
    # run wrote best-epoch=002-v1.ckpt beside it, so checkpoints/ held two best checkpoints.
    train(load_config([*tiny, "trainer.max_epochs=2"]), verbose=False)
    ckpts = tmp_path / "run" / "checkpoints"
    (stray := ckpts / "best-epoch=002.ckpt").write_bytes((ckpts / "last.ckpt").read_bytes())
    resumed = train(load_config([*tiny, "trainer.max_epochs=3", "trainer.resume=true"]), verbose=False)
    best = sorted(path.name for path in ckpts.glob("best-*.ckpt"))
    assert best == [Path(resumed["best_checkpoint"]).name] and (stray.name in best) == (resumed["best_epoch"] == 2)


def test_resume_with_fewer_max_epochs_than_the_run_trained_is_refused(tiny, tmp_path):
    # last.ckpt of a 3-epoch run says epoch 2 (counting from 0): max_epochs=2 was let through, and the "resumed"
    # run reported epochs_run=3 beside max_epochs=2 without training
    from graphfuse.trainers.config import ConfigError

    train(load_config([*tiny, "trainer.max_epochs=3"]), verbose=False)
    with pytest.raises(ConfigError, match="3 epochs, more than trainer.max_epochs=2"):
        train(load_config([*tiny, "trainer.max_epochs=2", "trainer.resume=true"]), verbose=False)
    again = train(load_config([*tiny, "trainer.max_epochs=3", "trainer.resume=true"]), verbose=False)
    assert again["epochs_run"] == 3 and again["epochs_this_run"] == 0  # nothing left to train: tests again


def _snapshot(run) -> dict:
    return {path.relative_to(run).as_posix(): path.read_bytes() for path in run.rglob("*")
            if path.is_file() and "logs" not in path.parts}


def test_a_wandb_run_that_cannot_start_leaves_the_earlier_run_untouched(tiny, tmp_path, monkeypatch):
    # wandb started after the checkpoints were cleared and config.yaml rewritten: a failed online start wiped a
    # finished run (fresh) or left metrics.json deleted and config.yaml overwritten (resume)
    import types

    from graphfuse.trainers import run as run_module
    from graphfuse.trainers.config import ConfigError

    run = tmp_path / "run"
    train(load_config([*tiny, "trainer.max_epochs=2"]), verbose=False)
    before = _snapshot(run)

    def refuse(cfg, logger):
        raise ConfigError("logger.wandb_mode=online: wandb could not start the run (no API key)")

    monkeypatch.setitem(__import__("sys").modules, "wandb", types.SimpleNamespace(finish=lambda: None))
    monkeypatch.setattr(run_module, "_wandb_loggers", lambda trainer: [object()])
    monkeypatch.setattr(run_module, "_start_wandb", refuse)
    for extra in (["trainer.max_epochs=2"], ["trainer.max_epochs=3", "trainer.resume=true"]):
        with pytest.raises(ConfigError, match="wandb could not start"):
            train(load_config([*tiny, *extra]), verbose=False)
        assert _snapshot(run) == before


def _stall(tiny) -> list[str]:
    return [*tiny, "optim.lr=1e-30", "optim.weight_decay=0"]  # a resumed run whose val/acc stays where it was


def test_resume_after_the_recorded_best_was_replaced_tests_the_newer_best(tiny, tmp_path):
    # A run stopped after Lightning wrote a new best and deleted the one last.ckpt records, before last.ckpt:
    # the resume deleted the new best as unrecorded, leaving no best checkpoint, and the final test failed
    # with FileNotFoundError. Simulated by renaming the recorded best.
    from graphfuse.trainers.config import ConfigError

    first = train(load_config([*tiny, "trainer.max_epochs=3"]), verbose=False)
    ckpts = tmp_path / "run" / "checkpoints"
    newer = ckpts / "best-epoch=009.ckpt"
    Path(first["best_checkpoint"]).rename(newer)
    resumed = train(load_config([*_stall(tiny), "trainer.max_epochs=4", "trainer.resume=true"]), verbose=False)
    assert resumed["best_checkpoint"] == str(newer) and resumed["best_val_acc"] == first["best_val_acc"]
    assert sorted(path.name for path in ckpts.glob("best-*.ckpt")) == [newer.name]
    newer.unlink()  # no best checkpoint at all: refused before anything is touched
    with pytest.raises(ConfigError, match="is not in .* nor any other best-\\*.ckpt"):
        train(load_config([*tiny, "trainer.max_epochs=5", "trainer.resume=true"]), verbose=False)


def test_resume_of_a_copied_run_directory_keeps_its_best_score(tiny_settings, tmp_path):
    # Lightning drops the best score when the checkpoint's folder moved: the first resumed epoch became the
    # new best (a worse one, or as here an equal one), and a second best checkpoint sat beside the copied one
    import shutil

    first = train(load_config([*tiny_settings, f"output_dir={tmp_path / 'a'}", "trainer.max_epochs=3"]),
                  verbose=False)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    resumed = train(load_config([*_stall(tiny_settings), f"output_dir={tmp_path / 'b'}", "trainer.max_epochs=4",
                                 "trainer.resume=true"]), verbose=False)
    assert resumed["best_epoch"] == first["best_epoch"] and resumed["best_val_acc"] == first["best_val_acc"]
    assert [path.name for path in (tmp_path / "b" / "checkpoints").glob("best-*.ckpt")] == \
        [Path(first["best_checkpoint"]).name]
    assert Path(resumed["best_checkpoint"]).parent == tmp_path / "b" / "checkpoints"


def test_early_stopping_added_on_resume_starts_from_the_runs_best(tiny, tmp_path):
    # without early-stopping state in the checkpoint, Lightning's stopper started from -inf: the first resumed
    # epoch counted as an improvement, so patience 1 stopped one epoch late
    train(load_config([*tiny, "trainer.max_epochs=3"]), verbose=False)
    resumed = train(load_config([*_stall(tiny), "trainer.max_epochs=50", "trainer.patience=1",
                                 "trainer.resume=true"]), verbose=False)
    assert resumed["stopped_early"] and resumed["epochs_this_run"] == 1


def test_an_output_dir_inside_the_data_mirror_is_refused(tiny_settings, tmp_path, monkeypatch):
    from graphfuse.trainers.config import ConfigError

    monkeypatch.setenv("GRAPHFUSE_DATA_MIRROR", str(tmp_path / "mirror"))
    with pytest.raises(ConfigError, match="output_dir=.* lies inside \\$GRAPHFUSE_DATA_MIRROR"):
        train(load_config([*tiny_settings, f"output_dir={tmp_path / 'mirror' / 'run'}"]), verbose=False)
    assert not (tmp_path / "mirror").exists()



def test_resume_with_another_seed_is_refused(tiny, tmp_path):
    """The check compared data and model only: a resumed neighbour run mixed two seeds' batches, and its
    metrics.json then claimed the new seed."""
    from graphfuse.trainers.config import ConfigError

    train(load_config([*tiny, "trainer.max_epochs=1"]), verbose=False)
    with pytest.raises(ConfigError, match="seed=1 differs from the run being resumed .* seed=0"):
        train(load_config([*tiny, "trainer.max_epochs=2", "trainer.resume=true", "seed=1"]), verbose=False)
    assert train(load_config([*tiny, "trainer.max_epochs=2", "trainer.resume=true", "seed=0"]),
                 verbose=False)["epochs_this_run"] == 1


def test_resume_without_early_stopping_loads_quietly(tiny, tmp_path):
    """A run with early stopping resumed without it made Lightning warn that a checkpoint's callback was missing,
    although the README lets trainer settings change on resume; both ways round now load without it."""
    import warnings

    train(load_config([*tiny, "trainer.max_epochs=2", "trainer.patience=5"]), verbose=False)
    for patience, epochs in ((0, 3), (5, 4)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            metrics = train(load_config([*tiny, f"trainer.max_epochs={epochs}", f"trainer.patience={patience}",
                                         "trainer.resume=true"]), verbose=False)
        assert metrics["epochs_this_run"] == 1 and not metrics["stopped_early"]
        assert not [w for w in caught if "callbacks used to create the checkpoint" in str(w.message)]


def test_resume_may_change_whether_a_dataset_may_download():
    """data.options.download=false alone refused a Facebook resume, although it changes no data."""
    from graphfuse.trainers.run import changed_settings

    assert changed_settings("data", {"name": "facebook", "options": {}},
                            {"name": "facebook", "options": {"download": False}}) == []
    assert changed_settings("data", {"options": {"num_nodes": 10}}, {"options": {"num_nodes": 20}}) == ["options"]
    assert changed_settings("model", {"hidden": 8, "dropout": 0.5}, {"hidden": 16, "dropout": 0.1}) == ["hidden"]


def test_a_rerun_may_change_logger_settings(tmp_path):
    earlier = {"seed": 0, "model": {"hidden": 8}, "logger": {"wandb": True, "project": "a"}}
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(earlier))
    _check_rerun(tmp_path, {"seed": 0, "model": {"hidden": 8}, "logger": {"wandb": False, "project": "b"}})
    with pytest.raises(ConfigError, match="model.hidden=8"):  # the check itself still bites
        _check_rerun(tmp_path, {"seed": 0, "model": {"hidden": 16}, "logger": {"wandb": True, "project": "a"}})


def test_without_a_recorded_best_the_newest_best_file_is_kept(tmp_path):
    for epoch in (1, 3):
        (tmp_path / f"best-epoch={epoch:03d}.ckpt").write_text("x")
    saved = {"callbacks": {"ModelCheckpoint{}": {"best_model_path": str(tmp_path / "best-epoch=000.ckpt")}}}
    _remove_unrecorded_best(tmp_path, saved)
    assert [p.name for p in tmp_path.iterdir()] == ["best-epoch=003.ckpt"]
    for name in ("best-epoch=999.ckpt", "best-epoch=1000.ckpt", "best-epoch=1000-v1.ckpt"):  # newest by epoch
        (tmp_path / name).write_text("x")
    _remove_unrecorded_best(tmp_path, saved)
    assert [p.name for p in tmp_path.iterdir()] == ["best-epoch=1000-v1.ckpt"]


def test_device_batch_moves_again_for_another_device():
    dm = FullGraphDataModule(load_dataset("synthetic", num_nodes=50, num_features=4, num_classes=3))
    assert dm.device_batch(torch.device("cpu")).device.type == "cpu"
    assert dm.device_batch(torch.device("meta")).device.type == "meta"


@pytest.mark.parametrize(("key", "value", "fragment"), [
    ("optim.lr", 0.0, "'optim.lr': 0.0"),
    ("trainer.precision", "64", "'trainer.precision': '64'"),
    ("sampler.name", "bogus", "'sampler.name': 'bogus'"),
    ("trainer.patience", -3, "'trainer.patience': -3"),
])
def test_train_checks_a_config_changed_after_loading(tiny, tmp_path, key, value, fragment):
    from omegaconf import OmegaConf

    cfg = load_config(tiny)
    OmegaConf.update(cfg, key, value)
    with pytest.raises(ConfigError, match=f"invalid value for {fragment}"):
        train(cfg, verbose=False)
    assert not (tmp_path / "run").exists()


def test_resume_may_change_the_attention_dropout(tiny):
    """Dropout rates do not shape the saved weights: model.attn_dropout may change on a resume, as model.dropout."""
    gat = [*tiny, "model=gat", "model.hidden=4", "model.heads=2"]
    train(load_config([*gat, "trainer.max_epochs=1"]), verbose=False)
    resumed = train(load_config([*gat, "trainer.max_epochs=2", "trainer.resume=true", "model.attn_dropout=0.1"]),
                    verbose=False)
    assert resumed["epochs_this_run"] == 1
    with pytest.raises(ConfigError, match="model.heads differ from the run being resumed"):  # the check still bites
        train(load_config([*gat, "trainer.max_epochs=3", "trainer.resume=true", "model.heads=1"]), verbose=False)


def test_the_suggested_output_dir_is_free(tmp_path):
    """With run-2 and run-3 taken, the refusal names run-4, not a folder that holds another run."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.yaml").write_text(OmegaConf.to_yaml({"seed": 0, "model": {"hidden": 8}}))
    for taken in ("run-2", "run-3"):
        (tmp_path / taken).mkdir()
    with pytest.raises(ConfigError, match=r"\(e\.g\. output_dir=.*/run-4\)"):
        _check_rerun(out, {"seed": 0, "model": {"hidden": 16}})


def test_median_epoch_time_leaves_the_first_epoch_out(tiny, monkeypatch):
    """metrics.json's median_epoch_time_s is the steady-state figure: the first epoch (kernel compilation, format
    building) is left out of it, not out of the mean."""
    from graphfuse.trainers.module import NodeClassifier

    scripted = iter([5.0, 0.1, 0.3, 0.2])  # seconds per epoch, as the module would have measured them

    def record(self):
        self.epoch_times.append(next(scripted))

    monkeypatch.setattr(NodeClassifier, "on_train_epoch_end", record)
    metrics = train(load_config([*tiny, "trainer.max_epochs=4"]), verbose=False)
    assert metrics["median_epoch_time_s"] == pytest.approx(0.2)
    assert metrics["mean_epoch_time_s"] == pytest.approx(5.6 / 4)


def test_a_resume_keeps_the_runs_wandb_id(tiny, tmp_path):
    """wandb_run_id names the wandb run that trainer.resume continues: a resume without wandb must not forget it
    (only a fresh run does), or a later resume with wandb would start another wandb run."""
    from graphfuse.trainers import run as run_module

    run = tmp_path / "run"
    train(load_config([*tiny, "trainer.max_epochs=1"]), verbose=False)
    (run / run_module.WANDB_ID).write_text("abc123\n")  # as a run logged to wandb leaves it
    train(load_config([*tiny, "trainer.max_epochs=2", "trainer.resume=true"]), verbose=False)  # logger.wandb=false
    assert (run / run_module.WANDB_ID).read_text() == "abc123\n"
