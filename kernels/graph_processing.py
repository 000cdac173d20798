"""Launcher of the fused graph-processing stage (graph_processing.cu): COO → CSR + CSC + CSR→CSC permutation
by a stable counting sort, with remaining-self-loop insertion and GCN / mean normalisation fused in.

One call runs six launches (zero-fill of the workspace, count, scan, scatter, segment sort, permutation
transpose) and one host sync (after the count: the number of dropped self-loops fixes the output size, the
maximum degree tells whether long segments exist, out-of-range indices are reported). Graphs whose scan is
longer than ``SINGLE_BLOCK_SCAN`` scan with ``torch.cumsum`` (more launches, on large graphs only). From
``RADIX_MIN_ENTRIES`` output entries on (the radix path), the count skips out-degrees and provisional slots,
the scatter only writes the COO and its values, and the formats come from two stable radix sorts
(:mod:`graphfuse.kernels.radix_sort`): the COO by target carrying (id, source) gives the CSR, the CSR by
source carrying (CSR position, target, id) gives the CSC and ``csr_to_csc`` with no gather; the last pass of
each writes the outputs itself (``gp_last_csr`` / ``gp_last_csc``, which also adds up the column sizes for
``colptr``: no out-degree count): ~40 launches, a fraction of the segment sort's time once hub rows hold tens
of thousands of entries.

The result equals the reference (``graphfuse.graph.convert`` / ``graphfuse.graph.norm``) exactly in
structure and permutation; values within floating-point rounding (degrees are accumulated in float64, with
atomics: weighted graphs can differ from run to run in the last bits).

Shapes:
    edge_index: (2, E) int64, row 0 = source in [0, num_src), row 1 = target in [0, num_dst).
    edge_weight: (E,) float32 / float64 or None.
    Output with E' = E - (self-loops) + N edges when ``self_loops`` (else E' = E): edge_index (2, E') in the
    reference's order (kept edges in order, then one loop per node), values (E',) in COO order, CSR / CSC
    index arrays (E',) int64 (+ int32 copies), values in CSR / CSC order, csr_to_csc (E',) int64. A CSC
    column lists its entries in CSR order (by target, then COO position).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from . import radix_sort
from . import runtime as rt

FILE = "graph_processing.cu"
NORMS = {"none": 0, "gcn": 1, "mean": 2}
ITEMS = 4
TILE = rt.BLOCK * ITEMS
WARP_CAP = 512  # longest segment a warp sorts; 8 warps x 512 64-bit keys = 32 KiB of shared memory
BLOCK_CAP = 8 * WARP_CAP  # chunk a block sorts in shared memory for longer segments
VALUE_MODES = {"none": 0, "gather": 1, "gcn": 2, "mean": 3, "one": 4}  # GP_V_* of graph_processing.cu
SINGLE_BLOCK_SCAN = 1 << 16
BIG_GRID = 1024
SORT_GRID_MAX = 1 << 20
INT32_LIMIT = 2**31 - 1
WORKSPACE_INT32_LIMIT = INT32_LIMIT  # int32 workspace (counts, cursors, ids) below this many entries
ID_LIMIT = 2**32  # a CSC sort key holds an id in 32 bits
RADIX_MIN_ENTRIES = 1 << 20  # from this many output entries on (int32 workspace), the radix path (H100: faster from ~1.7M)


class Processed(NamedTuple):
    """Every array of a processed graph (see the module docstring for shapes and orders)."""

    edge_index: Tensor
    values: Tensor | None
    rowptr: Tensor
    col: Tensor
    csr_perm: Tensor
    row: Tensor
    col32: Tensor
    csr_values: Tensor | None
    colptr: Tensor
    csc_row: Tensor
    csc_perm: Tensor
    csc_col: Tensor
    row32: Tensor
    csc_values: Tensor | None
    csr_to_csc: Tensor


def _count_arg(op: str, name: str, value: object) -> int:
    if not rt.is_int(value) or value < 0:
        raise ValueError(f"{op}: {name} must be a non-negative int; got {value!r}")
    return int(value)


class _Workspace:
    """One zero-filled int64 buffer (a single fill launch) carved into typed sections (None when empty)."""

    def __init__(self, device: torch.device, sections: list[tuple[str, torch.dtype, int]]) -> None:
        sizes = [-(-n * dt.itemsize // 8) for _, dt, n in sections]
        self.buffer = torch.zeros(max(1, sum(sizes)), dtype=torch.int64, device=device)
        self.views: dict[str, Tensor | None] = {}
        offset = 0
        for (name, dtype, n), size in zip(sections, sizes):
            view = self.buffer[offset:offset + size]
            if dtype != torch.int64:
                view = view.view(dtype)
            self.views[name] = (view if view.numel() == n else view[:n]) if n else None
            offset += size


def workspace_dtype(upper: int, num_src: int, num_dst: int) -> torch.dtype:
    """The integer type of the stage's workspace for at most ``upper`` output edges: int32 while every value fits,
    i.e. the counts and cursors (below ``upper`` plus a node count) and the segment ids of ``gp_scatter``'s list of
    long segments, which number the CSR rows and then the CSC columns (below ``num_dst + num_src``)."""
    return torch.int32 if upper + num_src + num_dst < WORKSPACE_INT32_LIMIT else torch.int64


def process(
    edge_index: Tensor,
    num_src: int,
    num_dst: int,
    edge_weight: Tensor | None = None,
    *,
    self_loops: bool = False,
    fill_value: float = 1.0,
    norm: str = "none",
    value_dtype: torch.dtype | None = None,
) -> Processed:
    """Convert a COO graph to CSR and CSC, optionally inserting self-loops and normalising, on the GPU.

    Args:
        edge_index: (2, E) int64 CUDA tensor, unsorted, duplicates allowed.
        num_src, num_dst: node counts (sources, targets).
        edge_weight: (E,) float32/float64 on the same device, or None (every edge weighs 1).
        self_loops: PyG's ``add_remaining_self_loops``: drop existing self-loops, append one per node whose
            weight is that of the node's last existing self-loop, else ``fill_value``. Needs a square graph.
        fill_value: weight of the inserted self-loops of nodes that had none.
        norm: ``"none"``, ``"gcn"`` (``deg^-1/2[src] · w · deg^-1/2[dst]``, in-degrees after the loops) or
            ``"mean"`` (``w / deg[dst]``).
        value_dtype: dtype of produced values when ``edge_weight`` is None (default: torch's default dtype).

    Returns:
        :class:`Processed`. ``values`` / ``csr_values`` / ``csc_values`` are None when neither loops nor a
        normalisation produce values and the graph is unweighted (or when only the structure is asked for).

    Raises:
        TypeError / ValueError: wrong dtypes, shapes, devices, a non-square graph for self-loops or GCN, or
            indices out of range (reported with the first offending edge).
    """
    op = "process_graph"
    rt.check_choice(op, "norm", norm, NORMS)
    rt.check_real(op, "fill_value", fill_value)
    rt.check_tensor(op, "edge_index", edge_index, dtypes=(torch.int64,), ndim=2)
    if edge_index.size(0) != 2:
        raise ValueError(f"{op}: edge_index must have shape (2, E); got {tuple(edge_index.shape)}")
    num_src = _count_arg(op, "num_src", num_src)
    num_dst = _count_arg(op, "num_dst", num_dst)
    num_edges = edge_index.size(1)
    if edge_weight is not None:
        rt.check_tensor(op, "edge_weight", edge_weight, dtypes=rt.FLOAT_DTYPES, ndim=1, shape=(num_edges,),
                        shape_text=f"(E={num_edges},)")
    if (self_loops or norm == "gcn") and num_src != num_dst:
        raise ValueError(f"{op}: self-loops and GCN normalisation need a square graph; got num_src={num_src}, "
                         f"num_dst={num_dst}")
    if num_src >= INT32_LIMIT or num_dst >= INT32_LIMIT:
        raise ValueError(f"{op}: node ids must fit int32; got num_src={num_src}, num_dst={num_dst}")
    device = rt.check_devices(op, dict(edge_index=edge_index, edge_weight=edge_weight))
    if device is None:
        raise ValueError(f"{op}: edge_index must be a CUDA tensor")

    has_w = edge_weight is not None
    if has_w:
        wdtype = edge_weight.dtype
    else:
        wdtype = value_dtype or torch.get_default_dtype()
        if wdtype not in rt.FLOAT_DTYPES:
            raise TypeError(f"{op}: value_dtype must be float32 or float64; got {wdtype}")
    produce_values = self_loops or norm != "none" or has_w
    upper = num_edges + (num_dst if self_loops else 0)
    if upper >= ID_LIMIT:
        raise ValueError(f"{op}: at most 2^32 - 1 edges after self-loop insertion; got up to {upper}")
    idx_dtype = workspace_dtype(upper, num_src, num_dst)
    idx_c = "int" if idx_dtype == torch.int32 else "long long"
    w_c = rt.ctype(wdtype)
    flags = f"{idx_c}, {w_c}, {rt.cbool(has_w)}, {rt.cbool(self_loops)}, {NORMS[norm]}, {ITEMS}"
    vmode = _value_mode(produce_values, has_w, norm)
    sort_name = f"gp_sort<{idx_c}, {w_c}, {WARP_CAP}, {vmode}>"
    tiles = -(-num_edges // TILE)
    family = [f"gp_count<{flags}>", f"gp_scatter<{flags}>", f"gp_scan<{idx_c}>", sort_name,
              f"gp_transpose_perm<{idx_c}>", f"gp_last_csr<{idx_c}, {w_c}, {vmode}, {rt.cbool(self_loops)}>",
              f"gp_last_csc<{idx_c}, {w_c}, {vmode}, {rt.cbool(self_loops)}>", f"gp_node_factors<{flags}>"]
    src, dst = edge_index[0], edge_index[1]

    # Radix path (large graphs): no provisional slots, no out-degree count, no segment sort (_radix_formats).
    radix = idx_c == "int" and upper >= RADIX_MIN_ENTRIES
    ws = _Workspace(device, [
        ("stats", torch.int64, 8),
        ("deg", torch.float64, num_dst if (norm != "none" and has_w) else 0),
        ("cnt_in", idx_dtype, num_dst), ("cnt_out", idx_dtype, 0 if radix else num_src),
        ("loop_last", idx_dtype, num_dst if self_loops else 0),
        ("tile_loops", idx_dtype, tiles if self_loops else 0),
    ])
    v = ws.views
    rank_in, rank_out = (None, None) if radix else torch.empty(2, num_edges, dtype=idx_dtype, device=device).unbind(0)
    rt.launch(FILE, f"gp_count<{flags}>", device, (tiles,), (rt.BLOCK,), (
        rt.ptr(src), rt.ptr(dst), rt.ptr(edge_weight), rt.i64(num_edges), rt.ptr(v["cnt_in"]),
        rt.ptr(v["cnt_out"]), rt.ptr(v["loop_last"]), rt.ptr(v["deg"]), rt.ptr(v["tile_loops"]),
        rt.ptr(v["stats"]), rt.i64(num_src), rt.i64(num_dst), rt.ptr(rank_in), rt.ptr(rank_out),
    ), family=family)
    # What needs only the counts is launched before the sync, so the GPU works while the host waits (on RMAT
    # s21 the GPU otherwise idled ~0.3 ms after gp_count): the scans (with the per-tile self-loop offsets
    # whenever loops are inserted; used only when some were dropped) and, on the radix path, the node factors.
    # Arrays of one dtype and length share a buffer (few allocations: host overhead matters on small graphs).
    add = 1 if self_loops else 0
    ptrs = torch.empty(num_dst + num_src + 2 + (tiles + 1 if self_loops else 0), dtype=torch.int64, device=device)
    rowptr, colptr = ptrs[:num_dst + 1], ptrs[num_dst + 1:num_dst + num_src + 2]
    tile_offset = ptrs[num_dst + num_src + 2:] if self_loops else None
    _scan(device, idx_c, v, num_dst, num_src, tiles, rowptr, colptr, tile_offset, add, family)
    node_val = torch.empty(num_dst, dtype=wdtype, device=device) if vmode in (2, 3) else None
    factors = None  # radix path, unweighted: the factors first (one more launch), so edges read two of them
    if radix and node_val is not None:
        factors, node_val_scatter = node_val, None
        rt.launch(FILE, f"gp_node_factors<{flags}>", device, (-(-num_dst // rt.BLOCK),), (rt.BLOCK,), (
            rt.ptr(v["cnt_in"]), rt.ptr(v["deg"]), rt.ptr(v["loop_last"]), rt.ptr(edge_weight), rt.i64(num_dst),
            rt.f64(fill_value), rt.ptr(node_val)), family=family)
    else:
        node_val_scatter = node_val

    loops, max_in, max_out, bad, first_bad = v["stats"][:5].tolist()  # the one host sync
    if bad:
        e = num_edges - first_bad
        s, t = edge_index[:, e].tolist()
        raise ValueError(
            f"{op}: edge_index has {bad} edge(s) out of range: sources must lie in [0, {num_src}) and targets "
            f"in [0, {num_dst}); the first is edge {e} = ({s}, {t})"
        )
    kept = num_edges - loops
    n_out = kept + (num_dst if self_loops else 0)
    max_deg = max(max_in, max_out) + add
    if loops == 0:
        tile_offset = None  # nothing to compact

    if self_loops:
        new_index = torch.empty(2, n_out, dtype=torch.int64, device=device)
        e_src, e_dst = new_index[0], new_index[1]
    else:
        new_index, e_src, e_dst = edge_index, src, dst
    value_rows = torch.empty(3, n_out, dtype=wdtype, device=device) if produce_values else None
    values, csr_values, csc_values = (None, None, None) if value_rows is None else value_rows.unbind(0)
    ws_csr, ws_csc = (None, None) if radix else torch.empty(2, n_out, dtype=torch.int64, device=device).unbind(0)
    big = not radix and max_deg > WARP_CAP  # some row or column goes to the block-cooperative sort
    big_list = torch.empty(min(num_src + num_dst, 2 * n_out // (WARP_CAP + 1) + 1), dtype=idx_dtype,
                           device=device) if big else None
    big_count = v["stats"][5:6]
    if big:
        node_blocks = -(-(num_dst + num_src) // rt.BLOCK)
    else:
        node_blocks = -(-num_dst // rt.BLOCK) if (self_loops or node_val_scatter is not None) else 0
    rt.launch(FILE, f"gp_scatter<{flags}>", device, (tiles + node_blocks,), (rt.BLOCK,), (
        rt.ptr(src), rt.ptr(dst), rt.ptr(edge_weight), rt.i64(num_edges), rt.i64(num_dst), rt.i64(tiles),
        rt.ptr(rowptr), rt.ptr(colptr), rt.ptr(rank_in), rt.ptr(rank_out), rt.ptr(v["cnt_in"]),
        rt.ptr(v["loop_last"]), rt.ptr(v["deg"]), rt.ptr(tile_offset), rt.i64(kept), rt.f64(fill_value),
        rt.ptr(e_src if self_loops else None), rt.ptr(e_dst if self_loops else None), rt.ptr(values),
        rt.ptr(node_val_scatter), rt.ptr(factors), rt.ptr(ws_csr), rt.ptr(ws_csc), rt.i64(num_src),
        rt.ptr(big_list), rt.ptr(big_count),
        rt.i64(WARP_CAP),
    ), family=family)
    del rank_in, rank_out

    index_rows = torch.empty(7, n_out, dtype=torch.int64, device=device)
    csr_perm, col, row, csc_perm, csc_row, csc_col, csr_to_csc = index_rows.unbind(0)
    col32, row32 = torch.empty(2, n_out, dtype=torch.int32, device=device).unbind(0)
    inv_csr = None if radix else torch.empty(n_out, dtype=idx_dtype, device=device)
    out_args = (
        rt.ptr(rowptr), rt.ptr(colptr), rt.ptr(e_src), rt.ptr(values), rt.ptr(node_val),
        rt.ptr(csr_perm), rt.ptr(col), rt.ptr(row), rt.ptr(col32), rt.ptr(csr_values), rt.ptr(inv_csr),
        rt.ptr(csc_perm), rt.ptr(csc_row), rt.ptr(csc_col), rt.ptr(row32), rt.ptr(csc_values), rt.i64(num_dst),
        rt.i64(num_src), rt.i64(kept),
    )
    if radix:
        _radix_formats(device, out_args, e_src, e_dst, colptr, col32, csr_to_csc, num_src, num_dst,
                       f"{idx_c}, {w_c}, {vmode}, {rt.cbool(self_loops)}", family)
    else:
        segments = num_src + num_dst
        big_blocks = min(BIG_GRID, big_list.numel()) if big else 0
        tmp = torch.empty(2 * n_out, dtype=torch.int64, device=device) if big else None
        rt.launch(FILE, sort_name, device, (big_blocks + min(-(-segments // 8), SORT_GRID_MAX),), (rt.BLOCK,),
                  out_args + (rt.ptr(ws_csr), rt.ptr(ws_csc), rt.ptr(tmp), rt.i64(n_out), rt.ptr(big_list),
                              rt.ptr(big_count), rt.i64(big_blocks)), family=family)
        del tmp
        rt.launch(FILE, f"gp_transpose_perm<{idx_c}>", device, (-(-n_out // rt.BLOCK),), (rt.BLOCK,), (
            rt.ptr(csc_perm), rt.ptr(inv_csr), rt.ptr(csr_to_csc), rt.i64(n_out),
        ), family=family)
    return Processed(new_index, values, rowptr, col, csr_perm, row, col32, csr_values, colptr, csc_row, csc_perm,
                     csc_col, row32, csc_values, csr_to_csc)


def _radix_formats(device: torch.device, out_args: tuple, e_src: Tensor, e_dst: Tensor, colptr: Tensor,
                   col32: Tensor, csr_to_csc: Tensor, num_src: int, num_dst: int, types: str,
                   family: list[str]) -> None:
    """CSR, CSC and csr_to_csc by two radix sorts (large graphs): the processed COO by target, carrying
    (id, source), gives the CSR; the CSR by source, carrying (CSR position, target, id), gives the CSC in its
    order (by source, then CSR order), csr_to_csc without a gather, and colptr (no out-degree count). The last
    pass of each sort writes the outputs (gp_last_csr / gp_last_csc)."""
    n = e_src.numel()

    def last(name: str, extra: tuple = ()) -> Callable[..., None]:
        def launch(keys, payloads, shift, bins, hist, ends, tiles) -> None:
            rt.launch(FILE, f"{name}<{types}>", device, (tiles,), (radix_sort.BLOCK,), out_args + (
                keys.data_ptr(), *(p.data_ptr() for p in payloads), *extra, n, shift, bins, hist.data_ptr(),
                ends.data_ptr(), tiles), family=family)
        return launch

    row32, perm32 = torch.empty(2, n, dtype=torch.int32, device=device)  # int32 input of the CSC sort
    radix_sort.sort_by_key(e_dst, num_dst, [e_src], last=last("gp_last_csr", (row32.data_ptr(), perm32.data_ptr())))
    colptr.zero_()  # gp_last_csc adds up the column sizes in colptr[1:]
    radix_sort.sort_by_key(col32, num_src, [row32, perm32],
                           last=last("gp_last_csc", (csr_to_csc.data_ptr(), colptr[1:].data_ptr())))
    colptr[1:].cumsum_(0)


def _value_mode(produce_values: bool, has_w: bool, norm: str) -> int:
    """How the sort kernels get the CSR / CSC values: gathered from the COO values (weighted graphs), or
    recomputed from per-node factors (unweighted: no per-edge gather)."""
    if not produce_values:
        return VALUE_MODES["none"]
    if has_w:
        return VALUE_MODES["gather"]
    return VALUE_MODES[{"gcn": "gcn", "mean": "mean", "none": "one"}[norm]]


def _scan(device: torch.device, idx_c: str, v: dict[str, Tensor], num_dst: int, num_src: int, tiles: int,
          rowptr: Tensor, colptr: Tensor, tile_offset: Tensor | None, add: int, family: list[str]) -> None:
    """rowptr / colptr (and the per-tile self-loop offsets) from the counts: one block when short."""
    if num_dst + num_src + tiles <= SINGLE_BLOCK_SCAN:
        rt.launch(FILE, f"gp_scan<{idx_c}>", device, (1,), (1024,), (
            rt.ptr(v["cnt_in"]), rt.i64(num_dst), rt.ptr(rowptr), rt.ptr(v["cnt_out"]), rt.i64(num_src),
            rt.ptr(colptr), rt.ptr(v["tile_loops"] if tile_offset is not None else None), rt.i64(tiles),
            rt.ptr(tile_offset), rt.i64(add),
        ), family=family)
        return
    for counts, ptr in ((v["cnt_in"], rowptr), (v["cnt_out"], colptr)):
        if counts is None:  # no out-degrees on the radix path: _radix_formats builds colptr
            continue
        ptr[:1].zero_()  # a fill launch: `ptr[0] = 0` copied a host scalar, which waited for gp_count
        torch.cumsum(counts, 0, dtype=torch.int64, out=ptr[1:])
        if add:
            ptr[1:].add_(torch.arange(1, ptr.numel(), device=device))
    if tile_offset is not None:
        tile_offset[:1].zero_()
        torch.cumsum(v["tile_loops"], 0, dtype=torch.int64, out=tile_offset[1:])


def instances() -> list[str]:
    """Representative template instances (compiled by the CPU test with nvcc)."""
    names = []
    for idx in ("int", "long long"):
        for w in ("float", "double"):
            for has_w in ("true", "false"):
                for loops, norm in (("true", 1), ("true", 0), ("true", 2), ("false", 0), ("false", 1), ("false", 2)):
                    names.append(f"gp_count<{idx}, {w}, {has_w}, {loops}, {norm}, {ITEMS}>")
                    names.append(f"gp_scatter<{idx}, {w}, {has_w}, {loops}, {norm}, {ITEMS}>")
                    names.append(f"gp_node_factors<{idx}, {w}, {has_w}, {loops}, {norm}, {ITEMS}>")
            for vmode in VALUE_MODES.values():
                names.append(f"gp_sort<{idx}, {w}, {WARP_CAP}, {vmode}>")
                names += [f"gp_last_{f}<{idx}, {w}, {vmode}, {loops}>" for f in ("csr", "csc")
                          for loops in ("false", "true")]
        names.append(f"gp_scan<{idx}>")
        names.append(f"gp_transpose_perm<{idx}>")
    return names
