"""Launcher of fused GAS (gas.cu): edge-parallel aggregation over unsorted COO with atomic adds.

Needs no CSR/CSC. Results are run-to-run nondeterministic (float atomics); only sum is computed here (mean
is a sum divided by the in-degree by the caller; max/min are not edge-parallel operations with an argmax).

Shapes:
    src, dst: (E,) int64; x: (num_src, K); values: (E,) or (E, H) in COO order; self_weight: (num_self,);
    out: (num_dst, K); dx: (num_src, K); dw: (E,) or (E, H).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import runtime as rt

FILE = "gas.cu"
MAX_BLOCKS = 1 << 20


def config(k: int, c: int, dtype: torch.dtype, tensors: list[Tensor]) -> tuple[int, int]:
    """(VEC, GROUP): GROUP lanes per edge (fuseGNN's T / m edges per block for K < 32), VEC dividing C."""
    if k < 32:
        return 1, rt.next_pow2(k)
    return rt.vector_width(k, dtype, tensors, divides=c), 32


def _common(op: str, src: Tensor, dst: Tensor, x: Tensor, values: Tensor | None, heads: int,
            self_weight: Tensor | None, num_self: int, x_name: str = "x") -> tuple[int, int]:
    """Check the edges, weights and devices around the features ``x`` (named ``x_name``: gas_backward's is
    ``grad``); returns (weight mode, C)."""
    rt.check_tensor(op, "src", src, dtypes=(torch.int64,), ndim=1)
    e = src.numel()
    rt.check_tensor(op, "dst", dst, dtypes=(torch.int64,), ndim=1, shape=(e,),
                    shape_text=f"(E={e},) like src")
    c = rt.check_heads(op, x.size(1), heads)
    wmode = 0
    if values is not None:
        if heads == 1:
            rt.check_tensor(op, "values", values, dtypes=(x.dtype,), ndim=1, shape=(e,),
                            shape_text=f"(E={e},)")
            wmode = 1
        else:
            rt.check_tensor(op, "values", values, dtypes=(x.dtype,), ndim=2, shape=(e, heads),
                            shape_text=f"(E={e}, heads={heads})")
            wmode = 2
    if self_weight is not None:
        rt.check_tensor(op, "self_weight", self_weight, dtypes=(x.dtype,), ndim=1,
                        shape=(num_self,), shape_text=f"(num_self={num_self},)")
    rt.check_devices(op, {x_name: x, "src": src, "dst": dst, "values": values, "self_weight": self_weight})
    return wmode, c


def _family(t: str, vec: int, group: int) -> list[str]:
    names = [f"gas_forward<{t}, {w}, {vec}, {group}>" for w in range(3)]
    return names + [f"gas_backward<{t}, {w}, {vec}, {group}, {dx}, {dw}>" for w in range(3)
                    for dx, dw in (("true", "false"), ("false", "true"), ("true", "true"))]


def gas_forward(
    src: Tensor,
    dst: Tensor,
    x: Tensor,
    values: Tensor | None = None,
    *,
    num_dst: int,
    heads: int = 1,
    self_loops: bool = False,
    self_weight: Tensor | None = None,
    validate: bool = True,
) -> Tensor:
    """``out[dst_e] += values[e] * x[src_e]`` over all edges (atomics), plus ``self_weight[i] * x[i]`` for
    i < num_dst when ``self_loops`` or ``self_weight`` is given (weight 1 when ``self_weight`` is None; needs
    num_src >= num_dst).
    ``validate``: check the index values (one host sync; see :func:`graphfuse.kernels.runtime.check_indices`).
    """
    op = "gas_forward"
    rt.check_tensor(op, "x", x, dtypes=rt.FLOAT_DTYPES, ndim=2)
    if not rt.is_int(num_dst) or num_dst < 0:
        raise ValueError(f"{op}: num_dst must be a non-negative int; got {num_dst!r}")
    num_dst = int(num_dst)
    num_self = num_dst if (self_loops or self_weight is not None) else 0
    if num_self > x.size(0):
        raise ValueError(f"{op}: self loops need x with at least num_dst={num_dst} rows; got {x.size(0)}")
    wmode, c = _common(op, src, dst, x, values, heads, self_weight, num_self)
    if validate:
        rt.check_indices(op, None, [("src", src, x.size(0)), ("dst", dst, num_dst)])
    k = x.size(1)
    out = torch.zeros(num_dst, k, dtype=x.dtype, device=x.device)
    total = src.numel() + num_self
    if total == 0 or k == 0:
        return out
    vec, group = config(k, c, x.dtype, [x])
    slots = rt.BLOCK // group
    name = f"gas_forward<{rt.ctype(x.dtype)}, {wmode}, {vec}, {group}>"
    rt.launch(FILE, name, x.device, (min(MAX_BLOCKS, -(-total // slots)),), (rt.BLOCK,), (
        rt.ptr(src), rt.ptr(dst), rt.ptr(values), rt.ptr(x), rt.ptr(out), rt.ptr(self_weight),
        rt.i64(src.numel()), rt.i64(num_self), rt.i64(k), rt.i64(heads), rt.i64(c),
    ), family=_family(rt.ctype(x.dtype), vec, group))
    return out


def gas_backward(
    src: Tensor,
    dst: Tensor,
    grad: Tensor,
    x: Tensor | None,
    values: Tensor | None = None,
    *,
    num_src: int,
    heads: int = 1,
    need_dx: bool = True,
    need_dw: bool = False,
    self_loops: bool = False,
    self_weight: Tensor | None = None,
    validate: bool = True,
) -> tuple[Tensor | None, Tensor | None]:
    """``dx[src_e] += values[e] * grad[dst_e]`` (atomics) and ``dw[e] = <grad[dst_e], x[src_e]>`` per head.

    Returns ``(dx, dw)``: dx (num_src, K) or None, dw (E,) for heads == 1 else (E, heads), or None.
    ``validate``: check the index values (one host sync; see :func:`graphfuse.kernels.runtime.check_indices`).
    """
    op = "gas_backward"
    rt.check_tensor(op, "grad", grad, dtypes=rt.FLOAT_DTYPES, ndim=2)
    if not (need_dx or need_dw):
        raise ValueError(f"{op}: ask for at least one of need_dx, need_dw")
    if not rt.is_int(num_src) or num_src < 0:
        raise ValueError(f"{op}: num_src must be a non-negative int; got {num_src!r}")
    num_src = int(num_src)
    k = grad.size(1)
    num_self = grad.size(0) if (self_loops or self_weight is not None) else 0
    if num_self > num_src:
        raise ValueError(f"{op}: self loops need num_src >= num_dst={grad.size(0)}; got num_src={num_src}")
    if need_dw:
        rt.check_tensor(op, "x", x, dtypes=(grad.dtype,), ndim=2, shape=(num_src, k),
                        shape_text=f"(num_src={num_src}, K={k})")
        rt.check_devices(op, {"grad": grad, "x": x})
    wmode, c = _common(op, src, dst, grad, values, heads, self_weight, num_self, "grad")
    if validate:
        rt.check_indices(op, None, [("src", src, num_src), ("dst", dst, grad.size(0))])
    e = src.numel()
    dx = torch.zeros(num_src, k, dtype=grad.dtype, device=grad.device) if need_dx else None
    dw = None
    if need_dw:
        dw = torch.zeros((e,) if heads == 1 else (e, heads), dtype=grad.dtype, device=grad.device)
    total = e + (num_self if need_dx else 0)
    if total == 0 or k == 0:
        return dx, dw
    vec, group = config(k, c, grad.dtype, [grad] + ([x] if need_dw else []))
    slots = rt.BLOCK // group
    name = (f"gas_backward<{rt.ctype(grad.dtype)}, {wmode}, {vec}, {group}, {rt.cbool(need_dx)}, "
            f"{rt.cbool(need_dw)}>")
    rt.launch(FILE, name, grad.device, (min(MAX_BLOCKS, -(-total // slots)),), (rt.BLOCK,), (
        rt.ptr(src), rt.ptr(dst), rt.ptr(values), rt.ptr(grad), rt.ptr(x if need_dw else None), rt.ptr(dx),
        rt.ptr(dw), rt.ptr(self_weight), rt.i64(e), rt.i64(num_self), rt.i64(k), rt.i64(heads), rt.i64(c),
    ), family=_family(rt.ctype(grad.dtype), vec, group))
    return dx, dw


def instances() -> list[str]:
    """Representative template instances (compiled by the CPU test with nvcc)."""
    names = []
    for t in ("float", "double"):
        for wmode in range(3):
            names.append(f"gas_forward<{t}, {wmode}, 1, 4>")
            names.append(f"gas_forward<{t}, {wmode}, 2, 32>")
            for dx, dw in (("true", "false"), ("false", "true"), ("true", "true")):
                names.append(f"gas_backward<{t}, {wmode}, 2, 32, {dx}, {dw}>")
                names.append(f"gas_backward<{t}, {wmode}, 1, 8, {dx}, {dw}>")
    return names
