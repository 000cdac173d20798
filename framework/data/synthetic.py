"""Synthetic node classification: an RMAT graph with planted, homophilous classes and Gaussian features.

Generation (every step vectorised over nodes and edges; all randomness from one ``torch.Generator`` on
``device`` seeded by ``seed``, so a (seed, device type) pair always gives the same dataset; CPU and CUDA
streams differ):

1. Labels: ``arange(N) % C`` randomly permuted, so classes are balanced (sizes differ by at most one).
2. Structure: RMAT with quadrant probabilities ``rmat = (a, b, c, d)`` over ``2^s`` vertices,
   ``s = ceil(log2 N)``. RMAT vertices are mapped to nodes by a random permutation of ``[0, 2^s)`` folded
   modulo N: node ids carry no trace of RMAT's ordering, every node exists, and each node merges at most
   two RMAT vertices (``2^s < 2N``), so the degree skew is kept.
3. Homophily: ``homophily`` is the edge homophily ratio of the result (fraction of edges whose endpoints
   share a class), met up to rounding: the graph gets ``round(homophily * M)`` same-class and
   ``M - round(homophily * M)`` cross-class undirected edges, ``M = round(N * avg_degree / 2)``. Each round
   rewires its RMAT sample toward the ratio still missing, ``h``: with ``p`` the sample's ratio, when
   ``h >= p`` a fraction ``(h - p) / (1 - p)`` of the cross-class edges gets its target replaced by a
   same-class node, otherwise a fraction ``(p - h) / p`` of the same-class edges gets a target from another
   class. Replacement targets are drawn in proportion to their RMAT degree (plus one), keeping the skew.
4. Edges are canonicalised, deduplicated and freed of self-loops; rounds repeat until both kinds are filled,
   then a random subset of each kind is kept and every edge is stored in both directions (E = 2M, mean
   degree ``avg_degree``). Only a graph too dense for its classes (one kind running out of distinct pairs)
   misses the ratio: the other kind then fills the gap (once the short kind stops finding new pairs, or
   after ``MAX_ROUNDS`` rounds). A graph near complete, where both kinds run short, ends with fewer edges.
5. Features: class centroids ``mu_c ~ N(0, I_F)`` plus noise ``N(0, sigma^2 I_F)`` with
   ``sigma = feature_noise * sqrt(F / 2)``: two centroids lie about ``sqrt(2F)`` apart, so the pairwise
   margin over the noise is ``1 / feature_noise`` whatever F is.
6. Split: a random permutation of the nodes, 60% train, 20% validation, the rest test.

Shapes:
    x: (N, F) float32; y: (N,) int64 in [0, C); edge_index: (2, E) int64 sorted by (source, target).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import Tensor

from graphfuse.checks import is_int
from graphfuse.data.dataset import NodeDataset
from graphfuse.data.registry import register_dataset
from graphfuse.data.seeds import in_torch_seed_range

MAX_ROUNDS = 32
STALL_ROUNDS = 3
TRAIN_FRACTION = 0.6
VAL_FRACTION = 0.2


def rmat_edges(num_edges: int, scale: int, probs: tuple[float, float, float, float],
               generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Sample ``num_edges`` RMAT edges over ``2**scale`` vertices (one pass per bit, vectorised over edges).

    Shapes:
        returns src, dst: (num_edges,) int64 in [0, 2**scale).
    """
    device = generator.device
    a, b, c, _ = probs
    src = torch.zeros(num_edges, dtype=torch.long, device=device)
    dst = torch.zeros(num_edges, dtype=torch.long, device=device)
    for _ in range(scale):
        r = torch.rand(num_edges, generator=generator, device=device)
        right = r >= a + b
        src.mul_(2).add_(right)
        dst.mul_(2).add_((r >= a) ^ right ^ (r >= a + b + c))
    return src, dst


def rmat_graph(scale: int, num_edges: int, seed: int = 0, device: str | torch.device = "cpu",
               probs: tuple[float, float, float, float] = (0.57, 0.19, 0.19, 0.05)) -> Tensor:
    """The benchmark graph family: ``num_edges`` RMAT edges drawn over ``2**scale`` nodes, node ids randomly
    permuted, then symmetrised and deduplicated (self-loops kept), generated on ``device`` from ``seed``.

    Shapes:
        returns edge_index: (2, E) int64, sorted by (source, target); E ≤ 2 · num_edges.
    """
    generator = torch.Generator(device=device).manual_seed(seed)
    n = 1 << scale
    src, dst = rmat_edges(num_edges, scale, probs, generator)
    perm = torch.randperm(n, generator=generator, device=generator.device)
    src, dst = perm[src], perm[dst]
    key = torch.unique(torch.cat([src * n + dst, dst * n + src]))
    del src, dst
    return torch.stack([key // n, key % n])


def _rewire(src: Tensor, dst: Tensor, y: Tensor, num_classes: int, homophily: float,
            generator: torch.Generator) -> Tensor:
    """New targets giving an expected edge homophily of ``homophily`` (see the module docstring, step 3)."""
    if num_classes == 1 or src.numel() == 0:
        return dst
    device = src.device
    same = y[src] == y[dst]
    p = same.double().mean().item()
    if homophily >= p:
        rate = (homophily - p) / (1 - p) if p < 1 else 0.0
        chosen = ~same & (torch.rand(src.numel(), generator=generator, device=device) < rate)
        new_class = y[src]
    else:
        rate = (p - homophily) / p
        chosen = same & (torch.rand(src.numel(), generator=generator, device=device) < rate)
        shift = torch.randint(1, num_classes, (src.numel(),), generator=generator, device=device)
        new_class = (y[src] + shift) % num_classes
    pool = torch.cat([src, dst, torch.arange(y.numel(), device=device)])
    pool_class = y[pool]
    pool = pool[torch.sort(pool_class, stable=True).indices]
    counts = torch.bincount(pool_class, minlength=num_classes)
    starts = torch.cumsum(counts, 0) - counts
    u = torch.rand(src.numel(), generator=generator, device=device)
    offset = torch.minimum((u * counts[new_class]).long(), counts[new_class] - 1)
    return torch.where(chosen, pool[starts[new_class] + offset], dst)


def _edges(n: int, avg_degree: float, num_classes: int, homophily: float, y: Tensor, scale: int,
           rmat: tuple[float, float, float, float], fold: Tensor, g: torch.Generator) -> Tensor:
    """Steps 2-4 of the module docstring: rounds of RMAT + rewiring until both edge kinds are filled.

    Shapes:
        y: (N,); fold: (2**scale,) RMAT vertex -> node; returns edge_index (2, E) sorted by (source, target).
    """
    device = y.device
    target = min(round(n * avg_degree / 2), n * (n - 1) // 2)
    want = {True: round(homophily * target) if num_classes > 1 else target}
    want[False] = target - want[True]
    keys = torch.empty(0, dtype=torch.long, device=device)
    oversample = 1.1
    stalls = {True: 0, False: 0}
    for step in range(2 * MAX_ROUNDS):
        same = y[keys // n] == y[keys % n]
        have = {True: int(same.sum()), False: keys.numel() - int(same.sum())}
        need = {k: max(want[k] - have[k], 0) for k in want}
        if need[True] + need[False] and step == MAX_ROUNDS:
            # still short: a kind nearly out of distinct pairs finds a few new ones each round and never
            # stalls, so the other kind gets its gap now (when both are short, the graph stays short)
            short = [k for k in want if need[k]]
            if len(short) == 2:
                break
            want[not short[0]] += need[short[0]]
            want[short[0]] = have[short[0]]
            need = {k: max(want[k] - have[k], 0) for k in want}
        if need[True] + need[False] == 0:
            break
        draws = math.ceil((need[True] + need[False]) * oversample)
        src, dst = rmat_edges(draws, scale, rmat, g)
        src, dst = fold[src], fold[dst]
        dst = _rewire(src, dst, y, num_classes, need[True] / (need[True] + need[False]), g)
        keep = src != dst
        lo, hi = torch.minimum(src, dst)[keep], torch.maximum(src, dst)[keep]
        keys = torch.unique(torch.cat([keys, lo * n + hi]))
        same = y[keys // n] == y[keys % n]
        now = {True: int(same.sum()), False: keys.numel() - int(same.sum())}
        useful = sum(min(now[k] - have[k], need[k]) for k in want)
        oversample = min(1.05 * draws / useful, 100.0) if useful else min(4 * oversample, 100.0)
        for k in (True, False):
            stalls[k] = stalls[k] + 1 if need[k] and now[k] == have[k] else 0
            if stalls[k] == STALL_ROUNDS:  # kind k has (almost surely) run out of distinct pairs
                want[not k] += want[k] - now[k]
                want[k] = now[k]
    same = y[keys // n] == y[keys % n]
    available = {True: int(same.sum()), False: keys.numel() - int(same.sum())}
    take = {True: min(want[True], available[True])}
    take[False] = min(target - take[True], available[False])
    chosen = []
    for k in (True, False):
        pool = keys[same == k]
        chosen.append(pool[torch.randperm(pool.numel(), generator=g, device=device)[:take[k]]])
    keys = torch.cat(chosen)
    lo, hi = keys // n, keys % n
    directed = torch.sort(torch.cat([lo * n + hi, hi * n + lo])).values
    return torch.stack([directed // n, directed % n])


def _check(num_nodes: int, avg_degree: float, num_features: int, num_classes: int, homophily: float,
           seed: int, rmat: object, feature_noise: float) -> None:
    def is_real(value: object) -> bool:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)

    def is_probs(value: object) -> bool:  # any sequence of four numbers: a tuple, a list, an array, a ListConfig
        if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
            return False
        return len(value := tuple(value)) == 4 and all(map(is_real, value))

    def fail(arg: str, expected: str, got: object) -> None:
        raise ValueError(f"synthetic: {arg} must be {expected}; got {got!r}")

    if not (is_int(num_nodes) and num_nodes >= 1):  # first: the ranges below use it
        fail("num_nodes", "an int >= 1", num_nodes)
    checks = [  # (argument, value, type test, value test, what it must be); NaN and inf fail the value tests
        ("num_features", num_features, is_int, lambda v: v >= 1, "an int >= 1"),
        ("num_classes", num_classes, is_int, lambda v: 1 <= v <= num_nodes, f"an int in [1, num_nodes={num_nodes}]"),
        ("avg_degree", avg_degree, is_real, lambda v: 0 <= v <= num_nodes - 1,
         f"a number in [0, num_nodes - 1 = {num_nodes - 1}]"),
        ("homophily", homophily, is_real, lambda v: 0 <= v <= 1, "a number in [0, 1]"),
        ("seed", seed, is_int, in_torch_seed_range, "an int in [-2**63, 2**64)"),
        ("rmat", rmat, is_probs, lambda v: min(v) >= 0 and abs(sum(v) - 1) <= 1e-6,
         "four non-negative probabilities (a, b, c, d) summing to 1"),
        ("feature_noise", feature_noise, is_real, lambda v: 0 <= v < math.inf, "a finite number >= 0"),
    ]
    for arg, value, of_type, in_range, expected in checks:
        if not (of_type(value) and in_range(value)):
            fail(arg, expected, value)


def _device(device: object) -> torch.device:
    """``device`` as a torch.device this machine has; a ValueError naming the option otherwise."""
    try:
        parsed = torch.device(device)
    except (TypeError, RuntimeError):
        raise ValueError(f"synthetic: device must be a torch device such as 'cpu' or 'cuda:0'; got "
                         f"{device!r}") from None
    if parsed.type == "cuda" and not (torch.cuda.is_available()
                                      and (parsed.index or 0) < torch.cuda.device_count()):
        raise ValueError(f"synthetic: device={device!r}, but this machine has {torch.cuda.device_count()} visible "
                         "CUDA device(s)")
    return parsed


@register_dataset("synthetic")
def load_synthetic(
    name: str,
    root: Path,
    *,
    num_nodes: int = 10_000,
    avg_degree: float = 10,
    num_features: int = 64,
    num_classes: int = 8,
    homophily: float = 0.8,
    seed: int = 0,
    device: str | torch.device = "cpu",
    rmat: tuple[float, float, float, float] = (0.57, 0.19, 0.19, 0.05),
    feature_noise: float = 1.0,
) -> NodeDataset:
    """Generate the synthetic dataset described in the module docstring (``root`` is unused).

    Args:
        name: "synthetic".
        root: unused (nothing is read or written).
        num_nodes: N.
        avg_degree: mean number of directed edges per node (E = N * avg_degree).
        num_features: F.
        num_classes: C.
        homophily: target fraction of edges joining same-class nodes.
        seed: generator seed.
        device: where the generator and every tensor live.
        rmat: RMAT quadrant probabilities (a, b, c, d).
        feature_noise: noise scale relative to the class separation (0 = separable, larger = harder).

    Shapes:
        See the module docstring.
    """
    _check(num_nodes, avg_degree, num_features, num_classes, homophily, seed, rmat, feature_noise)
    device = _device(device)
    g = torch.Generator(device=device).manual_seed(int(seed))  # the check takes any Integral (NumPy too); torch takes int only
    n = num_nodes
    y = (torch.arange(n, device=device) % num_classes)[torch.randperm(n, generator=g, device=device)]

    scale = max(math.ceil(math.log2(n)), 0)
    fold = torch.randperm(2**scale, generator=g, device=device) % n
    edge_index = _edges(n, avg_degree, num_classes, homophily, y, scale, tuple(rmat), fold, g)

    centroids = torch.randn(num_classes, num_features, generator=g, device=device, dtype=torch.float32)
    noise = torch.randn(n, num_features, generator=g, device=device, dtype=torch.float32)
    x = centroids[y] + noise.mul_(feature_noise * math.sqrt(num_features / 2))

    perm = torch.randperm(n, generator=g, device=device)
    n_train, n_val = int(n * TRAIN_FRACTION), int(n * VAL_FRACTION)
    masks = []
    for part in (perm[:n_train], perm[n_train:n_train + n_val], perm[n_train + n_val:]):
        mask = torch.zeros(n, dtype=torch.bool, device=device)
        mask[part] = True
        masks.append(mask)
    return NodeDataset(name=name, x=x, y=y, edge_index=edge_index, train_mask=masks[0], val_mask=masks[1],
                       test_mask=masks[2], num_classes=num_classes)
