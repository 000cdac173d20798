"""The command line: exit status 2 with a one-paragraph message (no traceback) on bad input."""

from __future__ import annotations

import json
import math
import sys

import pytest
import torch

from graphfuse.trainers.cli import main


def _fails_cleanly(capsys, argv, *fragments):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.startswith("graphfuse-train: error:")
    for fragment in fragments:
        assert fragment in err.replace("\n", " ")
    return err


def test_unknown_key_exits_2_with_the_valid_keys(capsys):
    _fails_cleanly(capsys, ["model.hiden=64"], "model.hiden", "hidden, num_layers")


def test_malformed_item_exits_2(capsys):
    _fails_cleanly(capsys, ["trainer.max_epochs"], "key=value")


def test_unknown_experiment_exits_2_listing_experiments(capsys):
    _fails_cleanly(capsys, ["experiment=gcn_corra"], "gcn_cora", "gat_cora")


def test_missing_dataset_exits_2_naming_the_path(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("GRAPHFUSE_DATA_MIRROR", raising=False)
    root = tmp_path / "no-data"
    _fails_cleanly(capsys, [f"data.root={root}", "data.options.download=false", f"output_dir={tmp_path / 'run'}"],
                   "dataset not found", str(root))


def test_resume_without_checkpoint_exits_2(capsys, tiny):
    _fails_cleanly(capsys, [*tiny, "trainer.resume=true"], "trainer.resume", "last.ckpt")


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "gcn_cora" in capsys.readouterr().out


def test_tiny_run_writes_the_run_directory(capsys, tmp_path, tiny):
    assert main([*tiny, "trainer.max_epochs=3"]) == 0
    out = capsys.readouterr().out
    assert "epoch    2/3" in out and "test" in out  # per-epoch lines and the summary table
    run = tmp_path / "run"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["epochs_run"] == 3 and 0 <= metrics["best_epoch"] < 3
    for stage in ("train", "val", "test"):
        assert 0.0 <= metrics[stage]["acc"] <= 1.0
        assert metrics[stage]["f1_micro"] == pytest.approx(metrics[stage]["acc"])
    assert metrics["device"].startswith("cpu")
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert len(list((run / "checkpoints").glob("best-*.ckpt"))) == 1
    assert "max_epochs: 3" in (run / "config.yaml").read_text()


def test_trainer_setting_lightning_rejects_exits_2(capsys, tiny):
    _fails_cleanly(capsys, [*tiny, "trainer.accelerator=abacus"], "invalid trainer settings", "accelerator")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
def test_gpu_accelerator_without_a_gpu_says_to_use_auto_or_cpu(capsys, tiny):
    # Lightning's own message ('No supported gpu backend found!') does not name the setting.
    _fails_cleanly(capsys, [*tiny, "trainer.accelerator=gpu"], "trainer.accelerator=gpu", "use auto or cpu")


def test_true_precision_exits_2_and_leaves_the_earlier_run(capsys, tiny, tmp_path):
    # Lightning's '-true' precisions convert every batch with apply_to_collection, which refuses graphfuse's
    # frozen batch dataclasses: the run failed with a traceback after clearing the earlier run's checkpoints.
    assert main([*tiny, "trainer.max_epochs=1"]) == 0
    _fails_cleanly(capsys, [*tiny, "trainer.max_epochs=1", "trainer.precision=64-true"], "trainer.precision", "32")
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.parametrize("backend", ["gespmm", "fused"])
def test_cuda_backend_on_a_cpu_run_exits_2_and_leaves_the_earlier_run(capsys, tiny, tmp_path, backend):
    # A CUDA kernel backend on a CPU run raised inside the first forward pass (a traceback), after the earlier
    # run's checkpoints were cleared.
    assert main([*tiny, "trainer.max_epochs=1"]) == 0
    _fails_cleanly(capsys, [*tiny, "trainer.max_epochs=1", f"model.backend={backend}"], "model.backend", "cpu")
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.parametrize(("model", "backend"), [("sage", "gar"), ("saint", "gas"), ("sage", "hpspmm")])
def test_kernel_backend_under_mixed_precision_exits_2_and_leaves_the_earlier_run(capsys, tiny, tmp_path, model,
                                                                                 backend):
    # GAR, GAS and HP-SpMM take float32/float64 features; under autocast they got bfloat16 ones and raised their
    # TypeError mid-fit (a traceback), after the earlier run's checkpoints were cleared.
    assert main([*tiny, "trainer.max_epochs=1"]) == 0
    mixed = [*tiny, "trainer.max_epochs=1", f"model={model}", "trainer.precision=bf16-mixed",
             f"output_dir={tmp_path / model}"]  # (into the first run's folder it would be refused as other settings)
    _fails_cleanly(capsys, [*mixed, f"model.backend={backend}"], "model.backend", "trainer.precision=bf16-mixed",
                   "model.backend=gespmm")
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()
    assert main(mixed) == 0


@pytest.mark.parametrize(("model", "backend"), [("gcn", "gespmm"), ("gat", "gespmm"), ("gat", "fused"),
                                               ("sage", "gespmm"), ("saint", "gespmm")])
def test_kernel_backends_under_mixed_precision_are_checked_for_the_device_only(capsys, tiny, model, backend):
    # GCNConv and GATConv sum in float32 under autocast (PyG's dtype), so the kernels get float32 features, and
    # GE-SpMM takes SAGEConv's and GraphSAINTConv's bfloat16 ones: a CPU run is refused for its device, not for its
    # precision
    err = _fails_cleanly(capsys, [*tiny, f"model={model}", "trainer.precision=bf16-mixed", f"model.backend={backend}"],
                         "model.backend", "this run trains on cpu")
    assert "precision" not in err


KERNEL_PREFIX = {"gespmm": "gespmm_rows", "gar": "gar_forward", "hpspmm": "hp_spmm", "fused": "gat_softmax_rows"}


@pytest.mark.gpu
@pytest.mark.parametrize(("model", "backend"), [("gcn", "gespmm"), ("gat", "gespmm"), ("gat", "fused"),
                                               ("sage", "gespmm"), ("saint", "gespmm"), ("gcn", "gar"),
                                               ("gcn", "hpspmm")])
def test_kernel_backends_train_under_mixed_precision_on_cuda(tiny, model, backend, monkeypatch, tmp_path):
    """The run finishes both epochs on the GPU with finite losses, the aggregations are asked for the named
    backend, and its kernels ran (the fused attention's aggregation for "fused"): the exit status alone passed a run
    that trained through another path, and "auto" picks GE-SpMM or the fused attention on the tiny graph, so the
    kernel alone did not show that model.backend arrived (hence GAR and HP-SpMM, which "auto" does not pick)."""
    from graphfuse.engine import dispatcher
    from graphfuse.kernels import runtime as rt

    asked = []  # the backend argument of every aggregation's dispatch
    resolve = dispatcher.resolve_cached
    monkeypatch.setattr(dispatcher, "resolve_cached", lambda *args, **kw: asked.append(args[4]) or resolve(*args, **kw))
    launched = []
    call, launch = rt.Kernel.__call__, rt.launch
    monkeypatch.setattr(rt.Kernel, "__call__", lambda kernel, *args: launched.append(kernel.name) or call(kernel, *args))
    monkeypatch.setattr(rt, "launch", lambda filename, name, *args, **kw: launched.append(name) or launch(
        filename, name, *args, **kw))
    assert main([*tiny, "trainer.accelerator=gpu", "trainer.max_epochs=2", f"model={model}",
                 "trainer.precision=bf16-mixed", f"model.backend={backend}"]) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["epochs_run"] == 2 and metrics["device"] == torch.cuda.get_device_name(), metrics["device"]
    assert all(math.isfinite(metrics[stage]["loss"]) for stage in ("train", "val", "test")), metrics
    assert any(name.startswith(KERNEL_PREFIX[backend]) for name in launched), sorted(set(launched))
    if backend != "fused":  # the fused attention dispatches nothing
        assert backend in asked, asked
    if backend in ("gar", "hpspmm"):
        assert not any(name.startswith("gespmm_rows") for name in launched), sorted(set(launched))


def test_backend_of_a_pyg_twin_is_not_checked_against_the_device(tiny):
    # model.backend goes to graphfuse's own models only (build.model_kwargs): a PyG twin ignores it and trained
    # on the CPU before the backend check, which refused the run
    assert main([*tiny, "trainer.max_epochs=1", "model=pyg_gcn", "model.backend=gespmm"]) == 0


@pytest.mark.parametrize("where", ["file", "under_file"])
def test_output_dir_that_cannot_be_created_exits_2(capsys, tiny_settings, tmp_path, where):
    # output_dir naming a file (or a path under one) failed with a FileExistsError/NotADirectoryError traceback
    # from pathlib after the data and model were built
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    out = blocker if where == "file" else blocker / "run"
    _fails_cleanly(capsys, [*tiny_settings, "trainer.max_epochs=1", f"output_dir={out}"],
                   "output_dir", str(out))
    assert blocker.read_text() == "not a folder"


def test_python_dash_m_runs_the_cli():
    """``python -m graphfuse.trainers.cli`` imported the module and exited 0 without doing anything."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "graphfuse.trainers.cli", "experiment=nope"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "nope" in done.stderr


@pytest.mark.parametrize("item", ["sampler.num_neighbors[0]=3", "sampler.num_neighbors.0=3"])
def test_one_list_element_override_exits_2(capsys, item):
    """omegaconf's TypeError ('Cannot merge incompatible container types') came out as a traceback, exit 1."""
    _fails_cleanly(capsys, ["sampler=neighbor", item], "a list is set whole", "num_neighbors=[15,10,5]")


@pytest.mark.parametrize("stop, status, what", [("sigterm", 143, "SIGTERM"), ("ctrl-c", 130, "an interrupt")])
def test_a_stopped_run_exits_nonzero_naming_resume(capsys, monkeypatch, tiny, stop, status, what):
    """Lightning raises SIGTERM as a SystemExit without a code: a preempted run exited 0, as if it had finished."""
    import sys

    from lightning.pytorch.utilities.exceptions import SIGTERMException

    import graphfuse.trainers.run as run

    def train(cfg, verbose=True):
        if stop == "sigterm":
            raise SIGTERMException
        sys.exit(1)  # what Lightning does after a KeyboardInterrupt

    monkeypatch.setattr(run, "train", train)
    assert main(tiny) == status
    assert f"stopped by {what}" in capsys.readouterr().err


def test_a_stop_says_whether_there_is_an_epoch_to_resume(capsys, monkeypatch, tiny, tmp_path):
    """A stop before any epoch finished advised trainer.resume=true, which then failed with 'no checkpoint'; a stop
    while Lightning was half-imported crashed in the handler, importing it again (review)."""
    import types

    import graphfuse.trainers.run as run
    from graphfuse.trainers.cli import interrupted

    def stopped(cfg, verbose=True):
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "train", stopped)
    assert main(tiny) == 130
    assert "before an epoch finished; nothing to resume" in capsys.readouterr().err
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    last.parent.mkdir(parents=True)
    last.write_bytes(b"")
    assert main(tiny) == 130
    err = capsys.readouterr().err.replace("\n", " ")
    assert f"{last} holds the last finished epoch: run again with trainer.resume=true" in err
    monkeypatch.setitem(sys.modules, "lightning.pytorch.utilities.exceptions", types.ModuleType("half_imported"))
    assert interrupted("graphfuse-train", KeyboardInterrupt()) == 130
