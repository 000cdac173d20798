"""Fixtures for dataset tests: the offline mirror (skip when unset) and an offline, mirror-less setting."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

MIRROR_ENV = "GRAPHFUSE_DATA_MIRROR"


@pytest.fixture(scope="session")
def mirror() -> Path:
    """The read-only raw-file mirror named by $GRAPHFUSE_DATA_MIRROR (the Makefile sets it)."""
    value = os.environ.get(MIRROR_ENV)
    if not value:
        pytest.skip(f"${MIRROR_ENV} is unset: no offline copy of the raw dataset files (the Makefile sets it "
                    f"to ../shared/datasets when present)")
    return Path(value)


@pytest.fixture
def no_mirror(monkeypatch):
    """Loaders see no mirror and no data root from the environment."""
    monkeypatch.delenv(MIRROR_ENV, raising=False)
    monkeypatch.delenv("GRAPHFUSE_DATA_ROOT", raising=False)
