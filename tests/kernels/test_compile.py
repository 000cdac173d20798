"""Every .cu file compiles with nvcc (sm_80 and sm_90); template instances named by the launcher's
``instances()`` (when it has one) are forced, so template bodies are compiled too."""

from __future__ import annotations

import importlib
import shutil
import subprocess

import pytest

from graphfuse.kernels import runtime

NVCC = shutil.which("nvcc")
FILES = [p.name for p in runtime.kernel_files()]


def _instances(filename: str) -> list[str]:
    """The template instances the launcher of ``filename`` (kernels/<name>.py, every .cu file has one) names."""
    return list(importlib.import_module(f"graphfuse.kernels.{filename[:-3]}").instances())


@pytest.mark.parametrize("filename", FILES)
def test_every_kernel_file_names_its_instances(filename):
    """Without them the nvcc test below compiles no template body and counts zero entries (a renamed
    ``instances`` passed it)."""
    assert _instances(filename), filename


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("filename", FILES)
def test_cu_compiles_with_nvcc(tmp_path, filename, arch):
    names = _instances(filename)
    forced = "\n".join(f"void* gf_instance_{i} = (void*)&{name};" for i, name in enumerate(names))
    unit = tmp_path / f"check_{filename}"
    unit.write_text(runtime.source(filename) + "\n" + forced + "\n")
    result = subprocess.run(
        [NVCC, "--ptx", f"-arch={arch}", "--std=c++17", "-o", str(tmp_path / "out.ptx"), str(unit)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    ptx = (tmp_path / "out.ptx").read_text()
    assert names and ptx.count(".entry") >= len(names)
