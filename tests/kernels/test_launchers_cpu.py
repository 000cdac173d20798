"""CPU-side tests of the kernel package: import without CuPy, launcher validation, row schedules,
the atomic-free edge softmax and the "auto" choice."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import weakref
from types import SimpleNamespace

import pytest
import torch

import graphfuse
from cases import make_graph_case
from graphfuse.engine import autograd, reference
from graphfuse.kernels import gar, gas, gat_attention, graph_processing, radix_sort, runtime, spmm


def test_kernels_import_without_cupy():
    code = ("import sys; sys.modules['cupy'] = None; import graphfuse, graphfuse.kernels.spmm, "
            "graphfuse.kernels.gar, graphfuse.kernels.gas; print(sorted(graphfuse.registered_backends()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "gespmm" in out and "gar" in out and "gas" in out


def _csr(n=4, e=6):
    rowptr = torch.tensor([0, 2, 3, 5, 6], dtype=torch.int64)
    col = torch.tensor([0, 1, 2, 3, 0, 1], dtype=torch.int32)
    return rowptr, col


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"x": torch.zeros(4, 3, dtype=torch.int32)}, TypeError,
         "gespmm: x must have dtype torch.float32 or torch.float64 or torch.float16 or torch.bfloat16"),
        ({"x": torch.zeros(4, 3, dtype=torch.bfloat16), "values": torch.ones(6)}, TypeError,
         "gespmm: values must have dtype torch.bfloat16"),
        ({"x": torch.zeros(4, 3, dtype=torch.float16)}, ValueError, "gespmm: x must be a CUDA tensor"),
        ({"x": torch.zeros(4)}, ValueError, "gespmm: x must have 2 dimensions"),
        ({"col": torch.zeros(6, dtype=torch.int64)}, TypeError, "gespmm: col must have dtype torch.int32"),
        ({"rowptr": torch.zeros(5, dtype=torch.int32)}, TypeError, "gespmm: rowptr must have dtype torch.int64"),
        ({"values": torch.ones(5)}, ValueError, r"gespmm: values must have shape \(nnz=6,\)"),
        ({"values": torch.ones(6, 2), "heads": 2}, ValueError, "K=3 must be divisible by heads=2"),
        ({"reduce": "prod"}, ValueError, "gespmm: reduce must be one of"),
        ({"x": torch.zeros(4, 3).t().contiguous().t()}, ValueError, "gespmm: x must be contiguous"),
        ({}, ValueError, "gespmm: x must be a CUDA tensor; got a tensor on cpu"),
        ({"schedule": (torch.tensor([0, 6]),)}, TypeError, "gespmm: schedule must be a RowSchedule"),
    ],
)
def test_gespmm_validation(kwargs, error, match):
    rowptr, col = _csr()
    args = {"rowptr": rowptr, "col": col, "x": torch.zeros(4, 3), "values": None}
    args.update({k: v for k, v in kwargs.items() if k in args})
    extra = {k: v for k, v in kwargs.items() if k not in args}
    with pytest.raises(error, match=match):
        spmm.gespmm(args["rowptr"], args["col"], args["x"], args["values"], **extra)


def test_gespmm_argmask_needs_sum():
    rowptr, col = _csr()
    with pytest.raises(ValueError, match="argmask mode"):
        spmm.gespmm(rowptr, col, torch.zeros(4, 3), reduce="max", edge_id=torch.zeros(6, dtype=torch.int64),
                    gather_arg=torch.zeros(4, 3, dtype=torch.int64))


def test_gar_validation():
    rowptr, col = _csr()
    with pytest.raises(TypeError, match="gar_forward: x must have dtype"):
        gar.gar_forward(rowptr, col, torch.zeros(4, 3, dtype=torch.float16))
    with pytest.raises(ValueError, match="gar_forward: x must be a CUDA tensor"):
        gar.gar_forward(rowptr, col, torch.zeros(4, 3))
    with pytest.raises(ValueError, match="gar_backward: ask for at least one"):
        gar.gar_backward(rowptr, col, torch.zeros(4, 3), None, need_dx=False, need_dw=False)
    with pytest.raises(TypeError, match="gar_backward: edge_perm must be a torch.Tensor"):
        gar.gar_backward(rowptr, col, torch.zeros(4, 3), torch.zeros(4, 3), need_dw=True)
    with pytest.raises(ValueError, match=r"gar_backward: x must have shape \(num_src=4, K=3\)"):
        gar.gar_backward(rowptr, col, torch.zeros(4, 3), torch.zeros(5, 3), need_dw=True,
                         edge_perm=torch.arange(6))


def test_gas_validation():
    src = torch.tensor([0, 1, 2])
    with pytest.raises(ValueError, match=r"gas_forward: dst must have shape \(E=3,\)"):
        gas.gas_forward(src, torch.tensor([0, 1]), torch.zeros(3, 4), num_dst=3)
    with pytest.raises(ValueError, match="gas_forward: num_dst must be a non-negative int"):
        gas.gas_forward(src, src, torch.zeros(3, 4), num_dst=-1)
    with pytest.raises(ValueError, match="gas_forward: x must be a CUDA tensor"):
        gas.gas_forward(src, src, torch.zeros(3, 4), num_dst=3)
    with pytest.raises(ValueError, match=r"gas_forward: self loops need x with at least num_dst=5 rows"):
        gas.gas_forward(src, src, torch.zeros(3, 4), num_dst=5, self_loops=True)


def test_row_schedule_checks_its_arguments():
    rowptr = torch.tensor([0, 5, 6, 6, 13])
    for bad in (-1, 1.5, True, 1 << 63):
        with pytest.raises(ValueError, match=r"row_schedule: split_above must be an int in \[0, 2\*\*62\)"):
            spmm.row_schedule(rowptr, 2, split_above=bad)
    with pytest.raises(ValueError, match=r"row_schedule: segment must be an int in \[1, 2\*\*62\)"):
        spmm.row_schedule(rowptr, 0)
    with pytest.raises(TypeError, match="row_schedule: rowptr must have dtype torch.int64"):
        spmm.row_schedule(rowptr.int(), 2)
    with pytest.raises(ValueError, match="row_schedule: rowptr must have at least one element"):
        spmm.row_schedule(rowptr[:0], 2)
    with pytest.raises(ValueError, match="row_schedule: rowptr must be a CUDA tensor"):
        spmm.row_schedule(rowptr, 2)


@pytest.mark.parametrize("case", ["unsorted", "hub", "isolated", "bipartite"])
@pytest.mark.parametrize("heads", [None, 3])
def test_edge_softmax_matches_reference(case, heads):
    g = make_graph_case(case)
    shape = (g.num_edges,) if heads is None else (g.num_edges, heads)
    scores = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    out = autograd.edge_softmax(g, scores)
    ref = reference.edge_softmax(g, scores)
    torch.testing.assert_close(out, ref)
    grad = torch.randn_like(out)
    (a,) = torch.autograd.grad(out, scores, grad)
    (b,) = torch.autograd.grad(ref, scores, grad)
    torch.testing.assert_close(a, b)


def test_edge_softmax_backward_has_no_atomic_scatter():
    """Every index_select in the backward graph moves each element once (a permutation): its backward's
    index_add then has no colliding atomics on CUDA. A gather by target (repeated indices) would."""
    g = make_graph_case("hub")
    out = autograd.edge_softmax(g, torch.randn(g.num_edges, 2, requires_grad=True))
    pending, seen = [out.grad_fn], []
    while pending:
        node = pending.pop()
        if node is None:
            continue
        seen.append(type(node).__name__)
        if type(node).__name__.startswith("IndexSelectBackward"):
            index = node._saved_index
            assert index.unique().numel() == index.numel() == g.num_edges
        pending += [next_fn for next_fn, _ in node.next_functions]
    assert "SegmentSoftmaxBackward" in seen


def test_choose():
    g = make_graph_case("hub")  # 700 edges / 300 nodes
    x = torch.randn(300, 8)
    w = torch.rand(g.num_edges, requires_grad=True)
    assert autograd.choose(g, x, None, "sum") == "gespmm"
    assert autograd.choose(g, x.half(), None, "sum") == "gespmm"  # the one kernel that takes half precision
    assert autograd.choose(g, x.bfloat16(), w, "sum") == "gespmm"
    assert autograd.choose(g, x.long(), None, "sum") is None
    sparse = graphfuse.Graph(torch.tensor([[0, 1], [1, 2]]), num_nodes=3)
    assert autograd.choose(sparse, torch.randn(3, 4), None, "sum") == "gas"
    assert autograd.choose(sparse, torch.randn(3, 4), None, "max") == "gespmm"
    dense = graphfuse.Graph(torch.randint(0, 4, (2, 200)), num_nodes=4)
    assert autograd.choose(dense, torch.randn(4, 4), torch.rand(200, requires_grad=True), "sum") == "gar"
    assert autograd.choose(dense, torch.randn(4, 4), w[:200].detach(), "sum") == "gespmm"


def test_cuda_backend_refuses_cpu_tensors():
    g = make_graph_case("unsorted")
    for name in ("gespmm", "gar", "gas"):
        with pytest.raises(ValueError, match=f"backend '{name}' runs on"):
            graphfuse.aggregate(g, torch.randn(50, 4), backend=name)


def test_floyd_picks_validation():
    from graphfuse.kernels import sampling

    degree = torch.tensor([3, 0, 5])
    with pytest.raises(TypeError, match="floyd_picks: draws must have dtype torch.float64"):
        sampling.floyd_picks(degree, torch.rand(3, 2))
    with pytest.raises(ValueError, match=r"floyd_picks: draws must have shape \(R=3, k\)"):
        sampling.floyd_picks(degree, torch.rand(4, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="floyd_picks: degree must be a CUDA tensor"):
        sampling.floyd_picks(degree, torch.rand(3, 2, dtype=torch.float64))


def test_launch_packs_every_argument_into_an_8_byte_slot():
    import ctypes
    import struct

    from graphfuse.kernels import runtime

    address = runtime._pack([3, -2, 2**62, runtime.f64(0.5), runtime.i64(7)])
    slots = ctypes.cast(address, ctypes.POINTER(ctypes.c_void_p))
    base = ctypes.addressof(runtime._args.values)
    assert [slots[i] - base for i in range(5)] == [0, 8, 16, 24, 32]
    assert struct.unpack("qqqdq", bytes(runtime._args.values)[:40]) == (3, -2, 2**62, 0.5, 7)
    with pytest.raises(ValueError, match="at most 32 kernel arguments"):
        runtime._pack([0] * 33)


class _FakeDriver:
    """cuCtxGetCurrent / cuLaunchKernel stand-ins: the thread is always on context 7; launches are recorded."""

    def __init__(self):
        self.launches = []

    def ctxGetCurrent(self):
        return 7

    def launchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        self.launches.append((fn, (gx, gy, gz), (bx, by, bz), shared, stream, params))


@pytest.fixture
def fake_driver(monkeypatch):
    from graphfuse.kernels import runtime

    driver, compiled = _FakeDriver(), []

    def get_function(filename, name, index, family=()):
        compiled.append((filename, name, index, tuple(family)))
        return SimpleNamespace(ptr=1000 + len(compiled))

    monkeypatch.setattr(runtime, "_driver", lambda: driver)
    monkeypatch.setattr(runtime, "get_function", get_function)
    monkeypatch.setattr(runtime, "_current_stream_ptr", lambda index: 50 + index)
    monkeypatch.setitem(runtime._contexts, 3, 7)
    driver.compiled = compiled
    return driver


def test_bound_kernel_compiles_once_and_launches_with_its_shape(fake_driver):
    import ctypes

    from graphfuse.kernels import runtime

    kernel = runtime.Kernel("spmm.cu", "k<float>", torch.device("cuda", 3), (5, 2), (256,), 64, ("k<double>",))
    assert not fake_driver.compiled  # compiled at the first launch, not when bound
    kernel(11, 2**40, runtime.f64(0.25))
    kernel(12, 0, runtime.f64(1.5))
    assert fake_driver.compiled == [("spmm.cu", "k<float>", 3, ("k<double>",))]
    (fn, grid, block, shared, stream, params), second = fake_driver.launches
    assert (fn, grid, block, shared, stream) == (1001, (5, 2, 1), (256, 1, 1), 64, 53)
    slots = ctypes.cast(second[5], ctypes.POINTER(ctypes.c_void_p))
    assert [ctypes.c_int64.from_address(slots[0]).value, ctypes.c_double.from_address(slots[2]).value] == [12, 1.5]
    runtime.launch("gar.cu", "g<float>", torch.device("cuda", 3), (4,), (128, 2), (1, 2))
    assert fake_driver.launches[-1][:5] == (1002, (4, 1, 1), (128, 2, 1), 0, 53)


def test_empty_grids_launch_nothing_and_oversized_grids_are_refused(fake_driver):
    from graphfuse.kernels import runtime

    device = torch.device("cuda", 3)
    runtime.Kernel("spmm.cu", "k<float>", device, (0, 4), (256,))(1, 2)
    runtime.launch("spmm.cu", "k<float>", device, (3, 0), (256,), (1, 2))
    assert not fake_driver.launches and not fake_driver.compiled
    with pytest.raises(ValueError, match=r"k<float>: launch grid \(1, 65536\) exceeds the CUDA limits"):
        runtime.Kernel("spmm.cu", "k<float>", device, (1, 65536), (256,))
    with pytest.raises(ValueError, match=r"g: launch grid \(2147483648,\) exceeds the CUDA limits"):
        runtime.launch("gar.cu", "g", device, (2**31,), (256,), ())


def test_hp_sddmm_validation():
    from graphfuse.kernels import sddmm

    row, col, perm = torch.tensor([0, 0, 1]), torch.tensor([1, 2, 0], dtype=torch.int32), torch.arange(3)
    a, b = torch.zeros(2, 4), torch.zeros(3, 4)
    with pytest.raises(TypeError, match="hp_sddmm: b must have dtype torch.float32"):
        sddmm.hp_sddmm(row, col, perm, a, b.double())
    with pytest.raises(ValueError, match=r"hp_sddmm: b must have shape \(num_src, K=4\)"):
        sddmm.hp_sddmm(row, col, perm, a, torch.zeros(3, 5))
    with pytest.raises(ValueError, match="K=4 must be divisible by heads=3"):
        sddmm.hp_sddmm(row, col, perm, a, b, heads=3)
    with pytest.raises(TypeError, match="hp_sddmm: col must have dtype torch.int32"):
        sddmm.hp_sddmm(row, col.long(), perm, a, b)
    with pytest.raises(ValueError, match=r"hp_sddmm: scale must have shape \(E=3,\)"):
        sddmm.hp_sddmm(row, col, perm, a, b, scale=torch.ones(4))
    with pytest.raises(ValueError, match="hp_sddmm: a must be a CUDA tensor"):
        sddmm.hp_sddmm(row, col, perm, a, b)


@pytest.mark.parametrize("c, expected", [(1, (1, 1, 1)), (7, (1, 1, 8)), (64, (4, 1, 16)), (602, (2, 8, 32)),
                                         (1500, (4, 8, 32))])
def test_hp_sddmm_config(c, expected):
    from graphfuse.kernels import sddmm

    assert sddmm.config(c, torch.float32, []) == expected


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"x": torch.zeros(4, 3, dtype=torch.int32)}, TypeError, "hp_spmm: x must have dtype"),
        ({"row": torch.zeros(5, dtype=torch.int64)}, ValueError, r"hp_spmm: row must have shape \(nnz=6,\)"),
        ({"row": torch.zeros(6, dtype=torch.int32)}, TypeError, "hp_spmm: row must have dtype torch.int64"),
        ({"col": torch.zeros(6, dtype=torch.int64)}, TypeError, "hp_spmm: col must have dtype torch.int32"),
        ({"values": torch.ones(6, dtype=torch.float64)}, TypeError, "hp_spmm: values must have dtype torch.float32"),
        ({"reduce": "max"}, ValueError, r"hp_spmm: reduce must be one of \['sum', 'mean'\]"),
        ({}, ValueError, "hp_spmm: x must be a CUDA tensor; got a tensor on cpu"),
    ],
)
def test_hp_spmm_validation(kwargs, error, match):
    from graphfuse.kernels import hp_spmm

    rowptr, col = _csr()
    args = {"rowptr": rowptr, "row": torch.tensor([0, 0, 1, 2, 2, 3]), "col": col, "x": torch.zeros(4, 3),
            "values": None}
    args.update({k: v for k, v in kwargs.items() if k in args})
    with pytest.raises(error, match=match):
        hp_spmm.hp_spmm(args["rowptr"], args["row"], args["col"], args["x"], args["values"],
                        **{k: v for k, v in kwargs.items() if k not in args})


def test_dtp_counts_workers_per_block():
    from graphfuse.kernels import sddmm

    full = 132 * 8
    # 8 warps per block: the largest NnzPerWarp leaving more than two full waves
    assert sddmm.nnz_per_warp(64 * 8 * 2 * full + 1, full) == 64
    # 64 workers per block (HP-SpMM's 4-lane groups for K < 8): eight times fewer entries per worker
    assert sddmm.nnz_per_warp(64 * 8 * 2 * full + 1, full, workers=64) == 8
    # HP-SpMM's own bounds: more waves (a smaller NnzPerWarp for the same tasks), and a floor
    assert sddmm.nnz_per_warp(64 * 8 * 2 * full + 1, full, waves=8) == 8
    assert sddmm.nnz_per_warp(64 * 8 * 8 * full + 1, full, waves=8) == 64
    assert sddmm.nnz_per_warp(64 * 8 * 8 * full, full, waves=8) == 32
    assert sddmm.nnz_per_warp(10, full, least=32) == 32
    assert sddmm.nnz_per_warp(10**10, full, least=32) == 512


@pytest.mark.parametrize(
    "k, dtype, vec, expected",
    [
        (7, torch.float32, None, (1, 1, 8)),  # below a warp: several rows per warp, scalar loads
        (32, torch.float32, None, (4, 1, 8)),  # four rows per warp, a float4 per lane
        (64, torch.float32, None, (4, 1, 16)),  # two rows per warp
        (41, torch.float32, None, (1, 2, 32)),  # odd K: scalar loads, two chunks per lane
        (128, torch.float32, None, (4, 1, 32)),
        (256, torch.float32, None, (4, 1, 32)),  # two 128-column tiles rather than one of 256
        (602, torch.float32, None, (2, 2, 32)),  # five tiles
        (64, torch.float64, None, (2, 1, 32)),
        (64, torch.float32, 1, (1, 2, 32)),  # the scalar twin
    ],
)
def test_gespmm_config(k, dtype, vec, expected):
    vec_, cf, group = expected
    assert spmm.config(k, dtype, vec) == expected
    assert group * vec_ * cf <= spmm.TILE


@pytest.mark.parametrize("k, full", [(7, False), (32, True), (41, False), (256, True), (602, False)])
def test_gespmm_family_and_bound_check(k, full):
    """Every plan at one width compiles the same family (all reduces, weight modes, argument tracking, the
    argmask variant) in one NVRTC call, its own instance among them; max/min leave out the per-column bound
    check exactly when every column tile is full, sum/mean never do."""
    rowptr, col = _csr()
    plans = []
    for reduce in ("sum", "mean", "max", "min"):
        for wmode in range(3):
            for track in ((False, True) if reduce in ("max", "min") else (False,)):
                plans.append(spmm.GespmmPlan(rowptr, col, k=k, dtype=torch.float32, reduce=reduce, wmode=wmode,
                                             track=track))
    plans += [spmm.GespmmPlan(rowptr, col, k=k, dtype=torch.float32, wmode=w, argmask=True) for w in range(3)]
    family = plans[0].rows.family
    assert {p.rows.name for p in plans} == {n for n in family if n.startswith("gespmm_rows")}
    for p in plans:
        assert p.rows.family == family
        assert p.rows.name.endswith(", true>") == (full and p.reduce in ("max", "min")), p.rows.name


def test_plan_geometry_without_a_gpu():
    """Plans fix their grid, tiles and template instance at construction (no launch here: CPU tensors)."""
    from graphfuse.kernels import es_spmm, hp_spmm

    rowptr, col = _csr()
    row = torch.tensor([0, 0, 1, 2, 2, 3])
    plan = hp_spmm.HpSpmmPlan(rowptr, row, col, k=100, dtype=torch.float32, reduce="mean", weighted=True, npw=8)
    assert plan.kernel.name == "hp_spmm<float, true, true, 4, 1, 32>" and plan.kernel.shape[:3] == (1, 1, 1)
    assert plan.align == 16
    small = hp_spmm.HpSpmmPlan(rowptr, row, col, k=7, dtype=torch.float64, npw=8)
    assert small.kernel.name == "hp_spmm<double, false, false, 1, 1, 8>" and small.align == 8
    twin = plan._scalar_twin()
    assert twin.align == 4 and twin.npw == plan.npw and ", 1, " in twin.kernel.name
    es = es_spmm.EsSpmmPlan(rowptr, col, k=602, dtype=torch.float32, reduce="sum", weighted=False, width=64,
                            strategy="bucket", seed=0)
    assert es.kernel.shape[:3] == (1, 2, 1) and es.kernel.shape[6] == es_spmm.shared_bytes(64, torch.float32, False,
                                                                                             "bucket")
    x = torch.zeros(4, 602)
    assert es._for(x, torch.zeros(4, 602)) is es  # fresh tensors are aligned
    assert es._for(torch.zeros(4 * 602 + 1)[1:].view(4, 602), torch.zeros(4, 602)).align == 4  # scalar twin


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        ((torch.zeros(5, dtype=torch.int16), 4), {}, TypeError, "sort_by_key: keys must have dtype torch.int32 or"),
        ((torch.zeros(5, dtype=torch.int64), 4, [torch.zeros(5, dtype=torch.int64)] * 3), {}, ValueError,
         r"sort_by_key: 1 to 3 payloads \(carry plus iota\); got 4"),
        ((torch.zeros(5, dtype=torch.int64), 4), {"iota": False}, ValueError, "1 to 3 payloads"),
        ((torch.zeros(5, dtype=torch.int64), 4, [torch.zeros(5, dtype=torch.int32)]), {}, TypeError,
         r"sort_by_key: carry\[0\] must have dtype torch.int64; got torch.int32"),
        ((torch.zeros(5, dtype=torch.int64), 4, [torch.zeros(4, dtype=torch.int64)]), {}, ValueError,
         r"sort_by_key: carry\[0\] must have shape \(n=5,\)"),
        ((torch.zeros(5, dtype=torch.int64), 0), {}, ValueError, r"bound must be an int in \[1, 2\^31 - 1\]; got 0"),
        ((torch.zeros(5, dtype=torch.int64), 2**31), {}, ValueError, "bound must be an int"),
        ((torch.zeros(5, dtype=torch.int64), 4), {}, ValueError, "sort_by_key: keys must be a CUDA tensor"),
    ],
)
def test_radix_sort_validation(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        radix_sort.sort_by_key(*args, **kwargs)


def test_launch_binds_the_primary_context_only_when_another_is_current(monkeypatch):
    """runtime._launch hands cuLaunchKernel (function, grid, block, shared memory, stream, packed parameter
    block, no extras) on the device's current stream: straight away when the thread's current context is the
    device's primary one, through _primary_context (which binds and remembers it) otherwise."""
    import contextlib

    from graphfuse.kernels import runtime as rt

    current, entered, launched = [7], [], []
    driver = SimpleNamespace(ctxGetCurrent=lambda: current[0], launchKernel=lambda *args: launched.append(args))
    monkeypatch.setattr(rt, "_driver", lambda: driver)
    monkeypatch.setattr(rt, "_contexts", {0: 7})
    monkeypatch.setattr(rt, "_current_stream_ptr", lambda index: 1000 + index)

    @contextlib.contextmanager
    def bind(index):
        entered.append(index)
        yield

    monkeypatch.setattr(rt, "_primary_context", bind)
    rt._launch(55, 0, (3, 2, 1, 256, 1, 1, 0), (11, 12))
    assert launched == [(55, 3, 2, 1, 256, 1, 1, 0, 1000, rt._args.address, 0)] and entered == []
    assert list(rt._args.values)[:2] == [11, 12]
    current[0] = 9  # another context is current on this thread
    rt._launch(56, 0, (1, 1, 1, 32, 1, 1, 0), (13,))
    assert launched[-1] == (56, 1, 1, 1, 32, 1, 1, 0, 1000, rt._args.address, 0) and entered == [0]
    rt._launch(57, 1, (1, 1, 1, 32, 1, 1, 0), ())  # a device not seen yet
    assert launched[-1][0] == 57 and launched[-1][8] == 1001 and entered == [0, 1]


def test_hp_spmm_siblings_compile_in_one_nvrtc_call(monkeypatch):
    """The first need of an HP-SpMM instance is Dynamic Task Partition's occupancy query (full_wave): it
    compiles the plan's whole family, so the weighted/unweighted × sum/mean siblings and the output's zeroing
    kernel cost one compile."""
    from graphfuse.kernels import hp_spmm

    compiles = []

    class RawModule:
        def __init__(self, code, options, name_expressions):
            compiles.append(list(name_expressions))

        def get_function(self, name):
            return SimpleNamespace(kernel=SimpleNamespace(ptr=1))

    fake = SimpleNamespace(RawModule=RawModule, cuda=SimpleNamespace(
        Device=lambda index: contextlib.nullcontext(),
        driver=SimpleNamespace(occupancyMaxActiveBlocksPerMultiprocessor=lambda *args: 4)))
    monkeypatch.setattr(runtime, "_cupy", lambda: fake)
    monkeypatch.setattr(runtime, "_functions", {})
    monkeypatch.setattr(runtime, "device_index", lambda device: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: SimpleNamespace(multi_processor_count=132))
    runtime.full_wave.cache_clear()
    rowptr, col = _csr()
    row = torch.repeat_interleave(torch.arange(rowptr.numel() - 1), rowptr.diff())
    try:
        for weighted in (False, True):
            for reduce in ("sum", "mean"):
                hp_spmm.HpSpmmPlan(rowptr, row, col, k=64, dtype=torch.float32, reduce=reduce, weighted=weighted)
    finally:
        runtime.full_wave.cache_clear()
    assert len(compiles) == 1 and len(compiles[0]) == 5 and "hp_zero<float, 4>" in compiles[0], compiles


def _bad_structures():
    rowptr, col = _csr()  # 4 rows, 6 entries, columns < 4
    x = torch.zeros(4, 8)
    row = torch.repeat_interleave(torch.arange(4), rowptr.diff())
    shifted, falling, short = rowptr + 1, torch.tensor([0, 3, 2, 5, 6]), rowptr.clone()
    short[-1] = 5
    far = col.clone()
    far[2] = 4
    return [
        (lambda: spmm.gespmm(shifted, col, x), "gespmm: rowptr must start at 0; got 1"),
        (lambda: spmm.gespmm(falling, col, x), "gespmm: rowptr must not decrease"),
        (lambda: spmm.gespmm(short, col, x), r"gespmm: rowptr must end at the number of entries of col \(6\); got 5"),
        (lambda: spmm.gespmm(rowptr, far, x), r"gespmm: col must hold values in \[0, 4\); got values in \[0, 4\]"),
        (lambda: spmm.gespmm(rowptr, -far, x), r"gespmm: col must hold values in \[0, 4\); got values in \[-4, 0\]"),
        (lambda: gar.gar_forward(rowptr, far, x), r"gar_forward: col must hold values in \[0, 4\)"),
        (lambda: gar.gar_backward(rowptr, far, x, x, need_dw=True, edge_perm=torch.arange(6) + 1),
         r"gar_backward: row must hold values in \[0, 4\)"),
        (lambda: gar.gar_backward(rowptr, col, x, x, need_dw=True, edge_perm=torch.arange(6) + 1),
         r"gar_backward: edge_perm must hold values in \[0, 6\); got values in \[1, 6\]"),
        (lambda: gas.gas_forward(row, far.long(), x, num_dst=4), r"gas_forward: dst must hold values in \[0, 4\)"),
        (lambda: gas.gas_backward(row + 1, col.long(), x, None, num_src=4),
         r"gas_backward: src must hold values in \[0, 4\)"),
    ]


@pytest.mark.parametrize("index", range(10))
def test_launchers_refuse_index_values_the_kernels_would_read_out_of_bounds_with(index, monkeypatch):
    """Values, not only shapes: a column past x's rows or a broken row-offsets array is a ValueError naming
    the argument, not an out-of-bounds read (CPU tensors stand in for CUDA ones: devices are accepted)."""
    from graphfuse.kernels import es_spmm, hp_spmm, sddmm

    monkeypatch.setattr(runtime, "check_devices", lambda op, tensors: torch.device("cpu"))
    call, match = _bad_structures()[index]
    with pytest.raises(ValueError, match=match):
        call()
    rowptr, col = _csr()
    row = torch.repeat_interleave(torch.arange(4), rowptr.diff())
    with pytest.raises(ValueError, match=r"hp_spmm: row must hold values in \[0, 4\)"):
        hp_spmm.hp_spmm(rowptr, row + 1, col, torch.zeros(4, 8))
    with pytest.raises(ValueError, match=r"es_spmm: col must hold values in \[0, 3\)"):
        es_spmm.es_spmm(rowptr, col, torch.zeros(3, 8), width=4, strategy="bucket")
    with pytest.raises(ValueError, match=r"hp_sddmm: perm must hold values in \[0, 6\)"):
        sddmm.hp_sddmm(row, col, torch.arange(6) * 2, torch.zeros(4, 8), torch.zeros(4, 8))
    assert runtime.check_indices("op", ("rowptr", rowptr, "col", col), [("col", col, 4), ("none", None, 1)]) is None


def test_launchers_refuse_repeated_permutations_and_rows_that_contradict_rowptr(monkeypatch):
    """Values in range can still be wrong: a repeated value in an output permutation left a slot of the
    uninitialised output unwritten (garbage, no error); an HP-SpMM row array that disagrees with rowptr made two
    workers both write one output row (found by review)."""
    from graphfuse.kernels import hp_spmm, sddmm

    monkeypatch.setattr(runtime, "check_devices", lambda op, tensors: torch.device("cpu"))
    rowptr, col = _csr()
    row = torch.repeat_interleave(torch.arange(4), rowptr.diff())
    x = torch.zeros(4, 8)
    twice = torch.tensor([0, 0, 2, 3, 4, 5])
    with pytest.raises(ValueError, match=r"hp_sddmm: perm must be a permutation of \[0, 6\)"):
        sddmm.hp_sddmm(row, col, twice, x, x)
    with pytest.raises(ValueError, match=r"gar_backward: edge_perm must be a permutation of \[0, 6\)"):
        gar.gar_backward(rowptr, col, x, x, need_dw=True, edge_perm=twice)
    shifted = row.clone()
    shifted[1] = 1  # in range, sorted, but entry 1 belongs to row 0 under rowptr
    with pytest.raises(ValueError, match=r"hp_spmm: row must hold each entry's row under rowptr"):
        hp_spmm.hp_spmm(rowptr, shifted, col, x)
    ok = runtime.permutation_rule("p", torch.tensor([2, 0, 1]))
    assert runtime.check_indices("op", ("rowptr", rowptr, "col", col), [("col", col, 4)], [ok]) is None
    assert not bool(ok[1]) and bool(runtime.permutation_rule("p", torch.tensor([1, 1]))[1])
    assert bool(runtime.permutation_rule("p", torch.tensor([0, 2]))[1])  # out of range is not a permutation


def test_launchers_name_their_arguments_before_using_them():
    """Found by review: a list reduce/norm was a bare 'unhashable type' TypeError; gas_backward blamed x for a
    CPU grad; hp_sddmm read row.numel() before checking row (AttributeError)."""
    from graphfuse.kernels import es_spmm, graph_processing, hp_spmm, sddmm

    rowptr, col = _csr()
    x = torch.zeros(4, 3)
    calls = {
        "gespmm": lambda r: spmm.gespmm(rowptr, col, x, reduce=r),
        "gar_forward": lambda r: gar.gar_forward(rowptr, col, x, reduce=r),
        "es_spmm": lambda r: es_spmm.es_spmm(rowptr, col, x, reduce=r, width=16, strategy="bucket"),
        "hp_spmm": lambda r: hp_spmm.hp_spmm(rowptr, torch.zeros(6, dtype=torch.int64), col, x, reduce=r),
    }
    for op, call in calls.items():
        with pytest.raises(ValueError, match=rf"{op}: reduce must be one of \['sum', 'mean'.*; got \['sum'\]"):
            call(["sum"])
    with pytest.raises(ValueError, match=r"process_graph: norm must be one of .*; got \['gcn'\]"):
        graph_processing.process(torch.zeros(2, 3, dtype=torch.int64), 3, 3, norm=["gcn"])
    src = torch.tensor([0, 1, 2])
    with pytest.raises(ValueError, match="gas_backward: grad must be a CUDA tensor; got a tensor on cpu"):
        gas.gas_backward(src, src, torch.zeros(3, 4), None, num_src=3)
    with pytest.raises(TypeError, match="hp_sddmm: row must be a torch.Tensor"):
        sddmm.hp_sddmm([0, 0, 1], col[:3], torch.arange(3), torch.zeros(2, 4), torch.zeros(3, 4))


def test_gat_launchers_check_their_scalars(monkeypatch):
    """Found by review: a NaN, infinite, str or bool negative_slope reached the kernel (NaN coefficients for every
    negative score), and a str dropout failed in a comparison naming nothing; so did process_graph's fill_value."""
    from graphfuse.kernels import gat_attention, graph_processing

    monkeypatch.setattr(runtime, "check_devices", lambda op, tensors: torch.device("cpu"))
    rowptr, col = _csr()
    a = torch.zeros(4, 2)
    calls = {
        "gat_softmax": lambda **k: gat_attention.softmax_forward(rowptr, col, torch.arange(6), a, a, **k),
        "gat_alpha_entries": lambda **k: gat_attention.alpha_entries(
            torch.zeros(6, dtype=torch.int64), col, torch.arange(6), a, a, a, a, **k),
    }
    for op, call in calls.items():
        for bad in (float("nan"), float("inf")):
            with pytest.raises(ValueError, match=f"{op}: negative_slope must be a finite real number"):
                call(negative_slope=bad)
        for bad in ("0.2", True):
            with pytest.raises(TypeError, match=f"{op}: negative_slope must be a real number"):
                call(negative_slope=bad)
        with pytest.raises(TypeError, match=f"{op}: dropout must be a real number; got '0.5'"):
            call(dropout="0.5")
    with pytest.raises(ValueError, match="process_graph: fill_value must be a finite real number; got nan"):
        graph_processing.process(torch.zeros(2, 3, dtype=torch.int64), 3, 3, fill_value=float("nan"))


def test_kernel_backends_refuse_half_precision_by_op():
    """The kernel backends' edge softmax summed float16/bfloat16 scores in half precision (1.46 for a row of
    3,000 equal scores, review); sddmm's error said 'aggregate: backend 'sddmm''. Aggregation takes half precision
    on gespmm only; the other backends say so. Checked before any CUDA use."""
    g = make_graph_case("unsorted")
    half = torch.zeros(g.num_edges, dtype=torch.float16)
    with pytest.raises(TypeError, match="edge_softmax: the CUDA kernel backends support float32 and float64 scores"):
        autograd.edge_softmax(g, half)
    x = torch.zeros(50, 4, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="sddmm: the CUDA kernel backends support float32 and float64 operands"):
        autograd.sddmm(g, x, x)
    for aggregate in (autograd.gar_aggregate, autograd.gas_aggregate, autograd.hpspmm_aggregate):
        with pytest.raises(TypeError, match="aggregate: backend '(gar|gas|hpspmm)' supports float32 and float64 "
                                            "features; got torch.bfloat16 .use backend='gespmm'"):
            aggregate(g, x)
    for aggregate in (autograd.gespmm_aggregate, autograd.gar_aggregate):
        with pytest.raises(TypeError, match="aggregate: the CUDA kernel backends support float32 and float64 "
                                            "features, gespmm also float16 and bfloat16; got torch.int64"):
            aggregate(g, x.long())
    # the backend functions called directly: weights of another dtype were read by the kernel as x's (review)
    for features, weights in ((x, torch.ones(g.num_edges)), (x.float(), torch.ones(g.num_edges, dtype=torch.float64))):
        with pytest.raises(TypeError, match=f"aggregate: edge_weight must have x's dtype {features.dtype}"):
            autograd.gespmm_aggregate(g, features, weights)


def test_edge_softmax_is_stable_for_large_scores():
    g = graphfuse.Graph(torch.tensor([[0, 1, 2], [2, 2, 0]]), num_nodes=3)
    out = autograd.edge_softmax(g, torch.tensor([1000.0, 1000.0, -1000.0]))
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.tensor([0.5, 0.5, 1.0]))


def test_kernel_backends_do_not_claim_per_head_sampled_aggregation():
    g = graphfuse.Graph(torch.randint(0, 20, (2, 80), generator=torch.Generator().manual_seed(0)), num_nodes=20)
    supports = autograd._supports("gespmm")
    x = torch.randn(g.num_src, 4)
    assert supports("sampled_aggregate", graph=g, x=x, edge_weight=torch.rand(g.num_edges), reduce="sum")
    assert not supports("sampled_aggregate", graph=g, x=x, edge_weight=torch.rand(g.num_edges, 2), reduce="sum")


def test_gas_self_loops_need_num_dst_rows_of_x():
    src = dst = torch.tensor([0, 1])
    with pytest.raises(ValueError, match="self loops need x with at least num_dst=3 rows; got 2"):
        gas.gas_forward(src, dst, torch.randn(2, 4), num_dst=3, self_loops=True)


def test_graph_processing_refuses_bipartite_gcn():
    with pytest.raises(ValueError, match="need a square graph"):
        graph_processing.process(torch.tensor([[0, 1], [1, 0]]), 3, 2, norm="gcn")


def test_gar_refuses_an_empty_rowptr():
    with pytest.raises(ValueError, match="rowptr must have at least one element"):
        gar.gar_forward(torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.int32), torch.randn(2, 4))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mean_gradient_of_a_hub_in_half_precision_is_scaled_in_float32(dtype):
    """The mean's backward divides the output gradient by the in-degree before GE-SpMM on CSC: in float16 a degree
    of 65,520 or more was inf, and the hub's sources got a zero gradient (review). Rounded once, from float32."""
    n = 70_001
    g = graphfuse.Graph(torch.stack([torch.arange(1, n), torch.zeros(n - 1, dtype=torch.long)]), num_nodes=n)
    grad = torch.full((n, 4), 3.0, dtype=dtype)
    scaled = autograd._scaled_grad(g, grad, "mean")
    assert scaled.dtype == dtype
    assert torch.equal(scaled[0], torch.full((4,), 3.0 / 70_000).to(dtype))
    assert torch.equal(scaled[1:], grad[1:])  # no in-edges: divided by 1


def test_choose_thresholds_are_the_documented_average_in_degrees():
    """"auto" on CUDA: gar for learned weights from an average in-degree of 32 on (mutant AU1: only above it),
    gas for sum/mean below 2 (mutant AU2: at 2 too), gespmm otherwise."""
    gen = torch.Generator().manual_seed(0)
    n = 10

    def graph(avg):
        return graphfuse.Graph(torch.randint(0, n, (2, avg * n), generator=gen), num_nodes=n)

    x = torch.randn(n, 4)
    for avg, learned, expected in ((32, True, "gar"), (31, True, "gespmm"), (2, False, "gespmm"), (1, False, "gas")):
        g = graph(avg)
        w = torch.rand(g.num_edges, requires_grad=learned)
        assert autograd.choose(g, x, w, "sum") == expected, (avg, learned)


def test_launchers_refuse_minus_infinity(monkeypatch):
    """-inf is no finite real number either (mutant KR01 checked only the upper bound): a -inf negative_slope
    reached the kernel, a -inf fill_value the self-loops."""
    monkeypatch.setattr(runtime, "check_devices", lambda op, tensors: torch.device("cpu"))
    rowptr, col = _csr()
    a = torch.zeros(4, 2)
    with pytest.raises(ValueError, match="gat_softmax: negative_slope must be a finite real number; got -inf"):
        gat_attention.softmax_forward(rowptr, col, torch.arange(6), a, a, negative_slope=float("-inf"))
    with pytest.raises(ValueError, match="gat_alpha_entries: dropout must be a finite real number; got -inf"):
        gat_attention.alpha_entries(torch.zeros(6, dtype=torch.int64), col, torch.arange(6), a, a, a, a,
                                    dropout=float("-inf"))
    with pytest.raises(ValueError, match="process_graph: fill_value must be a finite real number; got -inf"):
        graph_processing.process(torch.zeros(2, 3, dtype=torch.int64), 3, 3, fill_value=float("-inf"))


def test_launch_grids_are_bounded_by_cudas_limits():
    """gridDim limits: x < 2**31, y and z <= 65535. The largest grid is accepted (mutant KR03 refused y = 65535),
    one more in any dimension refused (mutant KR02 left z unbounded). Nothing launches: a bound kernel checks
    its grid when built."""
    device = torch.device("cuda", 0)
    largest = runtime.Kernel("spmm.cu", "k<float>", device, (2**31 - 1, 65535, 65535), (256,))
    assert largest.shape[:3] == (2**31 - 1, 65535, 65535)
    for grid in ((2**31,), (1, 65536), (1, 1, 65536)):
        with pytest.raises(ValueError, match=r"k<float>: launch grid .* exceeds the CUDA limits"):
            runtime.Kernel("spmm.cu", "k<float>", device, grid, (256,))


def test_check_devices_refuses_tensors_on_two_cuda_devices():
    """Mutant KR04 dropped the same-device check: a kernel launched on one device read pointers of another.
    Stand-ins carry the devices (no CUDA here)."""
    on = {i: SimpleNamespace(device=torch.device("cuda", i)) for i in (0, 1)}
    assert runtime.check_devices("op", {"a": on[0], "b": None, "c": on[0]}) == torch.device("cuda", 0)
    with pytest.raises(ValueError, match="op: c is on cuda:1 but a is on cuda:0"):
        runtime.check_devices("op", {"a": on[0], "b": None, "c": on[1]})


def test_gas_self_loops_of_a_square_graph_pass_the_checks():
    """A square graph (num_src == num_dst) is the usual case for GAS self-loops, and self_weight alone asks for
    them: both must get past the argument checks to the device check (mutant KR07 refused num_src == num_dst
    in gas_backward, mutant KR08 sized self_weight as if there were no loops)."""
    src = dst = torch.tensor([0, 1, 2])
    x = torch.zeros(3, 4)
    with pytest.raises(ValueError, match="gas_backward: grad must be a CUDA tensor"):
        gas.gas_backward(src, dst, x, None, num_src=3, self_loops=True)
    with pytest.raises(ValueError, match="gas_forward: x must be a CUDA tensor"):
        gas.gas_forward(src, dst, x, num_dst=3, self_weight=torch.ones(3))
    with pytest.raises(ValueError, match=r"gas_forward: self_weight must have shape \(num_self=3,\)"):
        gas.gas_forward(src, dst, x, num_dst=3, self_weight=torch.ones(2))


def test_bound_aggregate_remembers_the_graphs_permuted_weights_until_they_change(monkeypatch):
    """A bound GE-SpMM call without gradient remembers the graph's own weights in CSR order, by weak reference
    (BoundAggregate._csr_weights): the plan must get the current weights' permutation after an in-place change, a
    replacement, and a replacement undone after a write through .data (the graph's cache rebuilds then; found by
    review); other weights and inference-tensor weights are permuted on every call and do not displace the
    remembered ones; replaced weights and their copy are not kept alive. CPU tensors, the plan's launch replaced by
    a recorder (no row of this graph is long enough for a row schedule)."""
    monkeypatch.setattr(autograd, "_schedule", lambda graph, fmt, k: None)
    given = []  # copies: the recorder must not keep the plan's operands alive
    monkeypatch.setattr(spmm.GespmmPlan, "__call__", lambda plan, x, values=None: given.append(values.clone()) or (
        torch.zeros(plan.num_rows, plan.k), None))
    permutes = []
    permuted = autograd._permuted
    monkeypatch.setattr(autograd, "_permuted", lambda g, w, fmt: permutes.append(None) or permuted(g, w, fmt))
    g = make_graph_case("unsorted")
    g.edge_weight = w = torch.rand(g.num_edges)
    x = torch.randn(g.num_src, 8)
    bound = autograd.BoundAggregate("gespmm", g, x, w, "sum")

    def call(weights, permutations):
        bound(g, x, weights, "sum")
        assert torch.equal(given[-1], weights[g.csr.perm]) and len(permutes) == permutations

    call(w, 1)
    call(w, 1)
    with torch.no_grad():
        w.mul_(2)  # in place: a new version
    call(w, 2)
    call(w, 2)
    g.edge_weight = w = torch.rand(g.num_edges)  # replaced
    call(w, 3)
    other = torch.rand(g.num_edges)
    call(other, 4)
    call(other, 5)
    call(w, 5)
    with torch.inference_mode():
        g.edge_weight = inference = torch.rand(g.num_edges)  # no version counter: never remembered
    call(inference, 6)
    call(inference, 7)
    g.edge_weight = w  # back: the graph's cache still holds its copy (inference weights bypass it)
    call(w, 7)
    w.data.mul_(3)  # no version change
    g.edge_weight = replaced = torch.rand(g.num_edges)
    permuted(g, replaced, "csr")  # another path's lookup (a training step): the graph's cache lets w's copy go
    g.edge_weight = w
    call(w, 8)
    alive = weakref.ref(w), bound.remembered[2]
    g.edge_weight = replaced
    permuted(g, replaced, "csr")
    del w
    assert alive[0]() is None and alive[1]() is None
