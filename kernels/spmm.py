"""Launcher of GE-SpMM (spmm.cu): CSR aggregation with sum / mean / max / min, row splitting, argmask.

The same launcher serves the forward pass (CSR, rows = targets) and the feature gradient (CSC, rows =
sources, gathering the output gradient). See docs/kernels.md for the work-to-thread mapping.

Shapes:
    rowptr: (R + 1,) int64; col: (nnz,) int32 (the gathered row of ``x`` for each entry);
    x: (num_cols, K); values: (nnz,) or (nnz, H) in the same entry order, or None;
    out: (R, K); arg: (R, K) int64 entry positions of the max/min (-1 for empty rows).

Dtypes: float32, float64, and float16/bfloat16 (products and sums in float32, the output rounded once; split
rows' partials kept in float32).
"""

from __future__ import annotations

import functools
import threading
from typing import NamedTuple

import torch
from torch import Tensor

from . import runtime as rt

FILE = "spmm.cu"
DEFAULT_SEGMENT = 512
KEEP_PARTIALS_BYTES = 32 << 20  # split-row workspaces up to this size stay allocated per plan and stream
FOLD_MAX_PARTIALS = 2048  # split rows are folded inside the row kernel up to this many partials (else a 2nd launch)
# Columns per tile. Tiles are walked by grid.y, all rows of a tile before the next, so the slice of x being
# gathered stays small (it fits in L2 more often): on the H100, 128-column tiles ran 1.1-1.3x faster than
# 256- and 512-column ones at K = 256 and 602 on the benchmark's large graphs. float16/bfloat16 tiles span
# twice the columns (the same 512 bytes of a row of x).
TILE = 128
MAX_LENGTH_CLASSES = 12  # bounds the schedule's counts: (4 + classes) per row
NO_WORKSPACE = (0, 0, 0, 0)  # gespmm_rows' part, part_arg, rowptr, done for a plan without split rows


class RowSchedule(NamedTuple):
    """Row segments of at most ``segment`` entries (see :func:`row_schedule`), in the order the row kernel visits
    them: longest first by length class, row order within a class (so a split row's full segments in order).

    ``seg_range`` (S, 2) each segment's first and end entry; ``seg_row`` (S,) its row; ``seg_slot`` (S,) the
    output row, or ``-(p + 1)`` for workspace row p (a split row's segments take consecutive workspace rows, in
    order); ``long_rows`` (L,) the split rows, ``long_ptr`` (L + 1,) their workspace rows; ``segment`` the
    segment length; ``num_partials`` = P.
    """

    seg_range: Tensor
    seg_row: Tensor
    seg_slot: Tensor
    long_rows: Tensor
    long_ptr: Tensor
    segment: int
    num_partials: int


SCHEDULE_KERNELS = ("gespmm_schedule_count", "gespmm_schedule_fill")


def row_schedule(rowptr: Tensor, segment: int = DEFAULT_SEGMENT, split_above: int = 0) -> RowSchedule | None:
    """Split rows longer than ``segment`` entries into consecutive segments (load balance for hub rows).

    Returns None when no row is longer than ``max(segment, split_above)`` (the kernel then maps segment s to
    row s). Built on the device by two kernels around a cumulative sum, with one host sync that reads every
    size at once. The fill kernel writes the segments in their visiting order, longest first by length class
    (the bit length of the entries: the split rows' full segments first), row order within a class: in row order
    a block of the row kernel holds its place on the SM until its longest segment is done, so that on a skewed
    graph most of the SM's places wait on a few long segments (see docs/kernels.md). Cached by the engine per
    graph (a sampled batch builds it on every step).
    """
    rt.check_tensor("row_schedule", "rowptr", rowptr, dtypes=(torch.int64,), ndim=1)
    if rowptr.numel() < 1:
        raise ValueError(f"row_schedule: rowptr must have at least one element (R + 1); got shape {tuple(rowptr.shape)}")
    for name, value, low in (("segment", segment, 1), ("split_above", split_above, 0)):
        if not rt.is_int(value) or not low <= value < 1 << 62:
            raise ValueError(f"row_schedule: {name} must be an int in [{low}, 2**62); got {value!r}")
    segment, split_above = int(segment), int(split_above)
    device = rt.check_devices("row_schedule", {"rowptr": rowptr})
    rows = rowptr.numel() - 1
    if rows == 0:
        return None
    incl = _schedule_counts(rowptr, segment, max(segment, split_above)).cumsum_(1)
    num_segments, num_long, num_partials, over = incl[:4, -1].tolist()
    if not over:
        return None
    shapes = ((num_segments, 2), (num_segments,), (num_segments,), (num_long,), (num_long + 1,))
    parts = tuple(torch.empty(shape, dtype=torch.int64, device=device) for shape in shapes)
    _schedule_fill(rowptr, incl, segment, parts)
    return RowSchedule(*parts, segment, num_partials)


def length_classes(segment: int) -> int:
    """Length classes of a schedule of ``segment``-entry segments (gespmm_length_class): one per bit length
    down from the segment's, at most ``MAX_LENGTH_CLASSES`` (the last also holds the empty rows)."""
    return min(segment.bit_length(), MAX_LENGTH_CLASSES - 1) + 1


def _schedule_grid(threads: int) -> tuple[int]:
    """The schedule kernels' grid for ``threads`` threads' worth of work (capped: the kernels loop with a grid
    stride)."""
    return (min(-(-threads // rt.BLOCK), 1 << 16),)


def _schedule_counts(rowptr: Tensor, segment: int, threshold: int) -> Tensor:
    """gespmm_schedule_count: (4 + classes, R) segments, split flag, partials and "longer than threshold" per row,
    then its segments per length class."""
    classes = length_classes(segment)
    counts = torch.empty(4 + classes, rowptr.numel() - 1, dtype=torch.int64, device=rowptr.device)
    rt.launch(FILE, SCHEDULE_KERNELS[0], rowptr.device, _schedule_grid(counts.size(1)), (rt.BLOCK,),
              (rowptr.data_ptr(), counts.data_ptr(), counts.size(1), segment, threshold, classes),
              family=SCHEDULE_KERNELS)
    return counts


def _schedule_fill(rowptr: Tensor, incl: Tensor, segment: int, parts: tuple[Tensor, ...]) -> None:
    """gespmm_schedule_fill: writes ``parts`` (seg_range, seg_row, seg_slot in visiting order, long_rows,
    long_ptr) from the inclusive sums ``incl`` of :func:`_schedule_counts`."""
    rt.launch(FILE, SCHEDULE_KERNELS[1], rowptr.device, _schedule_grid(parts[1].numel()), (rt.BLOCK,),
              (rowptr.data_ptr(), incl.data_ptr(), incl.size(1), segment, length_classes(segment),
               *(t.data_ptr() for t in parts)),
              family=SCHEDULE_KERNELS)


def config(k: int, dtype: torch.dtype, vec: int | None = None) -> tuple[int, int, int]:
    """(VEC, CF, GROUP) for width K: VEC-wide loads (the widest K allows for aligned operands, or ``vec``),
    GROUP lanes per row (a power of two) and CF column chunks per lane (coarse-grained warp merging) covering at
    most ``TILE`` columns (twice that for float16/bfloat16: the same bytes); grid.y walks the tiles. Below K = 32:
    scalar loads, GROUP the power of two >= K.
    From K = 32, several rows share a warp while K spans at most 16 vectors (GROUP = 8 at K = 32, 16 at K = 64;
    on the H100's large graphs 1.1-1.9x faster for a sum; for mean and max up to 1.4x faster at K = 32, up to
    1.17x slower at K = 64 on RMAT s18 4M and s21, before spmm.cu's gespmm_min_blocks; with it, max within 1.13x
    and mean within 1.08x of the sum on the H200)."""
    if k < 32:
        return 1, 1, rt.next_pow2(k)
    vec = vec or rt.vector_width(k, dtype, [], lanes=8)
    group = min(32, rt.next_pow2(-(-k // vec)))
    tile = TILE * max(1, 4 // rt.itemsize(dtype))
    return vec, min(tile // (group * vec), rt.next_pow2(-(-k // (group * vec)))), group


class GespmmPlan(rt.Plan):
    """One GE-SpMM configuration with everything but the dense operands fixed: the structure (``rowptr``,
    ``col``, ``schedule``), the width K, dtype, reduce, heads and weight mode. Calling it allocates the outputs
    and launches: the few microseconds of host work a small graph pays per aggregation. The engine caches
    plans per graph; :func:`gespmm` builds a throwaway one.

    ``x`` and the output are read with VEC-wide loads when both are aligned to VEC elements (always, for
    tensors fresh from PyTorch's allocator); a misaligned ``x`` (a view into a larger tensor) is served by a
    scalar-load twin plan.
    """

    def __init__(self, rowptr: Tensor, col: Tensor, *, k: int, dtype: torch.dtype, reduce: str = "sum",
                 heads: int = 1, wmode: int = 0, schedule: RowSchedule | None = None, track: bool = False,
                 argmask: bool = False, vec: int | None = None) -> None:
        self.rowptr, self.col, self.schedule = rowptr, col, schedule
        self.k, self.dtype, self.reduce, self.heads, self.wmode = k, dtype, reduce, heads, wmode
        self.acc_dtype = torch.promote_types(dtype, torch.float32)  # the split rows' partials
        self.track, self.argmask, self.device = track, argmask, rowptr.device
        self.num_rows = rowptr.numel() - 1
        vec_, cf, group = config(k, dtype, vec)
        self.align = vec_ * rt.itemsize(dtype)
        num_segs = self.num_rows if schedule is None else schedule.seg_row.numel()
        tile = group * vec_ * cf
        name, combine, family = _names(rt.ctype(dtype), rt.REDUCE_CODES[reduce], wmode, vec_, cf, group, argmask,
                                       track, full=k % tile == 0)  # every tile full: max/min skip the bound check
        grid = (-(-num_segs // (rt.BLOCK // group)), -(-k // tile))
        self.rows = rt.Kernel(FILE, name, self.device, grid, (rt.BLOCK,), family=family)
        seg_ptr = rowptr if schedule is None else schedule.seg_range  # offsets (stride 1) or (begin, end) pairs (2)
        self.structure = (rt.ptr(seg_ptr), rt.ptr(None if schedule is None else schedule.seg_row),
                          rt.ptr(None if schedule is None else schedule.seg_slot), rt.ptr(col))
        self.sizes = (num_segs, k, heads, k // heads, *((1, 1) if schedule is None else (schedule.segment, 2)))
        self.split = schedule is not None and schedule.num_partials > 0
        # Few split rows: folded in the row kernel (one launch; the per-row counters cost GPU time that only
        # a small graph, bound by host launch cost, wins back); many: gespmm_combine's second launch.
        self.fold_in_kernel = self.split and schedule.num_partials <= FOLD_MAX_PARTIALS
        self.combine = None
        if self.split and not self.fold_in_kernel:
            self.combine = rt.Kernel(FILE, combine, self.device, (schedule.long_rows.numel(), -(-k // 128)), (128,),
                                     family=family)
        self.tiles = grid[1]
        self.workspaces: dict[int, tuple] = {}  # stream handle → (counters or None, partials or None)
        # A stream's kept partials are shared by every host thread launching there (PyTorch's default stream: all
        # of them): the row kernel and gespmm_combine of one call are enqueued together, so that no other thread's
        # row kernel overwrites the partials between them. One launch (no split rows, or the in-kernel fold) needs
        # no lock: the stream orders it whole (the lock's with-block is ~0.5 µs of a small graph's host time).
        self.launching = threading.Lock()

    def __call__(self, x: Tensor, values: Tensor | None = None, edge_id: Tensor | None = None,
                 gather_arg: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """``(out, arg)`` for dense ``x`` (and ``values``, ``edge_id``/``gather_arg`` as the plan's modes say);
        shapes as in :func:`gespmm`, unchecked."""
        out = x.new_empty(self.num_rows, self.k)  # x has the plan's dtype and device; no keyword parsing (~0.5 µs)
        arg = torch.empty(self.num_rows, self.k, dtype=torch.int64, device=self.device) if self.track else None
        if self.num_rows == 0 or self.k == 0:
            return out, arg
        return self._for(x, out)._launch(x, values, edge_id, gather_arg, out, arg)

    def _scalar_twin(self) -> GespmmPlan:
        return GespmmPlan(self.rowptr, self.col, k=self.k, dtype=self.dtype, reduce=self.reduce, heads=self.heads,
                          wmode=self.wmode, schedule=self.schedule, track=self.track, argmask=self.argmask, vec=1)

    def _partials(self) -> tuple[Tensor, Tensor | None]:
        part = torch.empty(self.schedule.num_partials, self.k, dtype=self.acc_dtype, device=self.device)
        return part, torch.empty_like(part, dtype=torch.int64) if self.track else None

    def _workspace(self) -> tuple[tuple, tuple[int, int, int, int]]:
        """The current stream's workspace tensors (``done``, (``part``, ``part_arg``): the caller holds them until
        its launches are issued) and the row kernel's workspace arguments (``part``, ``part_arg``, ``rowptr``,
        ``done``). ``part``/``part_arg``: the split rows' partial results, kept per stream when at most
        ``KEEP_PARTIALS_BYTES`` (allocating them is a small graph's host cost; a large graph's are allocated per
        call rather than held). ``done``: for the in-kernel fold, a count of finished segments per
        split row and column tile, zeroed once and reset by the kernel (launches on one stream never overlap, so
        one set per stream suffices); else null.

        A call captured into a CUDA graph gets a workspace of its own, never kept: its zeroing is captured with
        it (so it runs at each replay, not at capture) and the graph's replays, on whatever stream, share their
        counters and partials with no eager call or other graph."""
        capturing = rt.is_available() and torch.cuda.is_current_stream_capturing()
        stream = rt.current_stream(self.device)
        work = None if capturing else self.workspaces.get(stream)
        if work is None:
            done = None
            if self.fold_in_kernel:
                done = torch.zeros(self.schedule.num_partials * self.tiles, dtype=torch.int32, device=self.device)
            item = rt.itemsize(self.acc_dtype) + (8 if self.track else 0)
            keep = self.schedule.num_partials * self.k * item <= KEEP_PARTIALS_BYTES
            partials = self._partials() if keep else None
            work = ((done, partials), None if partials is None else self._work_args(done, partials))
            if not capturing:
                self.workspaces[stream] = work
        (done, kept), _ = work
        if kept is not None:  # kept partials: the arguments were packed when the workspace was made
            return work
        partials = self._partials()
        return (done, partials), self._work_args(done, partials)

    def _work_args(self, done: Tensor | None, partials: tuple[Tensor, Tensor | None]) -> tuple[int, int, int, int]:
        return partials[0].data_ptr(), rt.ptr(partials[1]), self.rowptr.data_ptr(), rt.ptr(done)

    def _launch(self, x: Tensor, values: Tensor | None, edge_id: Tensor | None, gather_arg: Tensor | None,
                out: Tensor, arg: Tensor | None) -> tuple[Tensor, Tensor | None]:
        alive, work = self._workspace() if self.split else (None, NO_WORKSPACE)  # alive: the workspace's tensors
        args = (*self.structure, 0 if values is None else values.data_ptr(), 0 if edge_id is None else edge_id.data_ptr(),
                0 if gather_arg is None else gather_arg.data_ptr(), x.data_ptr(), out.data_ptr(),
                0 if arg is None else arg.data_ptr(), *work, *self.sizes)  # rt.ptr inline: 0.45 µs of a plan call (CPU machine)
        if self.combine is None:
            self.rows(*args)
            return out, arg
        schedule = self.schedule
        with self.launching:
            self.rows(*args)
            self.combine(rt.ptr(schedule.long_rows), rt.ptr(schedule.long_ptr), rt.ptr(self.rowptr), work[0], work[1],
                         out.data_ptr(), rt.ptr(arg), self.k)
        return out, arg


def gespmm(
    rowptr: Tensor,
    col: Tensor,
    x: Tensor,
    values: Tensor | None = None,
    *,
    reduce: str = "sum",
    heads: int = 1,
    schedule: RowSchedule | None = None,
    return_arg: bool = False,
    edge_id: Tensor | None = None,
    gather_arg: Tensor | None = None,
    validate: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """``out[r] = reduce_{j in row r} values[j] * x[col[j]]`` (0 for empty rows).

    Args:
        rowptr, col: the sparse structure (rows are the outputs).
        x: dense features gathered through ``col``.
        values: per-entry weights ((nnz,)), or per entry and head ((nnz, heads)); None for unweighted.
        reduce: "sum", "mean", "max" or "min".
        heads: number of weight columns H; K must be divisible by H (column k uses head k // (K / H)).
        schedule: from :func:`row_schedule` on the same ``rowptr`` (None: one segment per row).
        return_arg: also return the position of the max/min entry (needed by the backward pass).
        edge_id, gather_arg: "argmask" mode (reduce="sum" only): entry j contributes to column k only when
            ``gather_arg[col[j], k] == edge_id[j]`` (the max/min backward over the transpose).
        validate: check the index values (one host sync; see :func:`graphfuse.kernels.runtime.check_indices`) and
            that ``schedule`` is this rowptr's.

    Returns:
        ``(out, arg)``; ``arg`` is None unless ``return_arg`` and reduce is max/min.

    Shapes:
        rowptr: (R + 1,) int64; col: (nnz,) int32; x: (num_cols, K); values: (nnz,) or (nnz, H);
        edge_id: (nnz,) int64; gather_arg: (num_cols, K) int64; out: (R, K); arg: (R, K) int64.
    """
    _check(rowptr, col, x, values, reduce, heads, schedule, edge_id, gather_arg)
    if validate:
        rt.check_indices("gespmm", ("rowptr", rowptr, "col", col), [("col", col, x.size(0))])
        if schedule is not None and not _same_schedule(schedule, row_schedule(rowptr, schedule.segment)):
            raise ValueError("gespmm: schedule must be row_schedule(rowptr, segment) of this rowptr (its segments "
                             "address the entries and workspace rows); got one built for another graph")
    plan = GespmmPlan(rowptr, col, k=x.size(1), dtype=x.dtype, reduce=reduce, heads=heads,
                      wmode=0 if values is None else values.dim(), schedule=schedule,
                      track=return_arg and reduce in ("max", "min"), argmask=edge_id is not None)
    return plan(x, values, edge_id, gather_arg)


def _same_schedule(a: RowSchedule, b: RowSchedule | None) -> bool:
    return b is not None and all(torch.equal(u, v) if isinstance(u, Tensor) else u == v for u, v in zip(a, b))


def _check(rowptr: Tensor, col: Tensor, x: Tensor, values: Tensor | None, reduce: str, heads: int,
           schedule: RowSchedule | None, edge_id: Tensor | None, gather_arg: Tensor | None) -> None:
    """Raise TypeError/ValueError naming the offending argument of :func:`gespmm`."""
    op = "gespmm"
    rt.check_choice(op, "reduce", reduce, rt.REDUCE_CODES)
    rt.check_csr(op, rowptr, col, x, rt.FLOAT_DTYPES + rt.HALF_DTYPES)
    k, nnz = x.size(1), col.numel()
    rt.check_heads(op, k, heads)
    if values is not None and heads == 1:
        rt.check_tensor(op, "values", values, dtypes=(x.dtype,), ndim=1, shape=(nnz,), shape_text=f"(nnz={nnz},)")
    elif values is not None:
        rt.check_tensor(op, "values", values, dtypes=(x.dtype,), ndim=2,
                        shape=(nnz, heads), shape_text=f"(nnz={nnz}, heads={heads})")
    if edge_id is not None or gather_arg is not None:
        if reduce != "sum":
            raise ValueError(f"{op}: edge_id/gather_arg (argmask mode) need reduce='sum'; got {reduce!r}")
        rt.check_tensor(op, "edge_id", edge_id, dtypes=(torch.int64,), ndim=1, shape=(nnz,),
                        shape_text=f"(nnz={nnz},)")
        rt.check_tensor(op, "gather_arg", gather_arg, dtypes=(torch.int64,), ndim=2,
                        shape=(x.size(0), k), shape_text=f"(num_cols={x.size(0)}, K={k})")
    if schedule is not None and not isinstance(schedule, RowSchedule):
        raise TypeError(f"{op}: schedule must be a RowSchedule (row_schedule(rowptr)) or None; got "
                        f"{type(schedule).__name__}")
    rt.check_devices(op, {"x": x, "rowptr": rowptr, "col": col, "values": values, "edge_id": edge_id,
                          "gather_arg": gather_arg, "schedule": None if schedule is None else schedule.seg_range})


def _row_kernel(t: str, red: int, wmode: int, vec: int, cf: int, group: int, argmask: bool, track: bool,
                full: bool) -> str:
    """The row kernel's name; max/min (codes 2, 3) leave out the bound check when every tile is ``full``."""
    unchecked = rt.cbool(full and red >= 2)
    return f"gespmm_rows<{t}, {red}, {wmode}, {vec}, {cf}, {group}, {rt.cbool(argmask)}, {rt.cbool(track)}, {unchecked}>"


@functools.cache
def _names(t: str, red: int, wmode: int, vec: int, cf: int, group: int, argmask: bool, track: bool,
           full: bool) -> tuple[str, str, tuple[str, ...]]:
    """(row kernel, combine kernel, family) names of one configuration."""
    name = _row_kernel(t, red, wmode, vec, cf, group, argmask, track, full)
    return name, f"gespmm_combine<{t}, {red}, {rt.cbool(track)}>", _family(t, vec, cf, group, full)


@functools.cache
def _family(t: str, vec: int, cf: int, group: int, full: bool) -> tuple[str, ...]:
    """Instances compiled together: every reduce and weight mode at this configuration (max/min with and
    without the argument), the argmask variant (a sum) and the combines."""
    names = [_row_kernel(t, r, w, vec, cf, group, False, tr, full) for r in range(4) for w in range(3)
             for tr in ((False, True) if r >= 2 else (False,))]
    names += [_row_kernel(t, 0, w, vec, cf, group, True, False, full) for w in range(3)]
    return tuple(names + [f"gespmm_combine<{t}, {r}, {tr}>" for r in range(4) for tr in ("false", "true")])


def instances() -> list[str]:
    """Representative template instances (compiled by the CPU test with nvcc)."""
    names = list(SCHEDULE_KERNELS)
    for t in ("float", "double"):
        for red in range(4):
            for wmode in range(3):
                for track in ("false", "true"):
                    names.append(f"gespmm_rows<{t}, {red}, {wmode}, 1, 1, 8, false, {track}, false>")
                    names.append(f"gespmm_rows<{t}, {red}, {wmode}, 2, 2, 32, false, {track}, {rt.cbool(red >= 2)}>")
            names.append(f"gespmm_combine<{t}, {red}, false>")
            names.append(f"gespmm_combine<{t}, {red}, true>")
        names.append(f"gespmm_rows<{t}, 0, 1, 1, 2, 32, true, false, false>")
        names.append(f"gespmm_rows<{t}, 0, 2, 1, 1, 16, true, false, false>")
    names.append("gespmm_rows<float, 2, 1, 4, 1, 8, false, false, true>")  # a max packing four rows per warp
    for t in ("gf_half", "gf_bf16"):  # 16-byte loads of 8 values, and scalar ones
        for red in range(4):
            names.append(f"gespmm_rows<{t}, {red}, 1, 8, 1, 16, false, {rt.cbool(red >= 2)}, false>")
            names.append(f"gespmm_rows<{t}, {red}, 2, 1, 2, 32, false, false, {rt.cbool(red >= 2)}>")
            names.append(f"gespmm_combine<{t}, {red}, {rt.cbool(red >= 2)}>")
        names.append(f"gespmm_rows<{t}, 0, 0, 8, 1, 8, true, false, false>")
    return names
