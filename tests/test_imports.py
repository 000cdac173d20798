"""Import direction (kernels ← engine ← nn; trainers on top) and imports without CUDA or CuPy."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# folder → graphfuse subpackages its modules may import (beyond their own); graphfuse.checks, the shared
# argument checks, imports nothing of ours, so every framework layer may use it
ALLOWED = {
    "kernels": set(),
    "framework/graph": {"graphfuse.checks", "graphfuse.graph"},
    "framework/engine": {"graphfuse.checks", "graphfuse.graph", "graphfuse.engine", "graphfuse.kernels"},
    "framework/nn": {"graphfuse.checks", "graphfuse.graph", "graphfuse.engine", "graphfuse.nn"},
    "framework/data": {"graphfuse.checks", "graphfuse.graph", "graphfuse.data"},
    "samplers": {"graphfuse.checks", "graphfuse.graph", "graphfuse.data", "graphfuse.samplers", "graphfuse.kernels"},
}
TOP_LEVEL = {"graphfuse.graph", "graphfuse.engine", "graphfuse.nn", "graphfuse.data"}


def graphfuse_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level > 1:
                raise AssertionError(f"{path}: relative imports may only name the module's own package")
            if node.level == 1:
                continue  # a sibling module of the same package
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n for n in names if n == "graphfuse" or n.startswith("graphfuse.") or n in ("omegaconf",)}
    return found


def subpackage(name: str) -> str:
    return ".".join(name.split(".")[:2])


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_import_direction(folder):
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files, f"no modules under {folder}"
    for path in files:
        for name in graphfuse_imports(path):
            assert name != "omegaconf", f"{path}: only trainers/ may import omegaconf"
            assert subpackage(name) in ALLOWED[folder], f"{path} imports {name}, against the import direction"


def test_checks_import_nothing_of_ours():
    assert graphfuse_imports(ROOT / "framework" / "checks.py") == set()


def test_nothing_imports_trainers():
    for folder in ["framework", "kernels", "samplers"]:
        for path in (ROOT / folder).rglob("*.py"):
            assert not any(subpackage(n) == "graphfuse.trainers" for n in graphfuse_imports(path)), path


def test_package_root_imports_only_framework_parts():
    for name in graphfuse_imports(ROOT / "framework" / "__init__.py"):
        assert subpackage(name) in TOP_LEVEL, name


def test_import_without_cuda_or_cupy():
    code = (
        "import sys; sys.modules['cupy'] = None\n"  # any `import cupy` now raises ImportError
        "import graphfuse, graphfuse.kernels, graphfuse.nn, graphfuse.data, graphfuse.samplers\n"
        "import torch\n"
        "x = torch.randn(3, 2); g = graphfuse.Graph(torch.tensor([[0, 1], [1, 2]]), num_nodes=3)\n"
        "print(graphfuse.aggregate(g, x).shape)\n"
    )
    env = {"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "torch.Size([3, 2])"  # and nothing else printed at import


def test_import_has_no_output():
    result = subprocess.run([sys.executable, "-c", "import graphfuse.trainers, graphfuse.kernels"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
