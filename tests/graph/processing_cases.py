"""Graphs that hunt for bugs in the graph-processing stage (shared by the CPU and GPU tests).

Every case mixes the hard parts: unsorted COO, duplicate edges, self-loops (duplicated, with different
weights), isolated nodes, and hubs whose rows / columns are longer than the sort kernels' warp and block
capacities (a warp sorts up to 512 entries, a block 4,096 at a time, longer rows need merge passes).
"""

from __future__ import annotations

import torch

from graphfuse import Graph


def _rand(gen: torch.Generator, n_src: int, n_dst: int, e: int) -> torch.Tensor:
    return torch.stack([torch.randint(0, n_src, (e,), generator=gen), torch.randint(0, n_dst, (e,), generator=gen)])


def processing_edges(name: str, seed: int = 0) -> tuple[torch.Tensor, int, int]:
    """(edge_index, num_src, num_dst) of a named case."""
    gen = torch.Generator().manual_seed(seed)
    if name == "empty":
        return torch.empty(2, 0, dtype=torch.long), 7, 7
    if name == "single_loop":
        return torch.tensor([[0], [0]]), 1, 1
    if name == "isolated":  # nodes 40..59 untouched, a few loops
        ei = _rand(gen, 40, 40, 200)
        return torch.cat([ei, torch.tensor([[3, 3, 9], [3, 3, 9]])], 1), 60, 60
    if name == "duplicates_loops":
        ei = _rand(gen, 30, 30, 150)
        loops = torch.randint(0, 30, (40,), generator=gen).expand(2, -1)
        ei = torch.cat([ei, ei[:, :50], loops], 1)
        return ei[:, torch.randperm(ei.size(1), generator=gen)], 30, 30
    if name == "warp_hub":  # in-hub of 400 and out-hub of 1,500 (warp bitonic and block paths)
        n = 2000
        ei = torch.cat([torch.stack([torch.arange(400), torch.full((400,), 5)]),
                        torch.stack([torch.full((1500,), 7), torch.randint(0, n, (1500,), generator=gen)]),
                        _rand(gen, n, n, 3000)], 1)
        return ei[:, torch.randperm(ei.size(1), generator=gen)], n, n
    if name == "giant_hub":  # rows longer than the block capacity: chunk sort + merge passes
        n = 30000
        hub_in = torch.stack([torch.randint(0, n, (20000,), generator=gen), torch.zeros(20000, dtype=torch.long)])
        hub_out = torch.stack([torch.full((9000,), 11), torch.randint(0, n, (9000,), generator=gen)])
        ei = torch.cat([hub_in, hub_out, _rand(gen, n, n, 40000), torch.tensor([[0, 11], [0, 11]])], 1)
        return ei[:, torch.randperm(ei.size(1), generator=gen)], n, n
    if name == "many_loops":  # ~30% self-loops spread over many tiles (order-preserving compaction)
        n = 5000
        ei = _rand(gen, n, n, 20000)
        pick = torch.rand(ei.size(1), generator=gen) < 0.3
        ei[1, pick] = ei[0, pick]
        return ei, n, n
    if name == "large":  # long enough for the multi-launch scan path
        n = 200000
        return _rand(gen, n, n, 600000), n, n
    if name == "bipartite":
        return _rand(gen, 70, 25, 400), 70, 25
    raise KeyError(name)


SQUARE_CASES = ["empty", "single_loop", "isolated", "duplicates_loops", "warp_hub", "giant_hub", "many_loops"]
ALL_CASES = SQUARE_CASES + ["bipartite"]


def processing_graph(name: str, weighted: bool, dtype: torch.dtype = torch.float32, seed: int = 0,
                     device: str | torch.device = "cpu") -> Graph:
    """The named case as a Graph, with random positive weights when ``weighted``."""
    ei, n_src, n_dst = processing_edges(name, seed)
    weight = None
    if weighted:
        gen = torch.Generator().manual_seed(seed + 1)
        # duplicated self-loops of a node keep their own weights: the reference and the GPU stage both keep the
        # last one in COO order, which every case checks
        weight = (torch.rand(ei.size(1), generator=gen, dtype=torch.float64) + 0.5).to(dtype)
    g = Graph(ei, edge_weight=weight, num_src=n_src, num_dst=n_dst)
    return g.to(device)
