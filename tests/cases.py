"""Test helpers shared across the suite: per-dtype tolerances and bug-hunting graph cases."""

from __future__ import annotations

import torch

import graphfuse

# Tolerances for comparing against the float64 reference, by the dtype under test.
TOLERANCES = {
    torch.float64: dict(rtol=1e-10, atol=1e-10),
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float16: dict(rtol=1e-2, atol=1e-2),
    torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
}


def tolerance(dtype: torch.dtype) -> dict:
    return TOLERANCES[dtype]


def make_graph_case(name: str, device="cpu", seed: int = 0) -> graphfuse.Graph:
    """Graphs that hunt for bugs: empty, isolated nodes, a single node, a hub, duplicates, unsorted, bipartite."""
    gen = torch.Generator().manual_seed(seed)

    def rand_edges(n_src, n_dst, e):
        return torch.stack([torch.randint(0, n_src, (e,), generator=gen), torch.randint(0, n_dst, (e,), generator=gen)])

    if name == "no_edges":
        g = graphfuse.Graph(torch.empty(2, 0, dtype=torch.long), num_nodes=5)
    elif name == "isolated":  # nodes 6..9 have no edges at all
        g = graphfuse.Graph(rand_edges(6, 6, 20), num_nodes=10)
    elif name == "single_node":
        g = graphfuse.Graph(torch.tensor([[0], [0]]), num_nodes=1)
    elif name == "hub":  # node 0 receives from everyone, plus a sprinkle of random edges
        n = 300
        hub = torch.stack([torch.arange(n), torch.zeros(n, dtype=torch.long)])
        g = graphfuse.Graph(torch.cat([hub, rand_edges(n, n, 400)], 1), num_nodes=n)
    elif name == "duplicates":
        e = rand_edges(8, 8, 10)
        g = graphfuse.Graph(torch.cat([e, e, e[:, :3]], 1), num_nodes=8)
    elif name == "unsorted":
        g = graphfuse.Graph(rand_edges(50, 50, 300), num_nodes=50)
    elif name == "bipartite":
        g = graphfuse.Graph(rand_edges(30, 12, 90), num_src=30, num_dst=12)
    else:
        raise KeyError(name)
    return g.to(device)


GRAPH_CASES = ["no_edges", "isolated", "single_node", "hub", "duplicates", "unsorted", "bipartite"]
HUB_DEGREE = 100_000


def make_big_hub(degree: int = HUB_DEGREE) -> graphfuse.Graph:
    """Node 0 receives from ``degree`` sources; a sprinkle of 20,000 random edges elsewhere (the GPU suites'
    hub case: one row longer than any block)."""
    gen = torch.Generator().manual_seed(1)
    n = degree + 500
    hub = torch.stack([torch.arange(1, degree + 1), torch.zeros(degree, dtype=torch.long)])
    rand = torch.randint(0, n, (2, 20_000), generator=gen)
    return graphfuse.Graph(torch.cat([hub, rand], 1), num_nodes=n)


def planted_communities(num_features: int, seed: int = 0):
    """Two planted communities: dense inside, sparse across; features a weak noisy copy of the label."""
    gen = torch.Generator().manual_seed(seed)
    n = 40
    y = torch.arange(n) % 2
    src, dst = torch.randint(0, n, (2, 400), generator=gen)
    keep = (y[src] == y[dst]) | (torch.rand(400, generator=gen) < 0.1)
    x = torch.nn.functional.one_hot(y, num_features).float() + torch.randn(n, num_features, generator=gen)
    return x, y, graphfuse.Graph(torch.stack([src[keep], dst[keep]]), num_nodes=n)


def train_steps(model, x, y, graph, steps: int = 30, lr: float = 0.05):
    """Full-batch Adam on cross-entropy. Returns (eval loss before, eval loss after, training losses)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)

    def eval_loss():
        model.eval()
        with torch.no_grad():
            return torch.nn.functional.cross_entropy(model(x, graph), y).item()

    before = eval_loss()
    losses = []
    for _ in range(steps):
        model.train()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x, graph), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return before, eval_loss(), losses


def length_class(length: torch.Tensor, segment: int) -> tuple[torch.Tensor, int]:
    """``gespmm_length_class`` with tensor operations, and the number of classes: the bit length of ``segment``
    minus that of the length, capped at the last class, which also holds the empty ones."""
    classes = min(segment.bit_length(), 11) + 1  # spmm.length_classes, written out so that the oracle is its own
    bits = (length[..., None] >= 1 << torch.arange(63, device=length.device)).sum(-1)  # exact, 0 for 0
    return torch.where(length > 0, (segment.bit_length() - bits).clamp(max=classes - 1), classes - 1), classes


def schedule_counts(rowptr: torch.Tensor, segment: int, threshold: int) -> torch.Tensor:
    """What GE-SpMM's ``gespmm_schedule_count`` writes, computed with tensor operations: (4 + classes, R)
    segments, split flag, partials and "longer than threshold" per row, then its segments per length class."""
    deg = rowptr.diff()
    nseg = torch.where(deg > segment, (deg + segment - 1) // segment, 1)
    split = (nseg > 1).long()
    last, classes = length_class(deg - (nseg - 1) * segment, segment)
    per_class = torch.arange(classes, device=rowptr.device)[:, None]
    by_class = torch.where(per_class == 0, nseg - 1, 0) + (per_class == last).long()
    return torch.cat([torch.stack([nseg, split, nseg * split, (deg > threshold).long()]), by_class])


def torch_row_schedule(rowptr: torch.Tensor, segment: int) -> tuple:
    """``spmm.row_schedule(rowptr, segment)``'s fields computed with tensor operations (the form its kernels
    replaced): the oracle of the GPU test, and what the CPU launch-arity test fills in for the kernels."""
    deg = rowptr.diff()
    nseg = ((deg + segment - 1) // segment).clamp_(min=1)
    rows = torch.arange(deg.numel(), device=rowptr.device)
    seg_row = torch.repeat_interleave(rows, nseg)
    within = torch.arange(seg_row.numel(), device=rowptr.device) - (torch.cumsum(nseg, 0) - nseg)[seg_row]
    beg = rowptr[seg_row] + within * segment
    end = torch.where(within == nseg[seg_row] - 1, rowptr[seg_row + 1], beg + segment)
    is_long = nseg > 1
    long_seg = is_long[seg_row]
    seg_slot = torch.where(long_seg, -torch.cumsum(long_seg.long(), 0), seg_row)
    seg_range = torch.stack([beg, end], 1)
    long_ptr = torch.cat([rowptr.new_zeros(1), torch.cumsum(nseg[is_long], 0)])
    # by length class, row order within a class: a key without ties, which any sort puts in the same order
    order = torch.argsort(length_class(end - beg, segment)[0] * seg_row.numel()
                          + torch.arange(seg_row.numel(), device=rowptr.device))
    return seg_range[order], seg_row[order], seg_slot[order], rows[is_long], long_ptr, segment, int(long_ptr[-1])


SMALL_POOL_MAX = 1 << 20  # the caching allocator's largest small-pool request (kSmallSize)


def poison(value: float = float("nan"), dtype: torch.dtype = torch.float32) -> None:
    """Fill the CUDA caching allocator's free blocks with ``value``, so outputs allocated by the kernels start as
    it (a float NaN also reads as an index far out of range). Large blocks first (a 1 GiB one and 64 of 512 KiB,
    for outputs larger than every hole; they reuse the previous call's, so the pools do not grow), then every free
    block of the default pool and the current stream that torch.cuda.memory_snapshot still lists is filled by
    tensors of exactly its size (the allocator's best fit puts them there; see below for small segments): filling
    the pools with large blocks only left the small holes, where small outputs land, holding earlier results."""
    torch.cuda.synchronize()
    blocks = [torch.full((1 << 28,), value, dtype=dtype, device="cuda")]  # large pool, 1 GiB
    blocks += [torch.full((1 << 17,), value, dtype=dtype, device="cuda") for _ in range(64)]  # small pool
    item = blocks[0].element_size()
    stream = torch.cuda.current_stream().cuda_stream  # only its blocks can take this stream's allocations
    holes = []
    for segment in torch.cuda.memory_snapshot():
        if tuple(segment.get("segment_pool_id", (0, 0))) != (0, 0) or segment.get("stream", stream) != stream:
            continue
        for block in (b for b in segment["blocks"] if b["state"] == "inactive"):
            size = block["size"]
            # a request over 1 MiB goes to the large pool: a small segment's hole (up to 2 MiB) is asked for in
            # pieces of at most 1 MiB, or each call would take a new large segment for it
            while segment.get("segment_type") == "small" and size > SMALL_POOL_MAX:
                holes.append(SMALL_POOL_MAX)
                size -= SMALL_POOL_MAX
            holes.append(size)
    blocks += [torch.full((size // item,), value, dtype=dtype, device="cuda") for size in sorted(holes, reverse=True)]
    del blocks


def poison_next(shape: tuple[int, ...], dtype: torch.dtype = torch.float32, value: float = float("nan")) -> None:
    """Fill with ``value`` the block that the next allocation of ``shape`` and ``dtype`` on this stream gets: the
    caching allocator hands a freed block of the requested size back first (the lowest address among equal fits),
    which may otherwise be an earlier call's output holding the expected values."""
    torch.full(shape, value, dtype=dtype, device="cuda")
