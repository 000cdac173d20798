"""``graphfuse-train`` / ``python scripts/train.py``: compose a config from ``key=value`` items and train.

Usage::

    graphfuse-train                                   # experiment=gcn_cora
    graphfuse-train experiment=gat_cora trainer.max_epochs=100
    graphfuse-train experiment=gcn_cora model=gat model.hidden=8 output_dir=runs/try

A bad config, a missing dataset or a malformed item exits with status 2 and a one-paragraph message on
stderr, without a traceback; a run stopped by SIGTERM exits 143, by Ctrl-C 130.
"""

from __future__ import annotations

import logging
import sys
import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omegaconf import DictConfig

USAGE = """\
usage: graphfuse-train [key=value ...]

Items: experiment=<name> picks the package's configs/experiment/<name>.yaml (default gcn_cora); data=, model=,
trainer=, sampler= pick a group file (configs/<group>/<name>.yaml); a choice ending in .yaml is the path of your
own file (experiment=my_exp.yaml); anything else is an override such as model.hidden=64, trainer.max_epochs=100,
seed=1, output_dir=runs/try, trainer.resume=true.
Experiments: {experiments}
"""


def _fail(message: str) -> int:
    print(textwrap.fill(f"graphfuse-train: error: {message}", width=110, break_long_words=False,
                        break_on_hyphens=False), file=sys.stderr)
    return 2


def interrupted(prog: str, stop: BaseException, cfg: DictConfig | None = None,
                resume: str = "run again with trainer.resume=true") -> int:
    """The exit status of a run stopped by SIGTERM (143) or Ctrl-C (130), with a line on stderr saying whether the
    run of ``cfg`` (None before its config is composed) has a last.ckpt to resume from (``resume``: how to continue
    it). Lightning turns SIGTERM into a SystemExit without a code (status 0: a preempted job looked finished) and
    Ctrl-C into ``sys.exit(1)``."""
    from graphfuse.trainers.config import last_checkpoint

    # Lightning raised it only if it is loaded (importing it here could meet a half-imported module: a stop
    # during start-up)
    exceptions = sys.modules.get("lightning.pytorch.utilities.exceptions")
    sigterm = isinstance(stop, getattr(exceptions, "SIGTERMException", ()))
    what, status = ("SIGTERM", 143) if sigterm else ("an interrupt", 130)
    last = None if cfg is None else last_checkpoint(cfg)
    if last is not None and last.is_file():
        print(f"{prog}: stopped by {what}; {last} holds the last finished epoch: {resume} to continue",
              file=sys.stderr)
    else:
        print(f"{prog}: stopped by {what} before an epoch finished; nothing to resume", file=sys.stderr)
    return status


def quiet_lightning() -> None:
    """Route warnings to stderr and mute Lightning's start-up banner (accelerator, tips)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.pytorch.accelerators.cuda"):
        logging.getLogger(name).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    """Run ``graphfuse-train`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    from graphfuse.trainers.config import ConfigError, available, load_config

    if any(arg in ("-h", "--help") for arg in argv):
        print(USAGE.format(experiments=", ".join(available("experiment"))))
        return 0
    from graphfuse.data import DatasetNotFoundError

    quiet_lightning()
    cfg = None
    try:
        cfg = load_config(argv)
        from graphfuse.trainers.run import train

        train(cfg)
    except ConfigError as error:
        return _fail(f"bad config: {error}")
    except DatasetNotFoundError as error:
        return _fail(f"dataset not found: {error}")
    except (KeyboardInterrupt, SystemExit) as stop:
        return interrupted("graphfuse-train", stop, cfg)
    return 0


if __name__ == "__main__":  # python -m graphfuse.trainers.cli ...
    raise SystemExit(main())
