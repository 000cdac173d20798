"""The one place where aggregation backends register and get chosen.

A backend is a named set of op implementations (``aggregate``, ``sddmm``, ``edge_softmax``,
``sampled_aggregate``) with the device types it runs on and whether its results are run-to-run deterministic. ``"reference"`` (pure PyTorch) runs
everywhere and is the CPU path; CUDA kernel backends register themselves from their own modules.

Choice per call: an explicit ``backend=`` name is honoured or refused (never a silent fallback); ``"auto"``
takes the highest-``priority`` backend that has the op, runs on the device, is available and whose
``supports(op, **call)`` accepts the call. With ``deterministic=True`` (the default under
``torch.use_deterministic_algorithms(True)``) only backends deterministic on that device qualify: no float
atomics there, or PyTorch ops only while that flag is on without ``warn_only`` (the reference on CUDA).
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import torch

OPS = ("aggregate", "sddmm", "edge_softmax", "sampled_aggregate")
PUBLIC_NAMES = {"sampled_aggregate": "aggregate"}  # an op's name in messages where a public function runs it


@dataclass(frozen=True)
class Backend:
    """A named implementation of some engine ops.

    Attributes:
        name: what users pass as ``backend=``.
        ops: op name → callable with the reference signature of that op.
        devices: device types it runs on (``{"cpu", "cuda"}`` for the reference).
        deterministic_on: device types on which its results are bitwise identical across runs (no
            floating-point atomics there).
        deterministic_call: optional ``(op, **call) -> bool``: calls it runs on deterministic code wherever it
            runs, although ``deterministic_on`` leaves the device out (e.g. an atomics backend's max/min, or its
            ``sddmm``, run by atomic-free kernels). Same arguments as ``supports``.
        torch_deterministic: built from PyTorch ops only, which ``torch.use_deterministic_algorithms(True)``
            makes deterministic (or makes raise) on every device: deterministic wherever that flag is on.
        is_available: whether its runtime (e.g. CuPy) can be used here.
        priority: order among candidates for ``"auto"`` (higher first).
        supports: optional predicate ``(op, **call) -> bool`` refining which calls it can take under "auto";
            for ``aggregate`` it may look only at the graph, the dtype and shape of ``x``, the rank of
            ``edge_weight`` and whether it needs a gradient, and ``reduce`` (the engine memoises the choice on
            those: :func:`resolve_cached`).
        bind: optional ``(op, **call) -> callable``: an implementation of ``op`` (same signature as
            ``ops[op]``) specialised to what :func:`resolve_cached`'s signature fixes for one graph (for
            ``aggregate``: the dtype and shape of ``x``, ``reduce``, which edge weights), so that a memoised
            call skips the lookups ``ops[op]`` would repeat; None, or a ``bind`` returning None: ``ops[op]``.
    """

    name: str
    ops: Mapping[str, Callable[..., Any]]
    devices: frozenset[str]
    deterministic_on: frozenset[str] = frozenset()
    deterministic_call: Callable[..., bool] | None = field(default=None)
    torch_deterministic: bool = False
    is_available: Callable[[], bool] = lambda: True
    priority: int = 0
    supports: Callable[..., bool] | None = field(default=None)
    bind: Callable[..., Callable[..., Any] | None] | None = field(default=None)


_REGISTRY: dict[str, Backend] = {}
_BY_PRIORITY: list[Backend] = []  # _REGISTRY's values, highest priority first ("auto" walks this)
_default_backend = "auto"  # the process's (set_default_backend)
_block_backend: contextvars.ContextVar[str | None] = contextvars.ContextVar("graphfuse_backend", default=None)
_generation = 0  # bumped by every (un)registration: part of the memo's keys (memo_key)


def register_backend(backend: Backend) -> None:
    """Add (or replace) a backend under ``backend.name`` (not ``"auto"``, nor GAT's ``"fused"``)."""
    if not isinstance(backend, Backend):
        raise TypeError(f"register_backend: backend must be a graphfuse.engine.Backend; got {type(backend).__name__}")
    if not isinstance(backend.name, str) or backend.name in ("", "auto", "fused"):
        raise ValueError(f"register_backend: Backend.name must be a str other than '', 'auto' and 'fused' (names "
                         f"the engine gives a meaning of its own); got {backend.name!r}")
    unknown = set(backend.ops) - set(OPS)
    if unknown:
        raise ValueError(f"register_backend: unknown ops {sorted(unknown)}; valid ops are {list(OPS)}")
    if not all(callable(fn) for fn in backend.ops.values()):
        raise TypeError(f"register_backend: Backend.ops must map op names to callables; got {dict(backend.ops)!r}")
    for field_name in ("devices", "deterministic_on"):
        devices = getattr(backend, field_name)
        if not isinstance(devices, (set, frozenset)) or not all(isinstance(d, str) for d in devices):
            raise TypeError(f"register_backend: Backend.{field_name} must be a set of device types (str), e.g. "
                            f"frozenset({{'cuda'}}); got {devices!r}")
    _REGISTRY[backend.name] = backend
    _registry_changed()


def unregister_backend(name: str) -> None:
    """Remove the backend registered under ``name`` (ValueError if there is none)."""
    if name not in _REGISTRY:
        raise ValueError(f"unregister_backend: unknown backend {name!r}; valid: {registered_backends()}")
    del _REGISTRY[name]
    _registry_changed()


def _registry_changed() -> None:
    """Re-sort "auto"'s candidates and invalidate every memoised choice (memo_key)."""
    global _generation
    _BY_PRIORITY[:] = sorted(_REGISTRY.values(), key=lambda b: -b.priority)
    _generation += 1


def registered_backends() -> list[str]:
    """Names of every registered backend, ``"auto"`` excluded."""
    return sorted(_REGISTRY)


def _check_name(op: str, name: object, arg: str = "backend") -> None:
    """Raise a TypeError naming ``arg`` unless ``name`` is a str (an unhashable one failed in a dict lookup)."""
    if not isinstance(name, str):
        raise TypeError(f"{op}: {arg} must be a backend name (str); got {type(name).__name__}")


def check_backend(owner: str, name: object, arg: str = "backend", extra: tuple[str, ...] = (),
                  device: torch.device | None = None) -> None:
    """Raise unless ``name`` is ``"auto"``, a registered backend's name or one of ``extra``: a TypeError naming
    ``arg`` for a non-str, a ValueError listing the valid names otherwise; with ``device``, also a ValueError
    for a registered backend that does not run there."""
    _check_name(owner, name, arg)
    if name != "auto" and name not in _REGISTRY and name not in extra:
        raise ValueError(f"{owner}: unknown backend {name!r}; valid: {['auto', *extra, *registered_backends()]}")
    if device is not None and name in _REGISTRY:
        _check_device(owner, _REGISTRY[name], device)


def _check_device(op: str, backend: Backend, device: torch.device) -> None:
    if device.type not in backend.devices:
        raise ValueError(
            f"{op}: backend {backend.name!r} runs on {sorted(backend.devices)} tensors; got tensors on {device.type}"
        )


def set_default_backend(name: str) -> None:
    """Backend used when a call passes ``backend=None`` (``"auto"`` unless changed), in every thread (a
    :func:`use_backend` block overrides it in its own thread)."""
    global _default_backend
    check_backend("set_default_backend", name, "name")
    _default_backend = name


def get_default_backend() -> str:
    """The backend a call with ``backend=None`` asks for here: the enclosing :func:`use_backend` block's, else the
    process's."""
    return _block_backend.get() or _default_backend


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Context manager: make ``name`` the default backend inside the block. The setting is per thread (and
    asyncio task), as ``torch.no_grad``: another thread's calls keep theirs (the block had set the process's
    default, which threads' overlapping blocks then restored out of order)."""
    check_backend("use_backend", name, "name")
    token = _block_backend.set(name)
    try:
        yield
    finally:
        _block_backend.reset(token)


def resolve(
    op: str, device: torch.device, backend: str | None = None, deterministic: bool | None = None, **call: Any
) -> Callable[..., Any]:
    """The implementation of ``op`` to run for tensors on ``device``.

    Raises:
        ValueError: unknown backend, a backend without ``op``, or one that cannot run on ``device``.
        RuntimeError: a backend whose runtime is missing here (e.g. CuPy not installed).
    """
    return _choose(op, device, backend, deterministic, **call).ops[op]


def _choose(op: str, device: torch.device, backend: str | None, deterministic: bool | None, **call: Any) -> Backend:
    """The backend that runs ``op`` (see :func:`resolve`)."""
    owner = PUBLIC_NAMES.get(op, op)  # what the messages call the op: the public function the caller called
    name = get_default_backend() if backend is None else backend
    _check_name(owner, name)
    # torch.use_deterministic_algorithms(True, warn_only=True), e.g. Lightning's deterministic="warn", with no
    # deterministic= of the call's own: a call no deterministic backend runs warns and runs, as PyTorch's ops do
    warn_only = deterministic is None and torch.is_deterministic_algorithms_warn_only_enabled()
    if deterministic is None:
        deterministic = torch.are_deterministic_algorithms_enabled()
    elif deterministic.__class__ is not bool:
        _deterministic_type_error(owner, deterministic)
    if name == "auto":
        for strict in (True, False) if deterministic else (False,):
            for candidate in _BY_PRIORITY:
                if (
                    op in candidate.ops
                    and device.type in candidate.devices
                    and (not strict or _deterministic(candidate, device, op, call))
                    and candidate.is_available()
                    and (candidate.supports is None or candidate.supports(op, **call))
                ):
                    if deterministic and not strict:
                        _warn_nondeterministic(owner, candidate.name, device)
                    return candidate
            if not warn_only:
                break
        what = "deterministically (deterministic results were asked for) " if deterministic else ""
        raise ValueError(f"{owner}: no registered backend runs this call {what}on {device.type} tensors")
    if name not in _REGISTRY:
        raise ValueError(f"{owner}: unknown backend {name!r}; valid: {['auto', *registered_backends()]}")
    chosen = _REGISTRY[name]
    if op not in chosen.ops:
        raise ValueError(f"{owner}: backend {name!r} does not implement {op}; it implements {sorted(chosen.ops)}")
    _check_device(owner, chosen, device)
    if deterministic and not _deterministic(chosen, device, op, call):
        if not warn_only:
            raise ValueError(
                f"{owner}: backend {name!r} is not deterministic on {device.type} for this call (it uses atomics "
                "there), but deterministic results were asked for"
            )
        _warn_nondeterministic(owner, name, device)
    if not chosen.is_available():
        raise RuntimeError(
            f"{owner}: backend {name!r} is not available here (install graphfuse[cuda12] or graphfuse[cuda13] "
            "for the CuPy kernels)"
        )
    return chosen


def _warn_nondeterministic(op: str, name: str, device: torch.device) -> None:
    warnings.warn(f"{op}: no deterministic backend runs this call on {device.type}; running {name!r}, whose results "
                  "may vary between runs (torch.use_deterministic_algorithms(True, warn_only=True) is set)",
                  stacklevel=4)


def _deterministic_type_error(op: str, deterministic: object) -> None:
    raise TypeError(f"{op}: deterministic must be None or a bool; got {deterministic!r}")


def _deterministic(backend: Backend, device: torch.device, op: str, call: Mapping[str, Any]) -> bool:
    """Whether ``backend`` gives bitwise-reproducible results for this call on ``device`` as PyTorch is set now."""
    return device.type in backend.deterministic_on or (  # warn_only: PyTorch may still run atomics
        backend.torch_deterministic and torch.are_deterministic_algorithms_enabled()
        and not torch.is_deterministic_algorithms_warn_only_enabled()) or (
        backend.deterministic_call is not None and backend.deterministic_call(op, **call))


def memo_key(op: str, backend: str | None, deterministic: bool | None, signature: tuple) -> tuple:
    """The key under which :func:`resolve_cached` memoises a choice for one graph: ``signature`` (what the call's
    tensors and arguments decide; see there) and what else decides it: the registry's generation, the backend
    asked for (for None, the default one now), the ``deterministic`` asked for and torch's two determinism flags.

    Raises:
        TypeError: ``backend`` is not a str, or ``deterministic`` neither None nor a bool (before the key is hashed:
            an unhashable backend failed in the lookup, and ``deterministic=1`` would find True's entry).
    """
    if backend is None:
        backend = _block_backend.get() or _default_backend
    elif backend.__class__ is not str:
        _check_name(PUBLIC_NAMES.get(op, op), backend)
    if deterministic is not None and deterministic.__class__ is not bool:
        _deterministic_type_error(PUBLIC_NAMES.get(op, op), deterministic)
    return (signature, op, _generation, backend, deterministic, torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled())


def resolve_cached(cache: dict, key: tuple, op: str, device: torch.device, backend: str | None = None,
                   deterministic: bool | None = None, *, graph: Any, x: torch.Tensor,
                   edge_weight: torch.Tensor | None, reduce: str) -> Callable[..., Any]:
    """:func:`resolve` of an aggregation op, memoised in ``cache`` (one per graph) under ``key``
    (:func:`memo_key`). The engine's ops give as the key's signature ``x``'s dtype and shape, the reduce and which
    edge weights (none, the graph's own, or others of a given rank), and whether they need a gradient, so
    ``supports`` predicates and ``bind`` must depend on nothing else. What is memoised is the chosen backend's
    ``bind(op, ...)`` where it has one (an implementation with this signature's lookups done), else ``ops[op]``.
    On a small graph the walk over the candidates costs more host time than the kernel; the memo turns it into
    one dictionary lookup."""
    impl = cache.get(key)
    if impl is None:
        chosen = _choose(op, device, backend, deterministic, graph=graph, x=x, edge_weight=edge_weight, reduce=reduce)
        bound = chosen.bind and chosen.bind(op, graph=graph, x=x, edge_weight=edge_weight, reduce=reduce)
        impl = cache[key] = bound or chosen.ops[op]
    return impl
