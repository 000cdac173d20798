"""CPU check that every kernel launch passes as many arguments as its kernel takes (a launcher passing one
more or one less is otherwise caught only on the GPU, by memcheck or a wrong answer). The launchers run on CPU
tensors with the launch itself recorded instead of made; each recorded call is compared with the parameter
list of its ``__global__`` function in the .cu source."""

from __future__ import annotations

import re
import weakref

import pytest
import torch

import graphfuse
from cases import make_graph_case, schedule_counts, torch_row_schedule
from graphfuse.engine import attention, autograd
from graphfuse.kernels import runtime as rt

_GLOBAL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(")
_DEFINE = re.compile(r"^#define\s+(\w+)[ \t]+(.*)$", re.M)


def kernel_params(filename: str) -> dict[str, int]:
    """Kernel name → number of parameters, for every ``__global__`` function of ``filename`` (comments
    dropped, object-like macros in parameter lists expanded)."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", "", rt.source(filename), flags=re.S).replace("\\\n", " ")
    macros = dict(_DEFINE.findall(text))
    counts = {}
    for m in _GLOBAL.finditer(text):
        depth, i = 0, m.end()
        while depth >= 0:
            depth += (text[i] == "(") - (text[i] == ")")
            i += 1
        params = text[m.end():i - 1]
        for _ in range(3):
            params = re.sub(r"\b(\w+)\b", lambda w: macros.get(w.group(1), w.group(1)), params)
        depth, commas = 0, 0
        for c in params:
            depth += (c in "(<[") - (c in ")>]")
            commas += c == "," and depth == 0
        counts[m.group(1)] = commas + 1 if params.strip() else 0
    return counts


def test_the_parser_reads_every_kernel():
    counts = {f.name: kernel_params(f.name) for f in rt.kernel_files()}
    assert all(counts.values()), counts
    assert counts["spmm.cu"]["gespmm_combine"] == 8


@pytest.fixture
def recorded(monkeypatch):
    """Launchers on CPU tensors: devices accepted, the occupancy and stream faked, launches recorded."""
    calls = []

    def launch(filename, name, device, grid, block, args, shared_mem=0, family=()):
        calls.append((filename, name.split("<")[0], len(args)))

    monkeypatch.setattr(rt, "launch", launch)  # one-off launches
    monkeypatch.setattr(rt.Kernel, "__call__", lambda kernel, *args: launch(kernel.filename, kernel.name, None, None,
                                                                             None, args))  # the plans' bound kernels
    monkeypatch.setattr(rt, "check_devices", lambda op, tensors: torch.device("cpu"))
    monkeypatch.setattr(rt, "current_stream", lambda device: 0)
    monkeypatch.setattr(rt, "full_wave", lambda *args: 1056)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    # GE-SpMM's row schedule reads back what its first kernel wrote: the recorded launches get the values
    # the kernels would have written, so that the split-row launches that follow are recorded too
    from graphfuse.kernels import spmm

    real_counts, real_fill = spmm._schedule_counts, spmm._schedule_fill

    def counts(rowptr, segment, threshold):
        return real_counts(rowptr, segment, threshold).copy_(schedule_counts(rowptr, segment, threshold))

    def fill(rowptr, incl, segment, parts):
        real_fill(rowptr, incl, segment, parts)
        for part, value in zip(parts, torch_row_schedule(rowptr, segment)):
            part.copy_(value)

    monkeypatch.setattr(spmm, "_schedule_counts", counts)
    monkeypatch.setattr(spmm, "_schedule_fill", fill)
    return calls


def hub_graph(weighted: bool = True) -> graphfuse.Graph:
    """The suites' hub case (a row of 300 entries: split rows), with edge weights when ``weighted``."""
    g = make_graph_case("hub")
    if not weighted:
        return g
    w = torch.rand(g.num_edges, generator=torch.Generator().manual_seed(0)) + 0.5
    return graphfuse.Graph(g.edge_index, num_nodes=g.num_nodes, edge_weight=w)


def check(calls):
    assert calls, "nothing was launched"
    params = {}
    for filename, kernel, nargs in calls:
        if filename not in params:
            params[filename] = kernel_params(filename)
        assert kernel in params[filename], f"{filename} has no kernel {kernel}"
        assert nargs == params[filename][kernel], (f"{kernel} ({filename}) takes {params[filename][kernel]} "
                                                   f"parameters; the launcher passed {nargs} arguments")


@pytest.mark.parametrize("backend", ["gespmm", "gar", "gas", "hpspmm"])
@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
@pytest.mark.parametrize("in_kernel_fold", [True, False])
def test_aggregation_launches_match_their_kernels(recorded, backend, reduce, in_kernel_fold, monkeypatch):
    from graphfuse.kernels import spmm

    monkeypatch.setattr(spmm, "FOLD_MAX_PARTIALS", 1 << 40 if in_kernel_fold else 0)
    g = hub_graph()
    x = torch.randn(g.num_src, 64, requires_grad=True)
    w = g.edge_weight.clone().requires_grad_(True)
    out = getattr(autograd, f"{backend}_aggregate")(g, x, w, reduce)
    out.backward(torch.ones_like(out))
    check(recorded)


def test_sampled_aggregation_launches_match(recorded):
    g = hub_graph()
    x = torch.randn(g.num_src, 64)
    for strategy in ("bucket", "fastrand", "random"):
        autograd.sampled_aggregate(g, x, g.edge_weight, "sum", graphfuse.EdgeSampling(16, strategy))
    check(recorded)


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_gat_attention_launches_match(recorded, dropout, monkeypatch):
    monkeypatch.setattr(attention, "_use_fused", lambda *args: True)
    g = hub_graph(weighted=False)
    h = torch.randn(g.num_src, 2, 8, requires_grad=True)
    att_src, att_dst = (torch.randn(2, 8, requires_grad=True) for _ in range(2))
    a_src, a_dst = attention.gat_scores(h, att_src, att_dst, backend="fused")
    alpha = attention.gat_attention(g, a_src, a_dst, dropout=dropout, training=True, backend="fused")
    out = attention.gat_aggregate(g, h, a_src, a_dst, dropout=dropout, training=True, backend="fused")
    (alpha.sum() + out.sum()).backward()
    check(recorded)


class _ZeroedTorch:
    """``torch`` with ``empty``/``empty_like`` zero-filled: a launcher that reads back what a (recorded, not
    made) launch should have written gets zeros instead of garbage."""

    empty, empty_like = staticmethod(torch.zeros), staticmethod(torch.zeros_like)

    def __getattr__(self, name):
        return getattr(torch, name)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("radix", [False, True])
@pytest.mark.parametrize("norm", ["none", "gcn", "mean"])
def test_graph_processing_launches_match(recorded, radix, norm, weighted, monkeypatch):
    from graphfuse.kernels import graph_processing, radix_sort, sampling

    for module in (graph_processing, radix_sort):
        monkeypatch.setattr(module, "torch", _ZeroedTorch())
    if radix:
        monkeypatch.setattr(graph_processing, "RADIX_MIN_ENTRIES", 1)
        monkeypatch.setattr(graph_processing, "SINGLE_BLOCK_SCAN", 64)
    g = hub_graph(weighted)
    graph_processing.process(g.edge_index, g.num_src, g.num_dst, g.edge_weight, self_loops=norm != "none",
                             norm=norm)
    sampling.floyd_picks(torch.full((5,), 9), torch.rand(5, 3, dtype=torch.float64))
    check(recorded)


def test_every_kernel_is_checked(recorded, monkeypatch):
    """The tests above launch every kernel of the package at least once (a new kernel needs a case here)."""
    for fold in (True, False):
        test_aggregation_launches_match_their_kernels(recorded, "gespmm", "max", fold, monkeypatch)
    for backend in ("gar", "gas", "hpspmm"):
        test_aggregation_launches_match_their_kernels(recorded, backend, "sum", False, monkeypatch)
    test_sampled_aggregation_launches_match(recorded)
    test_gat_attention_launches_match(recorded, 0.5, monkeypatch)
    for radix in (False, True):
        test_graph_processing_launches_match(recorded, radix, "gcn", False, monkeypatch)
    launched = {(f, k) for f, k, _ in recorded}
    every = {(f.name, k) for f in rt.kernel_files() for k in kernel_params(f.name)}
    assert every - launched == set()


@pytest.mark.parametrize("backend", ["gespmm", "gar", "gas", "hpspmm"])
def test_aggregation_keeps_its_features_only_for_the_weight_gradient(recorded, backend):
    """The feature gradient aggregates the output gradient alone, so the features are saved for backward only when
    the edge weights need a gradient: a GCN layer's (N, hidden) linear output is freed after the forward (as in
    PyG, whose w * x_j keeps x_j for w's gradient only). SDDMM keeps each operand only for the other's gradient."""
    g = hub_graph()
    aggregate = getattr(autograd, f"{backend}_aggregate")
    for weights_need_grad in (False, True):
        x = torch.randn(g.num_src, 16, requires_grad=True) * 2  # not a leaf: only its users keep it
        alive = weakref.ref(x)
        w = g.edge_weight.clone().requires_grad_(weights_need_grad)
        out = aggregate(g, x, w, "sum")
        del x
        assert (alive() is not None) == weights_need_grad
        out.backward(torch.ones_like(out))
    a, b = (torch.randn(g.num_dst, 8, requires_grad=True) * 2, torch.randn(g.num_src, 8) * 2)
    kept = weakref.ref(a), weakref.ref(b)
    out = autograd.sddmm(g, a, b)
    del a, b
    assert kept[0]() is None and kept[1]() is not None  # b for a's gradient; a for nobody's
    out.sum().backward()


def test_wide_features_of_a_mid_sized_graph_get_longer_segments(recorded):
    """The plan's row schedule follows the features' width: from MID_GRAPH_EDGES entries on, K >= WIDE_K splits
    rows into MID_SEGMENT-entry segments and narrower features into SMALL_SEGMENT ones (two schedules of one
    graph, each cached); a smaller graph keeps SMALL_SEGMENT at any K."""
    gen = torch.Generator().manual_seed(3)
    for num_edges, wide in ((autograd.MID_GRAPH_EDGES, autograd.MID_SEGMENT),
                            (autograd.MID_GRAPH_EDGES - 1, autograd.SMALL_SEGMENT)):
        n = 4_000  # node 0 receives 1,000 of the edges: a split row
        dst = torch.cat([torch.zeros(1_000, dtype=torch.long), torch.randint(1, n, (num_edges - 1_000,), generator=gen)])
        g = graphfuse.Graph(torch.stack([torch.randint(0, n, (num_edges,), generator=gen), dst]), num_nodes=n)
        segments = {}
        for k in (autograd.WIDE_K // 2, autograd.WIDE_K, 602):
            autograd.gespmm_aggregate(g, torch.randn(n, k), None, "sum")
            plan = next(p for key, p in autograd._plans(g).items() if key[0] == "gespmm" and key[2] == k)
            segments[k] = plan.schedule.segment
            assert plan.schedule.num_partials > 0
        assert segments == {autograd.WIDE_K // 2: autograd.SMALL_SEGMENT, autograd.WIDE_K: wide, 602: wide}
