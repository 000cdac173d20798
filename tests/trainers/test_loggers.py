"""Loggers: CSV always; wandb offline by default when installed; one warning and CSV only when it is not."""

from __future__ import annotations

import logging
import sys
import types

import lightning.pytorch.loggers as pl_loggers
import pytest
from lightning.pytorch.loggers import CSVLogger

from graphfuse.trainers import run
from graphfuse.trainers.config import load_config


def test_csv_only_when_wandb_is_off(tmp_path):
    loggers = run._loggers(load_config(["logger.wandb=false"]), tmp_path, {})
    assert [type(lg) for lg in loggers] == [CSVLogger]


def test_missing_wandb_warns_once_and_keeps_csv(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "wandb", None)  # makes `import wandb` raise ImportError
    monkeypatch.setattr(run, "_warned_no_wandb", False)
    cfg = load_config(["logger.wandb=true"])
    with caplog.at_level(logging.WARNING, logger="graphfuse.trainers.run"):
        first = run._loggers(cfg, tmp_path, {})
        second = run._loggers(cfg, tmp_path, {})
    assert [type(lg) for lg in first] == [type(lg) for lg in second] == [CSVLogger]
    assert caplog.text.count("wandb is not installed") == 1


class FakeWandbLogger:
    """Stands in for Lightning's WandbLogger: records its keyword arguments in ``calls``."""

    calls: list[dict] = []

    def __init__(self, **kwargs):
        self.calls.append(kwargs)


@pytest.fixture
def wandb_calls(monkeypatch):
    """wandb "installed" and Lightning's WandbLogger replaced by FakeWandbLogger; the constructor calls."""
    monkeypatch.setitem(sys.modules, "wandb", types.ModuleType("wandb"))
    monkeypatch.setattr(pl_loggers, "WandbLogger", FakeWandbLogger)
    monkeypatch.setattr(FakeWandbLogger, "calls", [])
    return FakeWandbLogger.calls


def test_wandb_logger_is_offline_by_default(tmp_path, wandb_calls):
    calls = wandb_calls
    loggers = run._loggers(load_config(["experiment=gat_cora", "seed=2"]), tmp_path, {"seed": 2})
    assert len(loggers) == 2 and isinstance(loggers[1], FakeWandbLogger)
    assert calls[0]["mode"] == "offline" and calls[0]["offline"] is True
    assert (calls[0]["project"], calls[0]["name"], calls[0]["save_dir"]) == ("graphfuse", "gat_cora-seed2",
                                                                              str(tmp_path))
    run._loggers(load_config(["logger.wandb_mode=online"]), tmp_path, {})
    assert calls[1]["mode"] == "online" and calls[1]["offline"] is False
    assert len(run._loggers(load_config(["logger.wandb_mode=disabled"]), tmp_path, {})) == 1


def test_a_run_finishes_its_wandb_run(monkeypatch):
    """The next train() in the process (scripts/reproduce.py's seeds) must get a wandb run of its own: Lightning's
    WandbLogger would otherwise reuse the one still in progress."""
    finished = []
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(finish=lambda: finished.append(1)))
    WandbLogger = type("WandbLogger", (), {})  # noqa: N806 - stands in for Lightning's class, matched by name
    run._finish_wandb(types.SimpleNamespace(loggers=[CSVLogger("unused")]))
    assert finished == []
    run._finish_wandb(types.SimpleNamespace(loggers=[CSVLogger("unused"), WandbLogger()]))
    assert finished == [1]


def test_resume_continues_the_wandb_run_of_the_run_directory(tmp_path, wandb_calls):
    calls = wandb_calls
    (tmp_path / run.WANDB_ID).write_text("abc123\n")
    run._loggers(load_config([]), tmp_path, {})
    run._loggers(load_config(["trainer.resume=true"]), tmp_path, {})
    assert "id" not in calls[0]  # a fresh run: a new wandb run
    assert (calls[1]["id"], calls[1]["resume"]) == ("abc123", "allow")


def test_wandb_failing_to_start_is_a_config_error(tiny, tmp_path, monkeypatch):
    """logger.wandb_mode=online without `wandb login` (or without network): wandb.init raises wandb's own error,
    which ended the run with a traceback."""
    from lightning.pytorch.loggers import Logger

    from graphfuse.trainers.config import ConfigError

    class UsageError(Exception):
        pass

    errors = types.SimpleNamespace(Error=Exception, UsageError=UsageError)
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(errors=errors, finish=lambda: None))

    class WandbLogger(Logger):  # Lightning's WandbLogger as it fails: the run starts on first use of .experiment
        name, version = "wandb", "0"
        log_metrics = log_hyperparams = lambda self, *args, **kwargs: None

        @property
        def experiment(self):
            raise UsageError("No API key configured. Use `wandb login` to log in.")

    monkeypatch.setattr(run, "_loggers", lambda cfg, out, resolved: [CSVLogger(str(out)), WandbLogger()])
    with pytest.raises(ConfigError, match="logger.wandb_mode=online.*No API key configured.*wandb login"):
        run.train(load_config([*tiny, "trainer.max_epochs=1", "logger.wandb=true", "logger.wandb_mode=online"]),
                  verbose=False)
