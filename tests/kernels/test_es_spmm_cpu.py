"""CPU-side tests of the ES-SpMM launcher (kernels/es_spmm.py): argument validation (raised before any CUDA
use), the tile configuration and shared-memory budget, and a line-by-line Python model of the kernel's
sampling stage (es_spmm.cu) checked against ``edge_sampling.kept_entries`` — the hash, FastRand's primes and
Floyd's steps as the kernel computes them."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import graphfuse
from cases import make_graph_case
from graphfuse.engine.edge_sampling import EdgeSampling, hash_uniforms, kept_entries
from graphfuse.kernels import es_spmm

MASK = (1 << 64) - 1


def _csr():
    rowptr = torch.tensor([0, 2, 3, 5, 6], dtype=torch.int64)
    col = torch.tensor([0, 1, 2, 3, 0, 1], dtype=torch.int32)
    return rowptr, col


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"x": torch.zeros(4, 3, dtype=torch.int32)}, TypeError, "es_spmm: x must have dtype"),
        ({"x": torch.zeros(4, 3, dtype=torch.float16)}, TypeError, "es_spmm: x must have dtype"),
        ({"x": torch.zeros(4)}, ValueError, "es_spmm: x must have 2 dimensions"),
        ({"x": torch.zeros(4, 3).t().contiguous().t()}, ValueError, "es_spmm: x must be contiguous"),
        ({"x": [[0.0]]}, TypeError, "es_spmm: x must be a torch.Tensor"),
        ({"col": torch.zeros(6, dtype=torch.int64)}, TypeError, "es_spmm: col must have dtype torch.int32"),
        ({"col": torch.zeros(6, 1, dtype=torch.int32)}, ValueError, "es_spmm: col must have 1 dimensions"),
        ({"rowptr": torch.zeros(5, dtype=torch.int32)}, TypeError, "es_spmm: rowptr must have dtype torch.int64"),
        ({"rowptr": torch.zeros(0, dtype=torch.int64)}, ValueError, "es_spmm: rowptr must have at least one"),
        ({"values": torch.ones(5)}, ValueError, r"es_spmm: values must have shape \(nnz=6,\)"),
        ({"values": torch.ones(6, 2)}, ValueError, "es_spmm: values must have 1 dimensions"),
        ({"values": torch.ones(6, dtype=torch.float64)}, TypeError, "es_spmm: values must have dtype torch.float32"),
        ({"width": 0}, ValueError, r"es_spmm: width must be an int in \[1, 512\]; got 0"),
        ({"width": 513}, ValueError, r"es_spmm: width must be an int in \[1, 512\]; got 513"),
        ({"width": 16.0}, ValueError, "es_spmm: width must be an int"),
        ({"width": True}, ValueError, "es_spmm: width must be an int"),
        ({"strategy": "uniform"}, ValueError, "es_spmm: strategy must be one of"),
        ({"reduce": "prod"}, ValueError, "es_spmm: reduce must be one of"),
        ({"seed": -1}, ValueError, r"es_spmm: seed must be an int in \[0, 2\*\*63\)"),
        ({"seed": 2**63}, ValueError, r"es_spmm: seed must be an int in \[0, 2\*\*63\)"),
        ({"seed": 1.5}, ValueError, "es_spmm: seed must be an int"),
        ({}, ValueError, "es_spmm: x must be a CUDA tensor; got a tensor on cpu"),
        ({"values": torch.ones(6)}, ValueError, "es_spmm: x must be a CUDA tensor; got a tensor on cpu"),
    ],
)
def test_es_spmm_validation(kwargs, error, match):
    rowptr, col = _csr()
    args = {"rowptr": rowptr, "col": col, "x": torch.zeros(4, 3), "values": None}
    args.update({k: v for k, v in kwargs.items() if k in args})
    extra = {"width": 2, "strategy": "random"}
    extra.update({k: v for k, v in kwargs.items() if k not in args})
    with pytest.raises(error, match=match):
        es_spmm.es_spmm(args["rowptr"], args["col"], args["x"], args["values"], **extra)


def test_es_spmm_width_and_strategy_are_keyword_only_and_required():
    rowptr, col = _csr()
    with pytest.raises(TypeError):
        es_spmm.es_spmm(rowptr, col, torch.zeros(4, 3), None, 2, "random")  # width and strategy positional
    with pytest.raises(TypeError):
        es_spmm.es_spmm(rowptr, col, torch.zeros(4, 3), strategy="random")


def test_kernels_import_without_cupy():
    code = "import sys; sys.modules['cupy'] = None; import graphfuse.kernels.es_spmm as m; print(len(m.instances()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert int(out) > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_config_tiles_cover_up_to_512_columns(dtype):
    item = 4 if dtype == torch.float32 else 8
    for k in range(1, 1300):
        vec, cf = es_spmm.config(k, dtype)
        tile = 32 * vec * cf
        assert tile <= es_spmm.MAX_TILE and k % vec == 0 and vec * item <= 16
        if k < 32:
            assert (vec, cf) == (1, 1)
        else:
            assert tile >= min(k, es_spmm.MAX_TILE), (k, vec, cf)
    assert es_spmm.config(602, torch.float32) == (2, 8)
    assert es_spmm.config(128, torch.float32) == (4, 1)
    assert es_spmm.config(41, torch.float64) == (1, 2)
    assert es_spmm.config(1024, torch.float64) == (2, 8)


def test_shared_memory_fits_the_default_48k_limit():
    for dtype in (torch.float32, torch.float64):
        for weighted in (False, True):
            for strategy in es_spmm.STRATEGY_CODES:
                assert es_spmm.shared_bytes(512, dtype, weighted, strategy) <= 48 * 1024
    assert es_spmm.shared_bytes(512, torch.float64, True, "random") == 48 * 1024
    assert es_spmm.shared_bytes(64, torch.float32, False, "bucket") == 8 * 64 * 4
    assert es_spmm.shared_bytes(64, torch.float32, False, "random") == 8 * 64 * 8  # Floyd's 64-bit offsets


def test_instances_cover_every_strategy_reduce_and_dtype():
    names = es_spmm.instances()
    assert len(names) == len(set(names))
    for t in ("float", "double"):
        for s in range(3):
            for r in range(4):
                for w in ("false", "true"):
                    assert any(n.startswith(f"es_spmm<{t}, {r}, {w}, {s}, ") for n in names), (t, s, r, w)
    name, family = es_spmm._names("float", 1, True, 2, 4, 4)
    assert name == "es_spmm<float, 1, true, 2, 4, 4>" and name in family and len(family) == 8


# ------------------------------------------------------------------------- a Python model of the kernel
def _kernel_uniform(seedmix: int, row: int, slot: int) -> float:
    """es_uniform of es_spmm.cu in unsigned 64-bit arithmetic."""
    z = (seedmix + row * 0xBF58476D1CE4E5B9 + slot * 0x94D049BB133111EB) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    z ^= z >> 31
    return float(z >> 11) * 2.0**-53


def _kernel_offsets(d: int, row: int, width: int, strategy: str, seedmix: int) -> list[int]:
    """Stage 1 of es_spmm.cu for one row: the kept row offsets in slot order."""
    n = min(d, width)
    if strategy == "random" and d > width:
        base, kept = d - width, []
        for t in range(n):
            b = base + t
            c = min(int(_kernel_uniform(seedmix, row, t) * float(b + 1)), b)
            kept.append(b if c in kept else c)
        return kept
    if strategy == "fastrand" and d > width:
        prime = 577 if d % 577 else (1009 if d % 1009 else 1597)
        return [s * prime % d for s in range(n)]
    return list(range(n))


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**63 - 1])
def test_kernel_hash_equals_hash_uniforms(seed):
    rows = torch.tensor([0, 1, 7, 299, 2**31 + 5, 2**40 + 3])
    ref = hash_uniforms(seed, rows, 40)
    seedmix = es_spmm.seed_mix(seed) & MASK
    assert -(2**63) <= es_spmm.seed_mix(seed) < 2**63  # fits the kernel's long long
    mine = torch.tensor([[_kernel_uniform(seedmix, int(r), s) for s in range(40)] for r in rows],
                        dtype=torch.float64)
    assert torch.equal(mine, ref)


def test_seed_mix_takes_numpy_seeds():
    """es_spmm's checks accept a NumPy seed; its product with the multiplier overflowed int64 (OverflowError on
    the GPU, after the checks)."""
    np = pytest.importorskip("numpy")
    for seed in (1, 12345, 2**63 - 1):
        for kind in (np.int64, np.uint64):
            assert es_spmm.seed_mix(kind(seed)) == es_spmm.seed_mix(seed)
    assert es_spmm.seed_mix(np.int32(7)) == es_spmm.seed_mix(7)


def _degree_graph(degrees: list[int]) -> graphfuse.Graph:
    """Target i receives degrees[i] edges (sources cycling over 50 nodes, so some repeat)."""
    dst = torch.repeat_interleave(torch.arange(len(degrees)), torch.tensor(degrees))
    src = torch.arange(dst.numel()) % 50
    return graphfuse.Graph(torch.stack([src, dst]), num_src=50, num_dst=len(degrees))


@pytest.mark.parametrize("strategy", ["bucket", "fastrand", "random"])
@pytest.mark.parametrize("width", [1, 16, 64, 512])
@pytest.mark.parametrize("case", ["hub", "isolated", "degrees"])
def test_kernel_model_keeps_kept_entries(case, width, strategy):
    # degrees: empty rows, d = width ± 1, 577·2 (FastRand falls back to 1009), 577·1009 (to 1597)
    g = _degree_graph([0, 3, 1, 2, 15, 16, 17, 63, 64, 65, 511, 512, 513, 1154, 577 * 1009, 0, 700]) \
        if case == "degrees" else make_graph_case(case)
    sampling = EdgeSampling(width, strategy, seed=3)
    position, target, _ = kept_entries(g.csr, sampling)
    rowptr = g.csr.rowptr.tolist()
    seedmix = es_spmm.seed_mix(3) & MASK
    for r in range(len(rowptr) - 1):
        ref = sorted(position[target == r].tolist())
        d = rowptr[r + 1] - rowptr[r]
        mine = sorted(rowptr[r] + o for o in _kernel_offsets(d, r, width, strategy, seedmix))
        assert mine == ref, (r, d)
        assert len(set(mine)) == len(mine) == min(d, width)
