"""Launcher of fused GAR (gar.cu): block per target row forward, fused feature + edge-weight backward per
source row, and SDDMM (the backward kernel without the feature gradient). Atomic-free, deterministic.

Shapes:
    forward: rowptr (num_dst + 1,) int64, col (nnz,) int32, x (num_src, K), values (nnz,) / (nnz, H) in CSR
    order → out (num_dst, K), arg (num_dst, K) int64.
    backward: colptr (num_src + 1,) int64, row (nnz,) int32, grad (num_dst, K), x (num_src, K), values in CSC
    order, edge_perm (nnz,) int64 COO id of each CSC entry → dx (num_src, K), dw (E,) or (E, H) in COO order.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import runtime as rt

FILE = "gar.cu"
MAX_TILE = 256


def config(k: int, dtype: torch.dtype, tensors: list[Tensor]) -> tuple[int, int, int]:
    """(VEC, CF, GROUP) with a column tile GROUP * VEC * CF of at most 256 columns (fixed shared memory)."""
    if k < 32:
        return 1, 1, rt.next_pow2(k)
    vec = rt.vector_width(k, dtype, tensors)
    cf = max(1, min(MAX_TILE // (32 * vec), rt.next_pow2(-(-k // (32 * vec)))))
    return vec, cf, 32


def _check_structure(op: str, ptr_name: str, ptr: Tensor, index_name: str, index: Tensor, rows: str) -> None:
    """Raise unless ``ptr`` (``rows`` + 1 offsets) is non-empty 1-D int64 and ``index`` 1-D int32."""
    rt.check_tensor(op, ptr_name, ptr, dtypes=(torch.int64,), ndim=1)
    if ptr.numel() < 1:
        raise ValueError(f"{op}: {ptr_name} must have at least one element ({rows} + 1); got shape "
                         f"{tuple(ptr.shape)}")
    rt.check_tensor(op, index_name, index, dtypes=(torch.int32,), ndim=1)


def _weights(op: str, values: Tensor | None, nnz: int, heads: int, x: Tensor) -> int:
    if values is None:
        return 0
    if heads == 1:
        rt.check_tensor(op, "values", values, dtypes=(x.dtype,), ndim=1, shape=(nnz,),
                        shape_text=f"(nnz={nnz},)")
        return 1
    rt.check_tensor(op, "values", values, dtypes=(x.dtype,), ndim=2, shape=(nnz, heads),
                    shape_text=f"(nnz={nnz}, heads={heads})")
    return 2


def gar_forward(
    rowptr: Tensor,
    col: Tensor,
    x: Tensor,
    values: Tensor | None = None,
    *,
    reduce: str = "sum",
    heads: int = 1,
    return_arg: bool = False,
    validate: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """``out[i] = reduce_{j in row i} values[j] * x[col[j]]`` with one block per row (0 for empty rows).

    Returns ``(out, arg)``; ``arg`` (max/min entry positions) only when ``return_arg`` and reduce is max/min.
    ``validate``: check the index values (one host sync; see :func:`graphfuse.kernels.runtime.check_indices`).
    """
    op = "gar_forward"
    rt.check_choice(op, "reduce", reduce, rt.REDUCE_CODES)
    rt.check_tensor(op, "x", x, dtypes=rt.FLOAT_DTYPES, ndim=2)
    _check_structure(op, "rowptr", rowptr, "col", col, "R")
    num_rows, k = rowptr.numel() - 1, x.size(1)
    c = rt.check_heads(op, k, heads)
    wmode = _weights(op, values, col.numel(), heads, x)
    device = rt.check_devices(op, {"x": x, "rowptr": rowptr, "col": col, "values": values})
    if validate:
        rt.check_indices(op, ("rowptr", rowptr, "col", col), [("col", col, x.size(0))])
    out = torch.empty(num_rows, k, dtype=x.dtype, device=device)
    extremum = reduce in ("max", "min")
    arg = torch.empty(num_rows, k, dtype=torch.int64, device=device) if (return_arg and extremum) else None
    if num_rows == 0 or k == 0:
        return out, arg
    vec, cf, group = config(k, x.dtype, [x, out])
    tile = group * vec * cf
    slots = rt.BLOCK // group
    smem = slots * tile * (x.element_size() + (8 if extremum else 0))
    t = rt.ctype(x.dtype)
    name = f"gar_forward<{t}, {rt.REDUCE_CODES[reduce]}, {wmode}, {vec}, {cf}, {group}>"
    family = [f"gar_forward<{t}, {r}, {w}, {vec}, {cf}, {group}>" for r in range(4) for w in range(3)]
    rt.launch(FILE, name, device, (num_rows, -(-k // tile)), (rt.BLOCK,), (
        rt.ptr(rowptr), rt.ptr(col), rt.ptr(values), rt.ptr(x), rt.ptr(out), rt.ptr(arg),
        rt.i64(k), rt.i64(heads), rt.i64(c),
    ), shared_mem=smem, family=family)
    return out, arg


def gar_backward(
    colptr: Tensor,
    row: Tensor,
    grad: Tensor,
    x: Tensor | None,
    values: Tensor | None = None,
    *,
    heads: int = 1,
    edge_perm: Tensor | None = None,
    need_dx: bool = True,
    need_dw: bool = False,
    edge_id: Tensor | None = None,
    gather_arg: Tensor | None = None,
    validate: bool = True,
) -> tuple[Tensor | None, Tensor | None]:
    """Fused backward over CSC: ``dx[s] = sum_{e=(s->t)} w_e * grad[t]`` and ``dw[e] = <grad[t], x[s]>`` per head.

    Args:
        colptr, row: CSC structure (columns = sources, ``row`` = the target of each entry).
        grad: gradient of the aggregation output.
        x: forward input (needed for ``need_dw``).
        values: weights in CSC order ((nnz,) or (nnz, heads)), None for unweighted.
        heads: weight heads H (and the number of per-head dot products of ``dw``).
        edge_perm: COO edge id of each CSC entry (where ``dw`` is written; needed for ``need_dw``).
        edge_id, gather_arg: max/min backward: an entry counts at column k only where
            ``gather_arg[row[p], k] == edge_id[p]``.
        validate: check the index values (one host sync; see :func:`graphfuse.kernels.runtime.check_indices`).

    Returns:
        ``(dx, dw)``: dx (num_src, K) or None; dw (E,) for heads == 1, else (E, heads), or None.
    """
    op = "gar_backward"
    rt.check_tensor(op, "grad", grad, dtypes=rt.FLOAT_DTYPES, ndim=2)
    _check_structure(op, "colptr", colptr, "row", row, "num_src")
    if not (need_dx or need_dw):
        raise ValueError(f"{op}: ask for at least one of need_dx, need_dw")
    num_src, k, nnz = colptr.numel() - 1, grad.size(1), row.numel()
    c = rt.check_heads(op, k, heads)
    wmode = _weights(op, values, nnz, heads, grad)
    if need_dw:
        rt.check_tensor(op, "x", x, dtypes=(grad.dtype,), ndim=2, shape=(num_src, k),
                        shape_text=f"(num_src={num_src}, K={k})")
        rt.check_tensor(op, "edge_perm", edge_perm, dtypes=(torch.int64,), ndim=1, shape=(nnz,),
                        shape_text=f"(nnz={nnz},)")
    argmask = edge_id is not None or gather_arg is not None
    if argmask:
        rt.check_tensor(op, "edge_id", edge_id, dtypes=(torch.int64,), ndim=1, shape=(nnz,),
                        shape_text=f"(nnz={nnz},)")
        rt.check_tensor(op, "gather_arg", gather_arg, dtypes=(torch.int64,), ndim=2,
                        shape=tuple(grad.shape), shape_text=f"(num_dst={grad.size(0)}, K={k})")
    device = rt.check_devices(op, {"grad": grad, "colptr": colptr, "row": row, "x": x if need_dw else None,
                                       "values": values, "edge_perm": edge_perm if need_dw else None, "edge_id": edge_id,
                                       "gather_arg": gather_arg})
    if validate:
        rt.check_indices(op, ("colptr", colptr, "row", row),
                         [("row", row, grad.size(0)), ("edge_perm", edge_perm if need_dw else None, nnz)],
                         [rt.permutation_rule("edge_perm", edge_perm)] if need_dw else [])
    dx = torch.empty(num_src, k, dtype=grad.dtype, device=device) if need_dx else None
    dw = None
    if need_dw:
        dw = torch.empty((nnz,) if heads == 1 else (nnz, heads), dtype=grad.dtype, device=device)
        if k == 0:
            dw.zero_()
    if num_src == 0 or k == 0:
        if dx is not None:
            dx.zero_()
        return dx, dw
    tensors = [grad] + ([x] if need_dw else []) + ([dx] if need_dx else [])
    vec, cf, group = config(k, grad.dtype, tensors)
    tile = group * vec * cf
    slots = rt.BLOCK // group
    smem = slots * tile * grad.element_size() if need_dx else 0
    t = rt.ctype(grad.dtype)
    name = (f"gar_backward<{t}, {wmode}, {vec}, {cf}, {group}, {rt.cbool(need_dx)}, {rt.cbool(need_dw)}, "
            f"{rt.cbool(argmask)}>")
    family = [f"gar_backward<{t}, {w}, {vec}, {cf}, {group}, {dxf}, {dwf}, {am}>" for w in range(3)
              for dxf, dwf in (("true", "false"), ("false", "true"), ("true", "true")) for am in ("false", "true")]
    rt.launch(FILE, name, device, (num_src,), (rt.BLOCK,), (
        rt.ptr(colptr), rt.ptr(row), rt.ptr(edge_perm), rt.ptr(edge_id), rt.ptr(gather_arg), rt.ptr(values),
        rt.ptr(grad), rt.ptr(x if need_dw else None), rt.ptr(dx), rt.ptr(dw), rt.i64(k), rt.i64(heads), rt.i64(c),
    ), shared_mem=smem, family=family)
    return dx, dw


def instances() -> list[str]:
    """Representative template instances (compiled by the CPU test with nvcc)."""
    names = []
    for t in ("float", "double"):
        for red in range(4):
            for wmode in range(3):
                names.append(f"gar_forward<{t}, {red}, {wmode}, 1, 1, 4>")
                names.append(f"gar_forward<{t}, {red}, {wmode}, 2, 2, 32>")
        for wmode in range(3):
            for dx, dw, am in (("true", "false", "false"), ("true", "true", "false"), ("false", "true", "false"),
                               ("true", "true", "true")):
                names.append(f"gar_backward<{t}, {wmode}, 2, 2, 32, {dx}, {dw}, {am}>")
                names.append(f"gar_backward<{t}, {wmode}, 1, 1, 8, {dx}, {dw}, {am}>")
    return names
