"""The graph every layer, sampler and kernel works on.

A :class:`Graph` is a COO edge list plus lazily built, cached derived formats: CSR by target (what
aggregation into targets reads), CSC by source (what the backward pass reads), the CSR→CSC edge permutation
and degrees. A graph's edges are fixed once built (only ``edge_weight`` may be replaced): its sizes and
``edge_index`` cannot be reassigned, and an in-place change of the ``edge_index`` tensor (which the graph shares
with the caller when it is int64 and contiguous) is refused at the next use of the graph's caches (found through
the tensor's version counter, as autograd finds them: a write through ``.data``, ``.numpy()`` or DLPack, or to an
inference tensor, bumps no counter and goes unnoticed, leaving the caches stale); everything
derived from it (formats, normalised graphs of the processing stage) is cached on it, so full-graph training
builds each once.

Shapes:
    edge_index: (2, E) int64, row 0 = source in [0, num_src), row 1 = target in [0, num_dst).
    edge_weight: (E,) floating point, or None (every edge weighs 1).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import torch
from torch import Tensor

from graphfuse.checks import check_bools, is_int
from graphfuse.graph.convert import _coo_to_csc, _coo_to_csr


class CSR(NamedTuple):
    """Rows are targets. ``perm[i]`` is the COO edge id of the i-th CSR entry; ``row`` the target of each."""

    rowptr: Tensor
    col: Tensor
    perm: Tensor
    row: Tensor


class CSC(NamedTuple):
    """Columns are sources. ``perm[i]`` is the COO edge id of the i-th CSC entry; ``col`` the source of each."""

    colptr: Tensor
    row: Tensor
    perm: Tensor
    col: Tensor


def _check_index(edge_index: Any) -> Tensor:
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"Graph: edge_index must be a torch.Tensor; got {type(edge_index).__name__}")
    if edge_index.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"Graph: edge_index must have an integer dtype (int64 or int32); got {edge_index.dtype}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"Graph: edge_index must have shape (2, E); got {tuple(edge_index.shape)}")
    return edge_index.long().contiguous()


def _movable(value: Any) -> bool:
    """Whether a cached value is a format or a processed graph (a tensor, a tuple of tensors such as CSR/CSC, or a
    Graph), which :meth:`Graph.to` moves and pickling keeps, rather than a device-bound object."""
    if isinstance(value, tuple):
        return all(isinstance(v, Tensor) for v in value)
    return isinstance(value, (Tensor, Graph))


def _tuple_like(value: tuple, items: list) -> tuple:
    """``items`` as a tuple of ``value``'s type: a NamedTuple (CSR, CSC) takes them as fields, a plain tuple (a
    user's cache entry) as one iterable."""
    return type(value)(*items) if hasattr(type(value), "_fields") else type(value)(items)


def _size(name: str, value: object) -> int | None:
    """A node count as an int: a Python or NumPy integer, or a 0-d integer tensor (PyG's ``Data.num_nodes`` can be
    one, and ``x.size(0)`` is one under ``torch.jit.trace``)."""
    if isinstance(value, Tensor) and value.dim() == 0 and not value.is_floating_point() and not value.is_complex() \
            and value.dtype != torch.bool:
        value = int(value)
    if value is not None and (not is_int(value) or value < 0):
        raise ValueError(f"Graph: {name} must be a non-negative int; got {value!r}")
    return None if value is None else int(value)


def _version(t: Tensor) -> int | None:
    """``t``'s version counter (bumped by every in-place change), None for an inference tensor (it has none)."""
    return None if t.is_inference() else t._version


_FIXED = frozenset({"edge_index", "num_src", "num_dst", "num_edges", "device"})


def _check_range(name: str, index: Tensor, bound: int) -> None:
    if index.numel() == 0:
        return
    lo, hi = int(index.min()), int(index.max())
    if lo < 0 or hi >= bound:
        raise ValueError(f"Graph: {name} indices must lie in [0, {bound}); got values in [{lo}, {hi}]")


class Graph:
    """A directed graph (or bipartite block) in COO form with cached CSR/CSC views.

    Args:
        edge_index: (2, E) integer tensor; row 0 = source, row 1 = target.
        num_nodes: number of nodes of a square graph. Defaults to ``max(edge_index) + 1``.
        edge_weight: optional (E,) floating-point weights.
        num_src, num_dst: sizes of a bipartite block (sources, targets); give both instead of ``num_nodes``.
        validate: check index ranges (device syncs); disable only for indices known to be valid.

    Example:
        >>> g = Graph(torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=3)
        >>> g.csr.rowptr
        tensor([0, 1, 2, 3])
    """

    def __init__(
        self,
        edge_index: Tensor,
        num_nodes: int | None = None,
        edge_weight: Tensor | None = None,
        *,
        num_src: int | None = None,
        num_dst: int | None = None,
        validate: bool = True,
    ) -> None:
        edge_index = _check_index(edge_index)
        check_bools("Graph", validate=validate)
        if num_nodes is not None and (num_src is not None or num_dst is not None):
            raise ValueError("Graph: give either num_nodes or (num_src, num_dst), not both")
        if (num_src is None) != (num_dst is None):
            raise ValueError(f"Graph: num_src and num_dst go together; got num_src={num_src}, num_dst={num_dst}")
        num_nodes, num_src, num_dst = (_size(name, value) for name, value in
                                       (("num_nodes", num_nodes), ("num_src", num_src), ("num_dst", num_dst)))
        if num_src is None:
            if num_nodes is None:
                num_nodes = int(edge_index.max()) + 1 if edge_index.numel() else 0
            num_src = num_dst = num_nodes
        if validate:
            _check_range("source (edge_index[0])", edge_index[0], num_src)
            _check_range("target (edge_index[1])", edge_index[1], num_dst)
        self._edge_index = edge_index
        self.num_src = num_src
        self.num_dst = num_dst
        self.num_edges: int = edge_index.size(1)
        self.device: torch.device = edge_index.device
        self._edge_version = _version(edge_index)  # see cached()
        self._cache: dict[Any, Any] = {}
        self._weight_stamps: dict[Any, tuple[Tensor | None, int | None]] = {}  # see cached(weighted=True)
        self.edge_weight = edge_weight  # checked by the setter

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FIXED and (name in self.__dict__ or name == "edge_index"):
            raise AttributeError(f"Graph: {name} cannot be changed once the graph is built (its cached formats derive "
                                 "from it); build a new Graph (only edge_weight may be replaced)")
        object.__setattr__(self, name, value)

    @property
    def edge_index(self) -> Tensor:
        """(2, E) int64 COO edges (row 0 = source, row 1 = target); fixed once built (see :meth:`cached`)."""
        self._check_edges_unchanged()
        return self._edge_index

    def _check_edges_unchanged(self) -> None:
        if self._edge_version is not None and self._edge_index._version != self._edge_version:
            raise ValueError("Graph: edge_index was changed in place after the graph was built; its cached formats "
                             "and degrees describe the old edges: build a new Graph from the new edge_index")

    @property
    def edge_weight(self) -> Tensor | None:
        """(E,) floating-point weights on the graph's device, or None (every edge weighs 1). May be set (or set to
        None), with the constructor's checks; what was cached from the old weights is rebuilt (see
        :meth:`cached`)."""
        return self._edge_weight

    @edge_weight.setter
    def edge_weight(self, edge_weight: Tensor | None) -> None:
        if edge_weight is not None:
            if not isinstance(edge_weight, Tensor) or not edge_weight.is_floating_point():
                raise TypeError(
                    "Graph: edge_weight must be a floating-point torch.Tensor; got "
                    f"{getattr(edge_weight, 'dtype', type(edge_weight).__name__)}"
                )
            if edge_weight.shape != (self.num_edges,):
                raise ValueError(
                    f"Graph: edge_weight must have shape (E={self.num_edges},); got {tuple(edge_weight.shape)}"
                )
            if edge_weight.device != self.device:
                raise ValueError(f"Graph: edge_weight is on {edge_weight.device} but edge_index is on {self.device}")
        self._edge_weight = edge_weight

    # ------------------------------------------------------------------ sizes
    @property
    def is_bipartite(self) -> bool:
        return self.num_src != self.num_dst

    @property
    def num_nodes(self) -> int:
        if self.is_bipartite:
            raise ValueError(
                f"Graph: num_nodes is undefined for a bipartite block (num_src={self.num_src}, "
                f"num_dst={self.num_dst}); use num_src / num_dst"
            )
        return self.num_dst

    # ------------------------------------------------------------------ cache
    def cached(self, key: Any, build: Callable[[], Any], *, weighted: bool = False) -> Any:
        """Return ``self``'s cached value for ``key``, building it with ``build()`` on first use.

        The build runs outside ``torch.inference_mode()``: a format or processed graph first built during an
        inference pass is also used by later training, which cannot save inference tensors for backward.
        ``weighted``: the value depends on ``edge_weight``'s values, and is rebuilt when ``edge_weight`` was
        replaced (or set or removed) or changed in place since (its version counter). Changes that counter does
        not see go unseen: in-place changes of an inference tensor (it has none) and writes through ``.data`` or
        a NumPy view (``.numpy()``); replace the weights, or change them with tensor operations, instead.

        Raises:
            ValueError: ``edge_index`` was changed in place since the graph was built (every cached value could
                be stale, and the index ranges were checked on the old values).
            RuntimeError: ``key`` would be built during CUDA graph capture: its tensors would only be written at
                replay (an eager call before it read unwritten memory), and builds that read sizes on the host
                cannot be captured; run the call once before capturing (a warm-up, as CUDA graphs need anyway).
        """
        version = self._edge_version  # inline: on a small graph the host time of every call is what it costs
        if version is not None and self._edge_index._version != version:
            self._check_edges_unchanged()
        if weighted:  # one stamp, written only when it changed: on every weighted aggregation's path
            now = self._weight_stamp()
            old = self._weight_stamps.get(key)
            if old is None or old[0] is not now[0] or old[1] != now[1]:
                if old is not None:  # built from other weights, or before an in-place change
                    self._cache.pop(key, None)
                self._weight_stamps[key] = now
        if key not in self._cache:
            if self.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                raise RuntimeError(f"Graph: {key!r} of {self} would be built during CUDA graph capture; call the op "
                                   "once on this graph before capturing it (a warm-up)")
            with torch.inference_mode(False):
                self._cache[key] = build()
        return self._cache[key]

    def memo(self, key: Any) -> Any:
        """The value cached under ``key``, or None when there is none: :meth:`cached`'s lookup (its check that
        ``edge_index`` is unchanged included) without the build, for entries that are not ``weighted``."""
        self._check_edges_unchanged()
        return self._cache.get(key)

    def _weight_stamp(self) -> tuple[Tensor | None, int | None]:
        """What a weighted cache entry was built from: the weight tensor itself (identity, not a copy) and its
        version."""
        w = self.edge_weight
        return w, None if w is None or w.is_inference() else w._version

    def _stamp_current(self, key: Any) -> bool:
        """Whether the weighted entry ``key`` (if stamped) was built from the weights the graph holds now."""
        old = self._weight_stamps.get(key)
        now = self._weight_stamp()
        return old is None or (old[0] is now[0] and old[1] == now[1])

    @property
    def csr(self) -> CSR:
        """CSR with rows = targets (aggregation into targets reads this)."""

        def build() -> CSR:
            return CSR(*_coo_to_csr(self.edge_index, self.num_dst))

        return self.cached("csr", build)

    @property
    def csc(self) -> CSC:
        """CSC with columns = sources (the transpose; backward passes read this)."""

        def build() -> CSC:
            return CSC(*_coo_to_csc(self.edge_index, self.num_src, self.num_dst))

        return self.cached("csc", build)

    @property
    def csr_to_csc(self) -> Tensor:
        """(E,) permutation: ``values_in_csc_order = values_in_csr_order[csr_to_csc]``."""

        def build() -> Tensor:
            inverse_csr = torch.empty_like(self.csr.perm)
            inverse_csr[self.csr.perm] = torch.arange(self.num_edges, device=self.device)
            return inverse_csr[self.csc.perm]

        return self.cached("csr_to_csc", build)

    @property
    def in_degree(self) -> Tensor:
        """(num_dst,) int64 number of edges into each target."""
        return self.cached("in_degree", lambda: self.csr.rowptr.diff())

    @property
    def out_degree(self) -> Tensor:
        """(num_src,) int64 number of edges out of each source."""
        return self.cached("out_degree", lambda: self.csc.colptr.diff())

    # ------------------------------------------------------------------ conversion
    @torch.inference_mode(False)  # a graph moved during an inference pass may serve training later (see cached)
    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Graph":
        """The same graph on ``device``; ``self`` when already there. Cached formats move along."""
        if not isinstance(device, (torch.device, str, int)) or isinstance(device, bool):
            hint = " (set graph.edge_weight to change the weights' dtype)" if isinstance(device, torch.dtype) else ""
            raise TypeError(f"Graph.to: device must be a torch.device, str or int; got {device!r}{hint}")
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if self.device == device:
            return self
        moved = Graph(
            self.edge_index.to(device, non_blocking=non_blocking),
            edge_weight=None if self.edge_weight is None else self.edge_weight.to(device, non_blocking=non_blocking),
            num_src=self.num_src,
            num_dst=self.num_dst,
            validate=False,
        )
        for key, value in self._portable().items():  # the rest is rebuilt on the new device when needed
            if key in self._weight_stamps:  # stamped with the moved weights
                moved._weight_stamps[key] = moved._weight_stamp()
            moved._cache[key] = (_tuple_like(value, [v.to(device, non_blocking=non_blocking) for v in value])
                                 if isinstance(value, tuple) else value.to(device, non_blocking=non_blocking))
        return moved

    def reweighted(self, edge_weight: Tensor | None) -> "Graph":
        """A Graph of the same edges with ``edge_weight`` instead of this one's (None: unweighted), checked as the
        constructor checks it; the edges are not checked again, and nothing cached on ``self`` carries over."""
        return Graph(self.edge_index, edge_weight=edge_weight, num_src=self.num_src, num_dst=self.num_dst,
                     validate=False)

    def _portable(self) -> dict[Any, Any]:
        """The cached entries that :meth:`to` moves and pickling keeps: formats (tensors, tuples of tensors such
        as CSR/CSC) and cached graphs, a weighted one only while it is current; not device-bound objects (kernel
        plans, row schedules, the engine's dispatch memo: state of this process)."""
        return {key: value for key, value in self._cache.items() if _movable(value) and self._stamp_current(key)}

    def __getstate__(self) -> dict[str, Any]:
        """Pickling (and ``copy.deepcopy``) keeps :meth:`_portable`'s entries; a loaded tensor's version counter
        starts afresh, so the weighted ones are stamped again on load. Refused, as every other use of the caches,
        after an in-place change of ``edge_index`` (the copy's fresh counter would have hidden it)."""
        self._check_edges_unchanged()
        state = self.__dict__.copy()
        state["_cache"] = self._portable()
        state["_weight_stamps"] = [key for key in self._weight_stamps if key in state["_cache"]]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        weighted = state.pop("_weight_stamps")
        self.__dict__.update(state)
        self._edge_version = _version(self._edge_index)  # a loaded tensor's counter starts afresh
        self._weight_stamps = {key: self._weight_stamp() for key in weighted}

    @classmethod
    def from_pyg(cls, data: Any) -> "Graph":
        """Build from a ``torch_geometric.data.Data``: ``edge_index``, ``num_nodes`` and, when present, a 1-D
        ``edge_weight`` (or a 1-D floating-point ``edge_attr``; integer ones, such as edge types, are not
        weights)."""
        if not all(hasattr(data, key) for key in ("edge_index", "num_nodes")):
            raise TypeError(f"Graph.from_pyg: data must be a torch_geometric.data.Data (with edge_index and "
                            f"num_nodes); got {type(data).__name__}")
        weight = getattr(data, "edge_weight", None)
        if weight is None:
            attr = getattr(data, "edge_attr", None)
            weight = attr if isinstance(attr, Tensor) and attr.dim() == 1 and attr.is_floating_point() else None
        return cls(data.edge_index, num_nodes=data.num_nodes, edge_weight=weight)

    def to_pyg(self) -> Any:
        """A ``torch_geometric.data.Data`` holding ``edge_index``, ``num_nodes`` and ``edge_weight`` (of a square
        graph: a Data holds one node set)."""
        if self.is_bipartite:
            raise ValueError(f"to_pyg: a Data holds one node set, and this graph is a bipartite block ({self}); "
                             "give it num_nodes (Graph(edge_index, num_nodes=...)) to read both sides as one set")
        from torch_geometric.data import Data

        data = Data(edge_index=self.edge_index, num_nodes=self.num_nodes)
        if self.edge_weight is not None:
            data.edge_weight = self.edge_weight
        return data

    def __repr__(self) -> str:
        size = f"num_nodes={self.num_dst}" if not self.is_bipartite else f"num_src={self.num_src}, num_dst={self.num_dst}"
        weighted = ", weighted" if self.edge_weight is not None else ""
        return f"Graph({size}, num_edges={self.num_edges}{weighted}, device={self.device})"
