"""Inference passes (torch.inference_mode) before training, as Lightning's validation does: what they cache on
a Graph must still serve training, and weights created under inference mode (no version counter) must work."""

from __future__ import annotations

import torch

import graphfuse
from graphfuse.engine import autograd, graph_stage
from graphfuse.graph import process_gcn


def _graph(weighted: bool = False) -> graphfuse.Graph:
    gen = torch.Generator().manual_seed(0)
    weight = torch.rand(80, generator=gen) if weighted else None
    return graphfuse.Graph(torch.randint(0, 20, (2, 80), generator=gen), num_nodes=20, edge_weight=weight)


def test_formats_and_processed_graphs_built_in_inference_mode_serve_training():
    g = _graph()
    with torch.inference_mode():  # the first use of the graph builds CSR/CSC and the GCN-normalised graph
        autograd.edge_softmax(g, torch.randn(80))
        graphfuse.aggregate(process_gcn(g), torch.randn(20, 4), backend="reference")
    scores = torch.randn(80, requires_grad=True)
    autograd.edge_softmax(g, scores).sum().backward()  # raised: inference tensors cannot be saved for backward
    x = torch.randn(20, 4, requires_grad=True)
    processed = process_gcn(g)
    assert not processed.edge_weight.is_inference()
    graphfuse.aggregate(processed, x, backend="reference").sum().backward()
    assert scores.grad is not None and x.grad is not None


def test_weights_created_in_inference_mode_are_permuted_per_call():
    with torch.inference_mode():
        g = _graph(weighted=True)
        first = autograd._permuted(g, g.edge_weight, "csr")  # raised: no version counter to key the cache on
        graph_stage._seed_permuted(g, "csc", g.edge_weight)  # skipped, not cached
    assert torch.equal(first, g.edge_weight.index_select(0, g.csr.perm))
    assert g.cached(("kernels", "permuted", "csc"), lambda: None) is None


def test_a_graph_moved_in_inference_mode_serves_training():
    g = _graph(weighted=True)
    with torch.inference_mode():
        moved = g.to("meta")  # another device: a real move
    assert not moved.edge_index.is_inference() and not moved.edge_weight.is_inference()


def test_inference_weights_changed_in_place_are_permuted_again():
    """autograd._permuted must not cache an inference tensor's permutation (no version counter to notice a change)."""
    with torch.inference_mode():
        g = _graph(weighted=True)
        autograd._permuted(g, g.edge_weight, "csr")
        g.edge_weight.mul_(2.0)  # in place, unseen by any version counter
        second = autograd._permuted(g, g.edge_weight, "csr")
    assert torch.equal(second, g.edge_weight.index_select(0, g.csr.perm))
