"""Every count, width, budget and seed argument takes a NumPy integer (read from an array of settings) exactly as
the same Python int, and keeps refusing bools (graphfuse.checks.is_int); stored values are Python ints."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import graphfuse
from cases import make_graph_case
from graphfuse.graph import coo_to_csc, coo_to_csr
from graphfuse.graph.reorder import cluster_labels
from graphfuse.kernels import es_spmm, gas, radix_sort, spmm
from graphfuse.nn import GCN
from graphfuse.samplers import (
    NeighborLoader,
    NeighborSampler,
    SaintLoader,
    SaintNodeSampler,
    SaintRandomWalkSampler,
    compute_saint_norm,
    count_saint_samples,
    random_walk,
    sample_neighbors,
)

NUMPY_INTS = [np.int64, np.int32, np.uint16]


def gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def assert_same(got, expected):
    """Equal tensors, dataclasses of tensors, or sequences of them, and of the same Python types."""
    if isinstance(expected, torch.Tensor):
        assert torch.equal(got, expected)
    elif isinstance(expected, (tuple, list)):
        assert len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            assert_same(a, b)
    elif hasattr(expected, "__dataclass_fields__"):
        for name in expected.__dataclass_fields__:
            assert_same(getattr(got, name), getattr(expected, name))
    else:
        assert type(got) is type(expected) and got == expected


@pytest.fixture
def graph():
    return make_graph_case("hub")


CALLS = {
    "Graph num_nodes": lambda g, i: graphfuse.Graph(g.edge_index, num_nodes=i(g.num_nodes)).csr,
    "Graph num_src/num_dst": lambda g, i: graphfuse.Graph(g.edge_index, num_src=i(g.num_src),
                                                          num_dst=i(g.num_dst + 2)).csc,
    "coo_to_csr": lambda g, i: coo_to_csr(g.edge_index, i(g.num_dst)),
    "coo_to_csc": lambda g, i: coo_to_csc(g.edge_index, i(g.num_src)),
    "cluster_labels": lambda g, i: cluster_labels(g, iterations=i(3)),
    "random_walk": lambda g, i: random_walk(g, torch.arange(4), i(3), gen()),
    "sample_neighbors": lambda g, i: sample_neighbors(g, torch.arange(4), i(2), generator=gen()),
    "SaintNodeSampler": lambda g, i: SaintNodeSampler(i(5))(g, gen()),
    "SaintRandomWalkSampler": lambda g, i: SaintRandomWalkSampler(i(3), i(2))(g, gen()),
    "NeighborSampler": lambda g, i: NeighborSampler([i(2), i(-1) if i is int else np.int64(-1)])(
        g, torch.arange(3), gen()),
    "count_saint_samples": lambda g, i: count_saint_samples(g, SaintNodeSampler(5), 2, gen(), chunk_size=i(2)),
    "NeighborLoader": lambda g, i: [b.n_id for b in NeighborLoader(g, [2], batch_size=i(3), shuffle=True,
                                                                    seed=i(7))],
    "SaintLoader": lambda g, i: [b.n_id for b in SaintLoader(g, SaintNodeSampler(5), num_steps=i(2), seed=i(7))],
    "GCN num_layers": lambda g, i: [p.shape for p in GCN(4, 8, 3, num_layers=i(3)).parameters()],
}


@pytest.mark.parametrize("numpy_int", NUMPY_INTS, ids=lambda t: t.__name__)
@pytest.mark.parametrize("call", sorted(CALLS))
def test_numpy_integers_give_what_the_int_gives(call, numpy_int, graph):
    """Each of these raised "must be an int" (or failed inside torch) for a NumPy integer before 'is_int'."""
    assert_same(CALLS[call](graph, numpy_int), CALLS[call](graph, int))


def test_stored_values_are_python_ints(graph, tmp_path):
    """A NumPy value kept on a frozen sampler would change its repr (and so the cache key of its statistics)."""
    assert repr(SaintRandomWalkSampler(np.int64(3), np.int32(2))) == repr(SaintRandomWalkSampler(3, 2))
    assert type(SaintNodeSampler(np.int64(5)).budget) is int
    assert NeighborSampler((np.int64(2),)).num_neighbors == (2,) and type(
        NeighborSampler((np.int64(2),)).num_neighbors[0]) is int
    g = graphfuse.Graph(graph.edge_index, num_nodes=np.int64(graph.num_nodes))
    assert type(g.num_src) is int and type(g.num_dst) is int
    loader = NeighborLoader(graph, [2], batch_size=np.int64(3))
    assert type(loader.batch_size) is int and len(loader) == -(-graph.num_nodes // 3)
    assert type(SaintLoader(graph, SaintNodeSampler(5), num_steps=np.int64(2)).num_steps) is int
    # the seed goes into the cache file's key: a NumPy seed reuses the int seed's file
    first = compute_saint_norm(graph, SaintNodeSampler(5), sample_coverage=2, seed=np.int64(4), cache_dir=tmp_path)
    files = sorted(tmp_path.iterdir())
    again = compute_saint_norm(graph, SaintNodeSampler(5), sample_coverage=2, seed=4, cache_dir=tmp_path)
    assert sorted(tmp_path.iterdir()) == files and len(files) >= 1
    assert torch.equal(first.node_norm, again.node_norm)


@pytest.mark.parametrize("call", [
    lambda g: graphfuse.Graph(g.edge_index, num_nodes=True),
    lambda g: SaintNodeSampler(True),
    lambda g: NeighborSampler([True]),
    lambda g: NeighborLoader(g, [2], batch_size=np.bool_(True)),
    lambda g: sample_neighbors(g, torch.arange(2), np.float64(2.0)),
    lambda g: cluster_labels(g, iterations=2.0),
])
def test_bools_and_floats_are_still_refused(call, graph):
    with pytest.raises(ValueError, match="must be"):
        call(graph)


def test_edge_sampling_takes_numpy_widths_and_seeds(graph):
    sampling = graphfuse.EdgeSampling(np.int64(2), "random", seed=np.uint16(3))
    assert sampling == graphfuse.EdgeSampling(2, "random", seed=3) and type(sampling.width) is int
    x = torch.randn(graph.num_src, 4)
    with torch.no_grad():
        assert torch.equal(graphfuse.aggregate(graph, x, sampling=sampling),
                           graphfuse.aggregate(graph, x, sampling=graphfuse.EdgeSampling(2, "random", seed=3)))


@pytest.mark.parametrize("call", [
    lambda: spmm.row_schedule(torch.tensor([0, 2]), np.int64(32)),
    lambda: gas.gas_forward(torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.long), torch.zeros(3, 4),
                            num_dst=np.int32(3)),
    lambda: radix_sort.sort_by_key(torch.zeros(3, dtype=torch.int32), np.int64(5)),
    lambda: es_spmm.es_spmm(torch.tensor([0, 1]), torch.zeros(1, dtype=torch.int32), torch.zeros(1, 4),
                            width=np.int64(4), strategy="random", seed=np.int64(1)),
])
def test_kernel_launchers_take_numpy_sizes(call):
    """Their checks refused NumPy integers ("must be an int"); now validation gets as far as the device."""
    with pytest.raises(ValueError, match="must be a CUDA tensor"):
        call()
