"""Shared settings of the trainer tests: a tiny synthetic experiment that trains in about a second."""

from __future__ import annotations

import pytest

TINY = [
    "experiment=gcn_synthetic",
    "data.options.num_nodes=200",
    "data.options.avg_degree=5",
    "data.options.num_features=16",
    "data.options.num_classes=4",
    "model.hidden=8",
    "trainer.accelerator=cpu",
    "trainer.progress_bar=false",
    "trainer.model_summary=false",
    "logger.wandb=false",
]


@pytest.fixture
def tiny_settings():
    """Overrides for a tiny run, without ``output_dir``."""
    return list(TINY)


@pytest.fixture
def tiny(tmp_path):
    """Overrides for a tiny run writing into a fresh ``tmp_path/run``."""
    return [*TINY, f"output_dir={tmp_path / 'run'}"]
