"""Launcher of fused GAT attention (gat_attention.cu): edge softmax of LeakyReLU(a_src[s] + a_dst[t]) with
max subtraction, multi-head, attention dropout from a counter-based hash (recomputed in backward), and its
backward into a_src / a_dst. Atomic-free and deterministic.

Shapes:
    rowptr (N_dst + 1,) int64, col32 (E,) int32, perm (E,) int64: CSR by target with COO edge ids.
    colptr (N_src + 1,) int64, row32 (E,) int32, csc_perm (E,) int64: CSC by source with COO edge ids.
    a_src (N_src, H), a_dst (N_dst, H): per-node attention terms; row_max, row_sum (N_dst, H).
    alpha / dalpha: (E, H), in COO order, CSR order or any entry order (see each function).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from . import runtime as rt

FILE = "gat_attention.cu"
WARPS_PER_BLOCK = 8
MAX_GRID = 1 << 20


def _check_scalars(op: str, negative_slope: float, dropout: float, seed: int) -> None:
    rt.check_real(op, "negative_slope", negative_slope)
    rt.check_real(op, "dropout", dropout)
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"{op}: dropout must lie in [0, 1); got {dropout}")
    if not rt.is_int(seed) or not -2**63 <= seed < 2**63:
        raise ValueError(f"{op}: seed must be an int in [-2**63, 2**63) (a 64-bit kernel argument); got {seed!r}")


def _check_nodes(op: str, a_src: Tensor, a_dst: Tensor) -> int:
    rt.check_tensor(op, "a_src", a_src, dtypes=rt.FLOAT_DTYPES, ndim=2)
    rt.check_tensor(op, "a_dst", a_dst, dtypes=(a_src.dtype,), ndim=2, shape=(None, a_src.size(1)),
                    shape_text=f"(N_dst, H={a_src.size(1)})")
    return a_src.size(1)


def _check_ptr(op: str, name: str, ptr: Tensor, rows: int, rows_name: str) -> None:
    rt.check_tensor(op, name, ptr, dtypes=(torch.int64,), ndim=1, shape=(rows + 1,),
                    shape_text=f"({rows_name}={rows} + 1,)")


def _check_entries(op: str, tensors: dict[str, tuple[Tensor, torch.dtype]]) -> int:
    """Raise unless every tensor is 1-D of its dtype and as long as the first; returns that length E."""
    (first, (t, dtype)), *_ = tensors.items()
    rt.check_tensor(op, first, t, dtypes=(dtype,), ndim=1)
    nnz = t.numel()
    for name, (t, dtype) in tensors.items():
        rt.check_tensor(op, name, t, dtypes=(dtype,), ndim=1, shape=(nnz,), shape_text=f"(E={nnz},)")
    return nnz


def _check_stats(op: str, row_max: Tensor, row_sum: Tensor, a_src: Tensor, a_dst: Tensor) -> None:
    for name, t in (("row_max", row_max), ("row_sum", row_sum)):
        rt.check_tensor(op, name, t, dtypes=(a_src.dtype,), ndim=2, shape=tuple(a_dst.shape),
                        shape_text=f"(N_dst, H) = {tuple(a_dst.shape)}")


def _grid(rows: int) -> tuple[int]:
    return (min(-(-rows // WARPS_PER_BLOCK), MAX_GRID),)


KERNELS = ("gat_softmax_rows", "gat_alpha_entries", "gat_softmax_bwd_rows", "gat_softmax_bwd_cols")  # _family order


def node_scores(x: Tensor, att_src: Tensor, att_dst: Tensor, *, check: bool = True) -> tuple[Tensor, Tensor]:
    """``a_src[n, h] = <x[n, h], att_src[h]>`` and ``a_dst[n, h] = <x[n, h], att_dst[h]>`` in one launch.
    ``check=False``: the caller (the engine) has validated the arguments.

    Shapes:
        x: (N, H, C) contiguous; att_src, att_dst: (H, C) contiguous; returns two (N, H).
    """
    op = "gat_node_scores"
    if check:
        rt.check_tensor(op, "x", x, dtypes=rt.FLOAT_DTYPES, ndim=3)
        for name, t in (("att_src", att_src), ("att_dst", att_dst)):
            rt.check_tensor(op, name, t, dtypes=(x.dtype,), ndim=2, shape=x.shape[1:],
                            shape_text=f"(H={x.size(1)}, C={x.size(2)})")
        rt.check_devices(op, dict(x=x, att_src=att_src, att_dst=att_dst))
    n, heads, c = x.shape
    device = x.device
    a_src = torch.empty(n, heads, dtype=x.dtype, device=device)
    a_dst = torch.empty(n, heads, dtype=x.dtype, device=device)
    rt.launch(FILE, f"gat_node_scores<{rt.ctype(x.dtype)}>", device, (-(-(n * heads) // rt.BLOCK),), (rt.BLOCK,), (
        rt.ptr(x), rt.ptr(att_src), rt.ptr(att_dst), rt.ptr(a_src), rt.ptr(a_dst), rt.i64(n), rt.i64(heads),
        rt.i64(c),
    ))
    return a_src, a_dst


@functools.cache
def _family(dtype: torch.dtype, dropout: bool) -> tuple[str, ...]:
    """The four kernels of one (dtype, dropout > 0) pair, compiled together on first use."""
    return tuple(f"{k}<{rt.ctype(dtype)}, {rt.cbool(dropout)}>" for k in KERNELS)


def _scalars(negative_slope: float, dropout: float, seed: int) -> tuple:
    return rt.f64(negative_slope), rt.f64(dropout), rt.i64(seed)


def softmax_forward(
    rowptr: Tensor,
    col32: Tensor,
    perm: Tensor,
    a_src: Tensor,
    a_dst: Tensor,
    *,
    negative_slope: float = 0.2,
    dropout: float = 0.0,
    seed: int = 0,
    coo_order: bool = True,
    csr_order: bool = False,
    check: bool = True,
) -> tuple[Tensor | None, Tensor | None, Tensor, Tensor]:
    """Attention coefficients of every edge (dropout applied when ``dropout > 0``). ``check=False``: the
    caller (the engine) has validated the arguments.

    Returns:
        ``(alpha_coo, alpha_csr, row_max, row_sum)``: alpha in COO order and / or in CSR order (None unless
        asked for), and the per-target statistics the backward pass recomputes alpha from.
    """
    op = "gat_softmax"
    if check:
        _check_scalars(op, negative_slope, dropout, seed)
        _check_nodes(op, a_src, a_dst)
        _check_ptr(op, "rowptr", rowptr, a_dst.size(0), "N_dst")
        _check_entries(op, dict(col32=(col32, torch.int32), perm=(perm, torch.int64)))
        rt.check_devices(op, dict(rowptr=rowptr, col32=col32, perm=perm, a_src=a_src, a_dst=a_dst))
        rt.check_indices(op, ("rowptr", rowptr, "col32", col32),
                         [("col32", col32, a_src.size(0)), ("perm", perm, col32.numel())],
                         [rt.permutation_rule("perm", perm)] if coo_order else [])
    num_dst, heads, nnz = a_dst.size(0), a_src.size(1), col32.numel()
    device, dtype = a_src.device, a_src.dtype
    alpha_coo = torch.empty(nnz, heads, dtype=dtype, device=device) if coo_order else None
    alpha_csr = torch.empty(nnz, heads, dtype=dtype, device=device) if csr_order else None
    row_max, row_sum = torch.empty(2, num_dst, heads, dtype=dtype, device=device)
    if heads == 0:
        return alpha_coo, alpha_csr, row_max, row_sum
    family = _family(dtype, dropout > 0)
    rt.launch(FILE, family[0], device, _grid(num_dst), (32 * WARPS_PER_BLOCK,), (
        rt.ptr(rowptr), rt.ptr(col32), rt.ptr(perm), rt.ptr(a_src), rt.ptr(a_dst), rt.ptr(alpha_coo),
        rt.ptr(alpha_csr), rt.ptr(row_max), rt.ptr(row_sum), num_dst, heads, *_scalars(negative_slope, dropout, seed),
    ), family=family)
    return alpha_coo, alpha_csr, row_max, row_sum


def alpha_entries(
    src: Tensor,
    dst32: Tensor,
    eid: Tensor,
    a_src: Tensor,
    a_dst: Tensor,
    row_max: Tensor,
    row_sum: Tensor,
    *,
    negative_slope: float = 0.2,
    dropout: float = 0.0,
    seed: int = 0,
    check: bool = True,
) -> Tensor:
    """Recompute the coefficients of an entry list (source ``src``, target ``dst32``, COO id ``eid``), bitwise
    equal to :func:`softmax_forward`'s. Returns (n, H) in the order of the list (e.g. CSC order).
    ``check=False``: the caller (the engine) has validated the arguments."""
    op = "gat_alpha_entries"
    if check:
        _check_scalars(op, negative_slope, dropout, seed)
        _check_nodes(op, a_src, a_dst)
        _check_entries(op, dict(src=(src, torch.int64), dst32=(dst32, torch.int32), eid=(eid, torch.int64)))
        _check_stats(op, row_max, row_sum, a_src, a_dst)
        rt.check_devices(op, dict(src=src, dst32=dst32, eid=eid, a_src=a_src, a_dst=a_dst, row_max=row_max,
                                  row_sum=row_sum))
        rt.check_indices(op, None, [("src", src, a_src.size(0)), ("dst32", dst32, a_dst.size(0))])
    heads, n, device = a_src.size(1), src.numel(), a_src.device
    out = torch.empty(n, heads, dtype=a_src.dtype, device=device)
    family = _family(a_src.dtype, dropout > 0)
    rt.launch(FILE, family[1], device, (-(-(n * heads) // rt.BLOCK),), (rt.BLOCK,), (
        rt.ptr(src), rt.ptr(dst32), rt.ptr(eid), rt.ptr(a_src), rt.ptr(a_dst), rt.ptr(row_max), rt.ptr(row_sum),
        rt.ptr(out), rt.i64(n), rt.i64(heads), *_scalars(negative_slope, dropout, seed),
    ), family=family)
    return out


def softmax_backward(
    rowptr: Tensor,
    col32: Tensor,
    perm: Tensor,
    colptr: Tensor,
    row32: Tensor,
    csc_perm: Tensor,
    dalpha: Tensor,
    rpos: Tensor | None,
    cpos: Tensor,
    a_src: Tensor,
    a_dst: Tensor,
    row_max: Tensor,
    row_sum: Tensor,
    *,
    negative_slope: float = 0.2,
    dropout: float = 0.0,
    seed: int = 0,
    need_src: bool = True,
    need_dst: bool = True,
    check: bool = True,
) -> tuple[Tensor | None, Tensor | None]:
    """Gradients of the attention coefficients into ``a_src`` and ``a_dst`` (two atomic-free passes).

    Args:
        dalpha: (E, H) gradient of the coefficients (after dropout), in any order given by the maps below.
        rpos: position in ``dalpha`` of each CSR entry (None: ``dalpha`` is in CSR order).
        cpos: position in ``dalpha`` of each CSC entry (``csc_perm`` for COO order, the CSR→CSC permutation
            for CSR order).

    Returns:
        ``(d_src, d_dst)``: (N_src, H) and (N_dst, H), None where not asked for.

    ``check=False``: the caller (the engine) has validated the arguments.
    """
    op = "gat_softmax_backward"
    if check:
        _check_scalars(op, negative_slope, dropout, seed)
        _check_nodes(op, a_src, a_dst)
    heads, num_dst, num_src = a_src.size(1), a_dst.size(0), a_src.size(0)
    if check:
        _check_ptr(op, "rowptr", rowptr, num_dst, "N_dst")
        _check_ptr(op, "colptr", colptr, num_src, "N_src")
        entries = dict(col32=(col32, torch.int32), perm=(perm, torch.int64), row32=(row32, torch.int32),
                       csc_perm=(csc_perm, torch.int64), cpos=(cpos, torch.int64))
        if rpos is not None:
            entries["rpos"] = (rpos, torch.int64)
        nnz = _check_entries(op, entries)
        rt.check_tensor(op, "dalpha", dalpha, dtypes=(a_src.dtype,), ndim=2, shape=(nnz, heads),
                        shape_text=f"(E={nnz}, H={heads})")
        _check_stats(op, row_max, row_sum, a_src, a_dst)
        rt.check_devices(op, dict(rowptr=rowptr, col32=col32, perm=perm, colptr=colptr, row32=row32,
                                  csc_perm=csc_perm, dalpha=dalpha, rpos=rpos, cpos=cpos, a_src=a_src,
                                  a_dst=a_dst, row_max=row_max, row_sum=row_sum))
        rt.check_indices(op, ("rowptr", rowptr, "col32", col32),
                         [("col32", col32, num_src), ("rpos", rpos, nnz), ("cpos", cpos, nnz)])
        rt.check_indices(op, ("colptr", colptr, "row32", row32), [("row32", row32, num_dst)])
    device, dtype = a_src.device, a_src.dtype
    d_dst = torch.empty(num_dst, heads, dtype=dtype, device=device) if need_dst else None
    rowdot = torch.empty(num_dst, heads, dtype=dtype, device=device)
    family = _family(dtype, dropout > 0)
    scalars = _scalars(negative_slope, dropout, seed)
    rt.launch(FILE, family[2], device, _grid(num_dst), (32 * WARPS_PER_BLOCK,), (
        rt.ptr(rowptr), rt.ptr(col32), rt.ptr(perm), rt.ptr(rpos), rt.ptr(dalpha), rt.ptr(a_src), rt.ptr(a_dst),
        rt.ptr(row_max), rt.ptr(row_sum), rt.ptr(d_dst), rt.ptr(rowdot), rt.i64(num_dst), rt.i64(heads), *scalars,
    ), family=family)
    d_src = None
    if need_src:
        d_src = torch.empty(num_src, heads, dtype=dtype, device=device)
        rt.launch(FILE, family[3], device, _grid(num_src), (32 * WARPS_PER_BLOCK,), (
            rt.ptr(colptr), rt.ptr(row32), rt.ptr(csc_perm), rt.ptr(cpos), rt.ptr(dalpha), rt.ptr(a_src),
            rt.ptr(a_dst), rt.ptr(row_max), rt.ptr(row_sum), rt.ptr(rowdot), rt.ptr(d_src), rt.i64(num_src),
            rt.i64(heads), *scalars,
        ), family=family)
    return d_src, d_dst


def instances() -> list[str]:
    """Every template instance (compiled by the CPU test with nvcc)."""
    return ([f"{kernel}<{t}, {drop}>" for kernel in KERNELS for t in ("float", "double") for drop in ("false", "true")]
            + [f"gat_node_scores<{t}>" for t in ("float", "double")])
