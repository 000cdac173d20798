"""One training run from a composed config: data, model, Lightning Trainer, checkpoints, logs, metrics.json.

The run directory (``output_dir``, default ``runs/<experiment>/seed<seed>``) holds::

    config.yaml              the resolved config
    checkpoints/best-*.ckpt  best val/acc;  checkpoints/last.ckpt  the latest epoch (what resume reads)
    logs/version_*/          CSV logs (metrics.csv: one row per epoch and stage)
    metrics.json             final train/val/test metrics of the best checkpoint, best epoch, timings, device
    wandb_run_id             with wandb: the wandb run that ``trainer.resume`` continues
"""

from __future__ import annotations

import json
import logging
import os
import platform
import re
import statistics
import sys
import time
import warnings
from datetime import UTC, datetime
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint, RichProgressBar
from lightning.pytorch.loggers import CSVLogger, Logger
from omegaconf import DictConfig, OmegaConf

import graphfuse
from graphfuse.data.paths import check_outside_mirror
from graphfuse.trainers.build import build_datamodule, build_dataset, build_model, check_backend
from graphfuse.trainers.config import ConfigError, resolved_output_dir, validate_config
from graphfuse.trainers.module import STAGES, NodeClassifier

log = logging.getLogger(__name__)

MONITOR = "val/acc"
WANDB_ID = "wandb_run_id"  # in the run directory: the wandb run that trainer.resume continues
# data/model keys a resume may change: a path, and settings the saved weights do not depend on
RESUME_FREE = {("data", "root"), ("model", "backend"), ("model", "dropout"), ("model", "attn_dropout")}
_warned_no_wandb = False


class EpochPrinter(Callback):
    """Print one line per epoch (epoch, train loss, val loss and accuracy, epoch time): logs and CI output."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        metrics = trainer.callback_metrics
        validated = (trainer.current_epoch + 1) % (trainer.check_val_every_n_epoch or 1) == 0

        def value(key: str) -> str:  # val/* only at the epochs that ran validation (else an earlier epoch's)
            fresh = validated or not key.startswith("val/")
            return f"{float(metrics[key]):.4f}" if fresh and key in metrics else "-"

        seconds = getattr(pl_module, "last_epoch_time", float("nan"))
        print(
            f"epoch {trainer.current_epoch:>4d}/{trainer.max_epochs}  train/loss {value('train/loss')}  "
            f"val/loss {value('val/loss')}  val/acc {value('val/acc')}  time {seconds * 1e3:.1f} ms",
            file=self.stream or sys.stdout,
            flush=True,
        )


class _EarlyStopping(EarlyStopping):
    """Lightning's EarlyStopping, except that a resumed run keeps its own ``patience`` (Lightning restores the
    checkpoint's over it) and starts with no stop recorded; the count of checks without improvement carries
    over. Its state key is EarlyStopping's, so checkpoints written by either resume into the other."""

    @property
    def state_key(self) -> str:
        return "EarlyStopping" + repr({"monitor": self.monitor, "mode": self.mode})

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        patience, reason, message = self.patience, self.stopping_reason, self.stopping_reason_message
        super().load_state_dict(state_dict)
        self.patience, self.stopped_epoch = patience, 0
        self.stopping_reason, self.stopping_reason_message = reason, message


class _RunCheckpoint(ModelCheckpoint):
    """Lightning's ModelCheckpoint, except that a resumed run finds its checkpoints where they are now.

    - A run directory that was moved or copied keeps its best score (Lightning keeps only the best path, the
      old folder's, when ``dirpath`` changed, and the next epoch then counted as a new best): the saved
      paths are taken to this ``dirpath``.
    - A run stopped after Lightning wrote a new best checkpoint and deleted the one before, but before
      ``last.ckpt``, leaves last.ckpt recording a best file that is gone: the best file that is there is taken,
      with its own score.

    Its state key is ModelCheckpoint's, so checkpoints written by either resume into the other."""

    @property
    def state_key(self) -> str:
        return "ModelCheckpoint" + super().state_key.removeprefix(type(self).__qualname__)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        if self.dirpath and state.get("dirpath") not in (None, self.dirpath):
            def here(path: str) -> str:
                return str(Path(self.dirpath) / Path(path).name) if path else path

            state.update(dirpath=self.dirpath, best_model_path=here(state.get("best_model_path", "")),
                         kth_best_model_path=here(state.get("kth_best_model_path", "")),
                         last_model_path=here(state.get("last_model_path", "")),
                         best_k_models={here(k): v for k, v in state.get("best_k_models", {}).items()})
        super().load_state_dict(state)
        written = _best_files(Path(self.dirpath)) if self.monitor and self.dirpath else []
        if written and self.best_model_path and not Path(self.best_model_path).is_file():
            path = str(written[-1])  # the only one left (see _remove_unrecorded_best)
            score = torch.load(path, map_location="cpu", weights_only=False, mmap=True)["callbacks"][
                self.state_key]["best_model_score"]
            self.best_model_path = self.kth_best_model_path = path
            self.best_model_score = self.kth_value = score
            self.best_k_models = {path: score}


def _loggers(cfg: DictConfig, out: Path, resolved: dict[str, Any]) -> list[Logger]:
    global _warned_no_wandb
    loggers: list[Logger] = [CSVLogger(save_dir=str(out), name="logs")]
    if not cfg.logger.wandb or cfg.logger.wandb_mode == "disabled":
        return loggers
    try:
        import wandb  # noqa: F401
    except ImportError:
        if not _warned_no_wandb:
            log.warning(
                "logger.wandb=true but wandb is not installed (pip install 'graphfuse[wandb]'); "
                "logging to CSV only. Set logger.wandb=false to silence this."
            )
            _warned_no_wandb = True
        return loggers
    from lightning.pytorch.loggers import WandbLogger

    run_id = out / WANDB_ID
    resumed = run_id.read_text().strip() if cfg.trainer.resume and run_id.is_file() else None
    loggers.append(
        WandbLogger(
            project=cfg.logger.project,
            name=cfg.logger.name or f"{cfg.experiment}-seed{cfg.seed}",
            save_dir=str(out),
            offline=cfg.logger.wandb_mode == "offline",
            mode=cfg.logger.wandb_mode,
            config=resolved,
            **({"id": resumed, "resume": "allow"} if resumed else {}),  # a resumed run goes on in the same wandb run
        )
    )
    return loggers


def _recorded_best(saved: dict[str, Any]) -> set[str]:
    """Names of the checkpoint files ``saved`` (last.ckpt) records as best."""
    return {Path(state["best_model_path"]).name for state in saved.get("callbacks", {}).values()
            if isinstance(state, dict) and state.get("best_model_path")}


def _best_files(ckpt_dir: Path) -> list[Path]:
    """The best-*.ckpt files in ``ckpt_dir``, oldest first: by epoch, then Lightning's -vN suffix (by name,
    best-epoch=1000 would come before best-epoch=999)."""
    def order(path: Path) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", path.stem))

    return sorted(ckpt_dir.glob("best-*.ckpt"), key=order)


def _remove_unrecorded_best(ckpt_dir: Path, saved: dict[str, Any]) -> None:
    """Delete the best-*.ckpt files that ``saved`` (last.ckpt) does not record as a best checkpoint: a run stopped
    after writing a new best but before last.ckpt leaves one, which the resumed run would keep beside its own.
    When Lightning had already deleted the recorded one, the newest is kept: :class:`_RunCheckpoint` takes it."""
    recorded = _recorded_best(saved)
    written = _best_files(ckpt_dir)
    keep = {p.name for p in written} & recorded or {p.name for p in written[-1:]}
    for path in written:
        if path.name not in keep:
            log.warning("removing %s: the run being resumed stopped after writing it, before last.ckpt", path)
            path.unlink()


def _cli_value(value: Any) -> str:
    """``value`` as it is written on the command line: null, true, 64, [15,10,5], gcn."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def changed_settings(section: str, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The keys of config ``section`` whose values differ between a run and its resume, apart from those a resume
    may change (:data:`RESUME_FREE`, and ``data.options.download``, which allows a download, not other data)."""
    def value(settings: dict[str, Any], key: str) -> Any:
        v = settings.get(key)
        if (section, key) == ("data", "options") and isinstance(v, dict):
            return {k: x for k, x in v.items() if k != "download"}
        return v

    return sorted(k for k in {*old, *new} if (section, k) not in RESUME_FREE and value(old, k) != value(new, k))


RERUN_FREE = ("output_dir", "trainer.resume", "trainer.progress_bar", "trainer.model_summary",
              "trainer.log_every_n_steps", "logger.", "data.root", "model.backend")
"""Settings (dotted keys, or prefixes ending in ".") a fresh run may change and still replace an earlier run in
its output_dir: how a run is shown and logged, where the data is read from and which engine backend computes
(also free on a resume), not what it trains."""


def _flat(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as ``{"model.hidden": 64, ...}``."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _check_rerun(out: Path, resolved: dict[str, Any]) -> None:
    """A fresh run replaces what an earlier run left in ``out`` (checkpoints, config.yaml, metrics.json) only when
    that run had the same settings (apart from :data:`RERUN_FREE`): a rerun, as ``make train`` twice. A run of
    other settings (``model.hidden=64`` into the default ``runs/<experiment>/seed<seed>``), or files no run
    config describes, are refused: their checkpoints would be lost. So are files other than checkpoints in
    ``out/checkpoints``, which a fresh run clears."""
    config_file = out / "config.yaml"
    ours, foreign = _run_checkpoints(out / "checkpoints")
    if foreign:
        names = ", ".join(p.name for p in foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise ConfigError(
            f"{out / 'checkpoints'} holds files that are not this kind of run's checkpoints ({names}); a fresh run "
            f"would clear that folder. Point this run at another folder (e.g. output_dir={_free_folder(out)}), or "
            "move them."
        )
    held = [p.name for p in (config_file, out / "metrics.json") if p.exists()]
    held += [f"checkpoints/{p.name}" for p in ours]
    if not held:
        return
    try:
        earlier = OmegaConf.to_container(OmegaConf.load(config_file))
    except Exception:  # noqa: BLE001 - absent, unreadable or not YAML: no run config describes these files
        earlier = None
    free = _free_folder(out)
    if not isinstance(earlier, dict) or "seed" not in earlier:
        what = "no config.yaml" if not config_file.exists() else "a config.yaml that is not a graphfuse run's"
        raise ConfigError(
            f"output_dir={out} holds {', '.join(held)} with {what}; a fresh run would replace them. Point this run "
            f"at another folder (e.g. output_dir={free}), or move them."
        )
    old, new = _flat(earlier), _flat(resolved)
    changed = _changed(old, new)
    if changed:
        shown = ", ".join(f"{k}={_cli_value(old.get(k))} (this run: {_cli_value(new.get(k))})" for k in changed[:4])
        # a resume may change optimiser, trainer and sampler settings, not the data, model or seed
        resumable = all(k.split(".")[0] in ("optim", "trainer", "sampler") for k in changed)
        raise ConfigError(
            f"output_dir={out} holds a run of other settings ({shown}{', ...' if len(changed) > 4 else ''}); a "
            f"fresh run would replace its checkpoints. Give this run another folder (e.g. output_dir={free})"
            f"{', continue that run with trainer.resume=true' if resumable else ''}, or delete the folder."
        )


def _changed(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The flattened settings that differ between two runs, apart from :data:`RERUN_FREE`."""
    return sorted(k for k in {*old, *new} if not k.startswith(RERUN_FREE) and old.get(k) != new.get(k))


def finished_run(cfg: DictConfig) -> dict[str, Any] | None:
    """The metrics.json content of a finished run of ``cfg``'s settings (apart from :data:`RERUN_FREE`) in its
    output_dir, or None: what a stopped sweep (scripts/reproduce.py --resume) keeps instead of training it again.
    A fresh run removes metrics.json when it starts, so the file is only there when that run finished."""
    out = resolved_output_dir(cfg).resolve()
    try:
        metrics = json.loads((out / "metrics.json").read_text())
        earlier = OmegaConf.to_container(OmegaConf.load(out / "config.yaml"))
    except Exception:  # noqa: BLE001 - absent, unreadable or not a run's: nothing finished there
        return None
    if not isinstance(earlier, dict) or not isinstance(metrics, dict):
        return None
    resolved = OmegaConf.to_container(cfg, resolve=True)
    return None if _changed(_flat(earlier), _flat(resolved)) else metrics


def _free_folder(out: Path) -> Path:
    """The first of ``out-2``, ``out-3``, ... that does not exist: a folder to suggest for another run."""
    number = 2
    while out.with_name(f"{out.name}-{number}").exists():
        number += 1
    return out.with_name(f"{out.name}-{number}")


def _resume_state(cfg: DictConfig, ckpt_dir: Path, resolved: dict[str, Any]) -> dict[str, Any] | None:
    """The content of the checkpoint to resume from (``trainer.resume``), checked; None for a fresh run (whose
    folder :func:`_check_rerun` checked first). Touches nothing: a refused run leaves the run directory as it was."""
    if not cfg.trainer.resume:
        return None
    last = ckpt_dir / "last.ckpt"
    if not last.is_file():
        raise ConfigError(
            f"trainer.resume=true but there is no checkpoint to resume from at {last}; run once without "
            f"trainer.resume (or point output_dir= at the run to continue)."
        )
    # mmap: only the epoch and hyper-parameters are read here; fit loads the whole checkpoint itself
    try:
        saved = torch.load(last, map_location="cpu", weights_only=False, mmap=True)
    except (RuntimeError, OSError) as error:  # cut short, empty, not a checkpoint, unreadable
        raise ConfigError(
            f"trainer.resume=true: cannot read {last} ({str(error).splitlines()[0]}); the file is damaged or "
            "not a checkpoint: start a fresh run (without trainer.resume), or put a readable last.ckpt there."
        ) from None
    before = saved.get("hyper_parameters", {}).get("config") or {}
    if before and before.get("seed") != resolved["seed"]:  # the batches, dropout and data would mix two seeds
        raise ConfigError(
            f"trainer.resume=true: seed={resolved['seed']} differs from the run being resumed ({last}), which has "
            f"seed={before.get('seed')}; resume with that seed, or start a fresh run."
        )
    for section in ("data", "model"):  # what the weights were trained for; optim, trainer, sampler may change
        old, new = before.get(section, {}), resolved[section]
        changed = changed_settings(section, old, new)
        if old and changed:
            values = ", ".join(f"{section}.{k}={_cli_value(old.get(k))} (this run: {_cli_value(new.get(k))})"
                               for k in changed)
            raise ConfigError(
                f"trainer.resume=true: {', '.join(f'{section}.{k}' for k in changed)} differ from the run being "
                f"resumed ({last}): that run has {values}; resume with that run's {section} settings, or start "
                "a fresh run."
            )
    done = saved["epoch"] + 1  # last.ckpt is written at the end of an epoch, counted from 0
    if done > cfg.trainer.max_epochs:  # Lightning lets done = max_epochs + 1 through and trains nothing
        raise ConfigError(
            f"trainer.resume=true: {last} was saved after {done} epochs, more than trainer.max_epochs="
            f"{cfg.trainer.max_epochs}; raise trainer.max_epochs to continue that run."
        )
    waited = _stopped_for_good(cfg, saved)
    if waited and (ckpt_dir.parent / "metrics.json").is_file():  # finished: Lightning would train one more epoch
        raise ConfigError(  # (and more, were it better) past the stop
            f"trainer.resume=true: the run in {last} stopped early ({waited} validation checks "
            f"without a better {MONITOR}, trainer.patience={cfg.trainer.patience}); it has nothing to continue. "
            "Raise trainer.patience (or set it to 0) to train it further, or start a fresh run."
        )
    recorded = sorted(_recorded_best(saved) - {last.name})
    if recorded and not any(ckpt_dir.glob("best-*.ckpt")):
        raise ConfigError(
            f"trainer.resume=true: the best checkpoint {last} records ({', '.join(recorded)}) is not in {ckpt_dir}, "
            "nor any other best-*.ckpt, so the run's best weights are lost and it cannot be tested as it would "
            "have been; start a fresh run (without trainer.resume)."
        )
    return saved


def _stopped_for_good(cfg: DictConfig, saved: dict[str, Any]) -> int:
    """The validation checks without improvement after which the saved run stopped early, when this run's
    patience would stop it again (else 0): resumed, it has nothing left to train."""
    stopper = next((state for key, state in saved.get("callbacks", {}).items() if key.startswith("EarlyStopping")),
                   {})
    waited = stopper.get("wait_count", 0)
    stopped = waited >= stopper.get("patience", cfg.trainer.patience)  # that run's own patience ran out
    return waited if cfg.trainer.patience and stopped and waited >= cfg.trainer.patience else 0


def _run_checkpoints(ckpt_dir: Path) -> tuple[list[Path], list[Path]]:
    """What ``ckpt_dir`` holds: (the checkpoint files a run writes, everything else)."""
    entries = sorted(ckpt_dir.iterdir()) if ckpt_dir.is_dir() else []
    ours = [p for p in entries if p.is_file() and (p.name == "last.ckpt" or fnmatch(p.name, "best-*.ckpt"))]
    return ours, [p for p in entries if p not in ours]


def _clear_checkpoints(ckpt_dir: Path, saved: dict[str, Any] | None) -> None:
    """A fresh run (``saved`` None) removes an earlier run's checkpoints (last.ckpt, best-*.ckpt; it refuses a
    folder holding anything else); a resumed one the best checkpoint its last.ckpt does not record (see
    :func:`_remove_unrecorded_best`)."""
    if saved is not None:
        _remove_unrecorded_best(ckpt_dir, saved)
        return
    ours = _run_checkpoints(ckpt_dir)[0]
    if ours:
        log.warning("%s holds checkpoints of an earlier run of the same settings; removing them and starting fresh "
                    "(trainer.resume=true continues that run instead)", ckpt_dir)
        for path in ours:
            path.unlink()


def _seed_early_stopping(stopper: EarlyStopping, checkpoint: ModelCheckpoint, saved: dict[str, Any]) -> None:
    """Early stopping added to a run resumed from a checkpoint without its state starts from the run's best
    score (Lightning would start from -inf: any resumed epoch would be an improvement)."""
    callbacks = saved.get("callbacks", {})
    score = callbacks.get(checkpoint.state_key, {}).get("best_model_score")
    if stopper.state_key not in callbacks and score is not None:
        stopper.best_score = torch.as_tensor(score).detach().clone().cpu()


def device_name(device: torch.device) -> str:
    """A readable name of ``device``: the GPU model, or the CPU's architecture and core count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpu = platform.processor() or platform.machine()
    return f"cpu ({cpu}, {os.cpu_count()} cores)"


def _summary(metrics: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{metrics['experiment']}, seed {metrics['seed']}")
    for column in ("split", "loss", "acc", "f1_micro"):
        table.add_column(column, justify="left" if column == "split" else "right")
    for stage in STAGES:
        row = metrics[stage]
        table.add_row(stage, f"{row['loss']:.4f}", f"{row['acc']:.4f}", f"{row['f1_micro']:.4f}")
    console = Console()
    console.print(table)
    epochs = metrics["epochs_run"]
    console.print(
        f"best checkpoint: epoch {metrics['best_epoch']} (val/acc {metrics['best_val_acc']:.4f}); "
        f"{epochs} epoch{'s' if epochs != 1 else ''}, {metrics['wall_time_s']:.1f} s wall, "
        f"{metrics['median_epoch_time_s'] * 1e3:.1f} ms per training epoch "
        f"({'median after the first' if epochs > 1 else 'the only one, its set-up included'}) on "
        f"{metrics['device']}\n"
        f"run directory: {metrics['output_dir']}",
        highlight=False, soft_wrap=True,
    )


def _trainer(**kwargs: Any) -> pl.Trainer:
    """``pl.Trainer(**kwargs)``, reporting settings Lightning rejects (accelerator, precision, ...) as a ConfigError."""
    try:
        return pl.Trainer(**kwargs)
    except (MisconfigurationException, ValueError, RuntimeError, ImportError) as error:
        hint = ""
        if kwargs.get("accelerator") in ("gpu", "cuda") and not torch.cuda.is_available():
            hint = f" (trainer.accelerator={kwargs['accelerator']}, but no CUDA GPU is visible here: use auto or cpu)"
        raise ConfigError(f"invalid trainer settings: {error}{hint}") from None


def train(cfg: DictConfig, *, verbose: bool = True) -> dict[str, Any]:
    """Train, checkpoint and test the run ``cfg`` describes; write its run directory.

    Args:
        cfg: a config from :func:`graphfuse.trainers.config.load_config`.
        verbose: show progress (a rich bar on a terminal when ``trainer.progress_bar``, else a line per epoch)
            and the final summary table; False prints nothing (batch runs such as scripts/reproduce.py).

    Returns:
        The content of metrics.json.

    Raises:
        ConfigError: invalid model, dataset or trainer settings, or ``trainer.resume`` without a checkpoint.
        graphfuse.data.DatasetNotFoundError: the dataset's files are absent and cannot be downloaded.
    """
    start = time.perf_counter()
    validate_config(cfg)  # again: a config changed after load_config (e.g. by OmegaConf.update) is not trusted
    out = resolved_output_dir(cfg).resolve()
    try:  # the mirror of raw dataset files is only read
        check_outside_mirror(out, "output_dir", "point output_dir= at a folder outside it")
    except ValueError as error:
        raise ConfigError(f"{error}.") from None
    ckpt_dir = out / "checkpoints"
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved["output_dir"] = str(out)
    if not cfg.trainer.resume:  # before the data and model are built: a refusal comes at once
        _check_rerun(out, resolved)

    # best-*.ckpt: the best val/acc (trainer.test's ckpt_path="best" reads the first ModelCheckpoint);
    # last.ckpt: every epoch, what resume reads (save_last=True on the first one would write it only when the
    # best improves)
    checkpoint = _RunCheckpoint(dirpath=str(ckpt_dir), filename="best-{epoch:03d}", monitor=MONITOR, mode="max",
                                save_top_k=1, auto_insert_metric_name=True)
    last = _RunCheckpoint(dirpath=str(ckpt_dir), filename="last", save_top_k=1, save_on_train_epoch_end=True,
                          enable_version_counter=False)
    callbacks: list[Callback] = [checkpoint, last]
    # registered with patience 0 too, as one that never stops: its state then loads on resume whatever either
    # run's patience (Lightning warns about a checkpoint's callback that is missing), and counts carry over
    stopper = _EarlyStopping(monitor=MONITOR, mode="max", patience=cfg.trainer.patience or cfg.trainer.max_epochs + 1,
                             check_finite=bool(cfg.trainer.patience))
    callbacks.append(stopper)
    use_bar = verbose and cfg.trainer.progress_bar and sys.stdout.isatty()
    if use_bar:
        callbacks.append(RichProgressBar())
    elif verbose:
        callbacks.append(EpochPrinter())
    trainer = _trainer(
        max_epochs=cfg.trainer.max_epochs,
        accelerator=cfg.trainer.accelerator,
        devices=cfg.trainer.devices,
        deterministic=cfg.trainer.deterministic,
        precision=cfg.trainer.precision,
        logger=_loggers(cfg, out, resolved),
        callbacks=callbacks,
        enable_progress_bar=use_bar,
        enable_model_summary=verbose and cfg.trainer.model_summary,
        log_every_n_steps=cfg.trainer.log_every_n_steps,
        check_val_every_n_epoch=cfg.trainer.check_val_every_n_epoch,
        num_sanity_val_steps=0,
        default_root_dir=str(out),
    )
    try:
        return _fit_and_test(cfg, trainer, checkpoint, stopper, out, resolved, start, verbose)
    finally:
        _finish_wandb(trainer)


def _wandb_loggers(trainer: pl.Trainer) -> list[Logger]:
    return [logger for logger in trainer.loggers if type(logger).__name__ == "WandbLogger"]


def _finish_wandb(trainer: pl.Trainer) -> None:
    """End the run's wandb run, if it has one: the next train() in this process (scripts/reproduce.py) would
    otherwise log into it (Lightning's WandbLogger reuses a run in progress)."""
    if _wandb_loggers(trainer):
        import wandb

        wandb.finish()


def _start_wandb(cfg: DictConfig, logger: Logger) -> str:
    """Start ``logger``'s wandb run (Lightning would at fit) and return its id; wandb's own errors (no API key for
    ``logger.wandb_mode=online``, no network) become a :class:`ConfigError`."""
    import wandb

    try:
        return logger.experiment.id
    except wandb.errors.Error as error:
        raise ConfigError(
            f"logger.wandb_mode={cfg.logger.wandb_mode}: wandb could not start the run ({error}); run `wandb login` "
            "for online logging, or use logger.wandb_mode=offline or logger.wandb=false."
        ) from None


def _fit_and_test(cfg: DictConfig, trainer: pl.Trainer, checkpoint: ModelCheckpoint, stopper: EarlyStopping,
                  out: Path, resolved: dict[str, Any], start: float, verbose: bool) -> dict[str, Any]:
    """Build the data and model, then (only then: a bad config leaves an earlier run's directory as it was)
    prepare the run directory, fit, test and write metrics.json."""
    check_backend(cfg.model, trainer.strategy.root_device, cfg.trainer.precision)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    dataset = build_dataset(cfg.data)
    model = build_model(cfg.model, dataset.num_features, dataset.num_classes)
    module = NodeClassifier(model, dataset.num_classes, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay,
                            ogb_name=dataset.ogb_name, config=resolved)
    datamodule = build_datamodule(cfg, dataset)
    saved = _resume_state(cfg, out / "checkpoints", resolved)
    resume_from = out / "checkpoints" / "last.ckpt" if saved is not None else None
    try:
        out.mkdir(parents=True, exist_ok=True)
        run_ids = [_start_wandb(cfg, logger) for logger in _wandb_loggers(trainer)]  # before anything is cleared
        _clear_checkpoints(out / "checkpoints", saved)
        replaced = [name for name in ("config.yaml", "metrics.json") if saved is None and (out / name).exists()]
        if replaced:  # they went silently, also a folder's files that no run of ours wrote
            log.warning("%s holds %s of an earlier run; replacing them (trainer.resume=true continues that run, "
                        "another output_dir keeps it)", out, " and ".join(replaced))
        (out / "config.yaml").write_text(OmegaConf.to_yaml(resolved))
        (out / "metrics.json").unlink(missing_ok=True)
        if saved is None:  # a fresh run: an earlier run's wandb id must not be resumed later
            (out / WANDB_ID).unlink(missing_ok=True)
        for run_id in run_ids:
            (out / WANDB_ID).write_text(run_id + "\n")
    except OSError as error:  # output_dir names a file, a path under one, or a folder this user cannot write
        raise ConfigError(
            f"cannot use output_dir={out} as the run directory ({error.strerror or error}: {error.filename}); "
            "point output_dir= at a folder that can be created and written."
        ) from None
    if saved is not None and cfg.trainer.patience:
        _seed_early_stopping(stopper, checkpoint, saved)
    stopped = saved is not None and bool(_stopped_for_good(cfg, saved))  # killed before metrics.json was written
    if stopped:  # nothing left to train: tests again
        trainer.fit_loop.max_epochs = saved["epoch"] + 1
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
        warnings.filterwarnings("ignore", message=".*is smaller than the logging interval.*")
        warnings.filterwarnings("ignore", message=".*LeafSpec.*is deprecated.*")
        warnings.filterwarnings("ignore", message="Checkpoint directory .* exists and is not empty")
        warnings.filterwarnings("ignore", message=".*multiple `ModelCheckpoint` callbacks.*")  # best is first
        trainer.fit(module, datamodule=datamodule, ckpt_path=str(resume_from) if resume_from else None)
        epochs_run = trainer.current_epoch
        first_epoch = module.first_epoch if module.first_epoch is not None else epochs_run
        stopped_early = stopped or stopper.stopped_epoch > 0  # read now: testing restores callback states from "best"
        trainer.test(module, datamodule=datamodule, ckpt_path="best", verbose=False)

    device = trainer.strategy.root_device
    module.to(device)
    with trainer.precision_plugin.forward_context():  # as validation scored it: under bf16 autocast it differed
        final = module.evaluate(datamodule.device_batch(device))
    best_path = checkpoint.best_model_path
    best_epoch = torch.load(best_path, map_location="cpu", weights_only=False)["epoch"]
    epoch_times = module.epoch_times
    metrics: dict[str, Any] = {
        "experiment": cfg.experiment,
        "seed": cfg.seed,
        "dataset": cfg.data.name,
        "model": cfg.model.name,
        "sampler": cfg.sampler.name,
        **{stage: {k.split("/")[1]: v for k, v in final.items() if k.startswith(f"{stage}/")} for stage in STAGES},
        "best_epoch": best_epoch,
        "best_val_acc": float(checkpoint.best_model_score),
        "epochs_run": epochs_run,
        "epochs_this_run": epochs_run - first_epoch,
        "max_epochs": cfg.trainer.max_epochs,
        "stopped_early": stopped_early,
        "resumed_from": str(resume_from) if resume_from else None,
        "wall_time_s": time.perf_counter() - start,
        "reorder_s": getattr(datamodule, "reorder_seconds", None),
        "mean_epoch_time_s": sum(epoch_times) / len(epoch_times) if epoch_times else 0.0,
        # the first epoch compiles kernels and builds formats: the steady-state figure leaves it out
        "median_epoch_time_s": statistics.median(epoch_times[1:] or epoch_times) if epoch_times else 0.0,
        "device": device_name(device),
        "versions": {
            "graphfuse": graphfuse.__version__,
            "torch": torch.__version__,
            "lightning": pl.__version__,
            "python": platform.python_version(),
        },
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "output_dir": str(out),
        "best_checkpoint": best_path,
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    if verbose:
        _summary(metrics)
    return metrics
