"""CuPy kernel runtime: lazy NVRTC compilation, a per-device cache, launches on PyTorch's current stream.

Kernel sources are the real ``.cu`` files beside this module. A launcher asks for one template instance by
its C++ name expression (``"hp_spmm<float, true, false, 4, 1, 32>"``); the first request on a device compiles
it with ``cupy.RawModule(code=..., name_expressions=[...])`` (CuPy also keeps its on-disk cache), later
requests hit the in-process cache. Tensors are passed zero-copy as raw device pointers; every integer
kernel argument is 64-bit (``long long``) so that offsets such as ``row * K`` never overflow, and every
kernel parameter is 8 bytes (pointer, ``long long`` or ``double``), which lets :func:`launch` pack them into a
reused parameter block and call ``cuLaunchKernel`` directly (:class:`Kernel`).

CuPy is imported lazily: importing this module (and ``graphfuse.kernels``) works without CuPy or CUDA.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import numbers
import re
import struct
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

KERNEL_DIR = Path(__file__).resolve().parent
COMPILE_OPTIONS = ("--std=c++17",)
BLOCK = 256

_lock = threading.Lock()
_functions: dict[tuple[int, str, str], Any] = {}


def _cupy() -> Any:
    try:
        import cupy
    except ImportError as err:  # pragma: no cover - depends on the machine
        raise RuntimeError(
            "graphfuse.kernels needs CuPy: install graphfuse[cuda12] or graphfuse[cuda13]"
        ) from err
    return cupy


@functools.cache
def is_available() -> bool:
    """True when CuPy imports and a CUDA device is visible (the kernel backends' availability test)."""
    if not torch.cuda.is_available():
        return False
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - any CuPy/driver failure means "not available"
        return False


_INCLUDE = re.compile(r'^#include "([\w.]+\.cuh)"[ \t]*$', re.MULTILINE)


@functools.cache
def source(filename: str) -> str:
    """The text of kernels/<filename> with its ``#include "x.cuh"`` headers (common.cuh, radix_sort.cuh)
    inlined, each once, at its first include (NVRTC needs no include path, and CuPy's cache key, computed from
    the source text, changes whenever a header does)."""
    seen: set[str] = set()

    def inline(match: re.Match) -> str:
        name = match.group(1)
        if name in seen:
            return ""
        seen.add(name)
        return _INCLUDE.sub(inline, (KERNEL_DIR / name).read_text().replace("#pragma once", ""))

    return _INCLUDE.sub(inline, (KERNEL_DIR / filename).read_text())


def kernel_files() -> list[Path]:
    """Every ``.cu`` file of the package (the CPU compile test walks these)."""
    return sorted(KERNEL_DIR.glob("*.cu"))


def get_function(filename: str, name: str, index: int, family: Sequence[str] = ()) -> Any:
    """The compiled template instance ``name`` of ``filename`` on device ``index`` (cached).

    ``family``: sibling instances compiled in the same NVRTC call (one front-end pass for all of them;
    a launcher passes the instances that differ from ``name`` only in cheap flags such as the reduce op).
    """
    key = (index, filename, name)
    fn = _functions.get(key)
    if fn is None:
        cp = _cupy()
        names = [name] + [n for n in dict.fromkeys(family) if n != name]
        with _lock, cp.cuda.Device(index):
            fn = _functions.get(key)
            if fn is None:
                module = cp.RawModule(code=source(filename), options=COMPILE_OPTIONS, name_expressions=names)
                for n in names:
                    # RawKernel.kernel: the loaded cupy.cuda.function.Function (its .ptr is the CUfunction)
                    _functions[(index, filename, n)] = module.get_function(n).kernel
                fn = _functions[key]
    return fn


def device_index(device: torch.device) -> int:
    """The CUDA device ordinal of ``device`` (the current device for a bare ``torch.device("cuda")``)."""
    return device.index if device.index is not None else torch.cuda.current_device()


def _stream_of(index: int) -> int:
    return torch.cuda.current_stream(index).cuda_stream


# The handle of PyTorch's current stream on a device: its raw-stream query where this build has one (CUDA
# builds), a stream object's handle otherwise. Looked up once: it is on every launch's path.
_current_stream_ptr = getattr(torch._C, "_cuda_getCurrentRawStream", _stream_of)


def current_stream(device: torch.device) -> int:
    """The handle of PyTorch's current stream on ``device`` (what kernels launch on)."""
    return _current_stream_ptr(device_index(device))


class _ArgBuffer(threading.local):
    """Per-thread parameter block for ``cuLaunchKernel``: ``MAX_ARGS`` 8-byte slots and the array of their
    addresses (the driver copies the values at launch, so one block per thread is reused for every call)."""

    def __init__(self) -> None:
        self.values = (ctypes.c_int64 * MAX_ARGS)()
        base = ctypes.addressof(self.values)
        self.pointers = (ctypes.c_void_p * MAX_ARGS)(*[base + 8 * i for i in range(MAX_ARGS)])
        self.address = ctypes.addressof(self.pointers)


MAX_ARGS = 32
_args = _ArgBuffer()
_INTS = [struct.Struct(f"{n}q") for n in range(MAX_ARGS + 1)]  # the all-integer layouts, by argument count


def _pack(args: Sequence[int | float]) -> int:
    """Write ``args`` (ints as ``long long``, floats as ``double``: every kernel parameter is 8 bytes) into the
    thread's parameter block; returns the address of its pointer array."""
    n = len(args)
    if n > MAX_ARGS:
        raise ValueError(f"launch: at most {MAX_ARGS} kernel arguments; got {n}")
    try:
        _INTS[n].pack_into(_args.values, 0, *args)
    except struct.error:  # a float among the ints ('q' refuses floats rather than truncating them)
        fmt = "".join("d" if isinstance(a, float) else "q" for a in args)
        struct.pack_into(fmt, _args.values, 0, *args)
    return _args.address


def is_int(value: object) -> bool:
    """Whether ``value`` is an integer (a NumPy one too), not a bool: the launchers' test of a count, width or
    seed (``graphfuse.checks.is_int`` is the framework's twin; kernels/ imports nothing of the package)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_real(op: str, name: str, value: object) -> None:
    """Raise naming ``name`` unless ``value`` is a finite real number (a NumPy one too, not a bool): TypeError for
    another type, ValueError for inf or NaN. The launchers' test of a floating-point kernel argument
    (``graphfuse.checks.check_finite_real``'s twin)."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be a real number; got {value!r}")
    if not -float("inf") < value < float("inf"):
        raise ValueError(f"{op}: {name} must be a finite real number; got {value!r}")


def ptr(t: Tensor | None) -> int:
    """A tensor's device address as a kernel pointer argument (null for None). Devices are the launchers'
    business (:func:`check_devices`)."""
    return 0 if t is None else t.data_ptr()


def i64(v: int) -> int:
    """An integer kernel argument (passed as ``long long``)."""
    return int(v)


def f64(v: float) -> float:
    """A floating-point kernel argument (passed as ``double``)."""
    return float(v)


class Kernel:
    """A template instance bound to a device and a launch shape; ``kernel(*args)`` launches it on PyTorch's
    current stream (an empty grid launches nothing).

    ``args``: ints (pointers from :func:`ptr`, sizes from :func:`i64`) and floats (:func:`f64`), in the
    kernel's parameter order. The grid is checked here, once; the device is resolved and the instance compiled
    (or found in the cache) at the first launch. Plans bind their kernels once, so that a call only packs its
    arguments and launches: the host time a small graph pays per aggregation.
    """

    __slots__ = ("filename", "name", "family", "device", "index", "shape", "fn")

    def __init__(self, filename: str, name: str, device: torch.device, grid: Sequence[int], block: Sequence[int],
                 shared_mem: int = 0, family: Sequence[str] = ()) -> None:
        self.filename, self.name, self.family = filename, name, family
        self.device, self.index = device, -1
        self.shape = _launch_shape(name, grid, block, shared_mem)
        self.fn = 0  # the CUfunction handle, once compiled

    def __call__(self, *args: int | float) -> None:
        if self.shape is None:
            return
        if not self.fn:
            self.index = device_index(self.device)
            self.fn = get_function(self.filename, self.name, self.index, self.family).ptr
        _launch(self.fn, self.index, self.shape, args)


def launch(filename: str, name: str, device: torch.device, grid: Sequence[int], block: Sequence[int],
           args: Sequence[int | float], shared_mem: int = 0, family: Sequence[str] = ()) -> None:
    """Launch a template instance once (what a :class:`Kernel` does, without binding one); ``family``: see
    :func:`get_function`."""
    shape = _launch_shape(name, grid, block, shared_mem)
    if shape is not None:
        index = device_index(device)
        fn = _functions.get((index, filename, name)) or get_function(filename, name, index, family)
        _launch(fn.ptr, index, shape, args)


def _launch_shape(name: str, grid: Sequence[int], block: Sequence[int], shared_mem: int) -> tuple | None:
    """``cuLaunchKernel``'s grid, block and shared-memory arguments (None for an empty grid)."""
    shape = (*grid, 1, 1)[:3] + (*block, 1, 1)[:3] + (shared_mem,)
    if shape[0] >= 2**31 or shape[1] > 65535 or shape[2] > 65535:
        raise ValueError(f"{name}: launch grid {tuple(grid)} exceeds the CUDA limits")
    return shape if shape[0] > 0 and shape[1] > 0 and shape[2] > 0 else None


def _launch(fn: int, index: int, shape: tuple, args: Sequence[int | float]) -> None:
    """``cuLaunchKernel`` of the CUfunction ``fn`` on PyTorch's current stream of device ``index``: the
    arguments packed into the thread's parameter block, no CuPy argument conversion, stream object or device
    context manager on the way (unless the thread is not on the device's primary context)."""
    params = _pack(args)
    driver = _driver()
    if driver.ctxGetCurrent() == _contexts.get(index):  # the device's primary context is the thread's
        driver.launchKernel(fn, *shape, _current_stream_ptr(index), params, 0)
        return
    with _primary_context(index):
        driver.launchKernel(fn, *shape, _current_stream_ptr(index), params, 0)


@contextlib.contextmanager
def _primary_context(index: int) -> Iterator[None]:
    """Device ``index``'s primary context bound to the thread for the block, as the runtime API would bind it
    (for a thread on another device, or without a current context yet: autograd's device thread before its
    first CUDA runtime call); remembered, so that later calls recognise it with one ``cuCtxGetCurrent``."""
    with torch.cuda.device(index):
        _cupy().cuda.runtime.setDevice(index)
        _contexts[index] = _driver().ctxGetCurrent()
        yield


_contexts: dict[int, int] = {}  # device index → its primary context (the CUcontext handle, as an int)


@functools.cache
def _driver() -> Any:
    return _cupy().cuda.driver


class Plan:
    """Base of the launch plans (GE-SpMM, HP-SpMM, ES-SpMM): a configuration fixed once, whose kernel reads the
    dense operand and writes the output with vector loads of ``align`` bytes. :meth:`_for` returns the plan to
    launch for given operands: this one when both are aligned (always, for tensors fresh from PyTorch's
    allocator), else a scalar-load twin (``_scalar_twin()``, built on first need) for a misaligned view."""

    align = 1
    unaligned: Any = None

    def _for(self, x: Tensor, out: Tensor) -> Any:
        if (x.data_ptr() | out.data_ptr()) % self.align == 0:
            return self
        if self.unaligned is None:
            self.unaligned = self._scalar_twin()
        return self.unaligned

    def _scalar_twin(self) -> Any:  # pragma: no cover - every plan overrides it
        raise NotImplementedError


@functools.cache
def full_wave(filename: str, name: str, index: int, block: int, family: tuple[str, ...] = ()) -> int:
    """Blocks of ``name`` the whole GPU runs at once: SM count × the kernel's occupancy (active blocks per
    SM at ``block`` threads, from its compiled register and shared-memory use). ``family``: see
    :func:`get_function` (a launcher whose first need of the kernel is this passes the family it launches with)."""
    fn = get_function(filename, name, index, family)
    per_sm = _cupy().cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.ptr, block, 0)
    return torch.cuda.get_device_properties(index).multi_processor_count * max(1, per_sm)


def ctype(dtype: torch.dtype) -> str:
    """C++ type of a supported feature dtype (float16/bfloat16: common.cuh's 16-bit storage types, which GE-SpMM
    takes)."""
    return {torch.float32: "float", torch.float64: "double", torch.float16: "gf_half", torch.bfloat16: "gf_bf16"}[dtype]


def cbool(v: bool) -> str:
    return "true" if v else "false"


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


# ---------------------------------------------------------------------------------------------- validation
FLOAT_DTYPES = (torch.float32, torch.float64)
HALF_DTYPES = (torch.float16, torch.bfloat16)  # GE-SpMM's features too, summed in float32
REDUCE_CODES = {"sum": 0, "mean": 1, "max": 2, "min": 3}  # GF_SUM … GF_MIN of common.cuh


def check_choice(op: str, name: str, value: Any, choices: Sequence[str] | dict[str, Any]) -> None:
    """Raise a ValueError naming ``name`` unless ``value`` is one of the str ``choices`` (a list value was
    unhashable in a dict lookup: a bare TypeError)."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{op}: {name} must be one of {list(choices)}; got {value!r}")


def check_tensor(
    op: str,
    name: str,
    t: Any,
    *,
    dtypes: Sequence[torch.dtype],
    ndim: int | Sequence[int],
    shape: Sequence[int | None] | None = None,
    shape_text: str | None = None,
) -> None:
    """Raise TypeError/ValueError naming ``op`` and ``name`` unless ``t`` is a contiguous tensor of one of
    ``dtypes`` with ``ndim`` dimensions (and ``shape``, where None entries match anything). Devices are
    checked by :func:`check_devices`."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor; got {type(t).__name__}")
    if t.dtype not in dtypes:
        expected = " or ".join(str(d) for d in dtypes)
        raise TypeError(f"{op}: {name} must have dtype {expected}; got {t.dtype}")
    ndims = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if t.dim() not in ndims:
        raise ValueError(f"{op}: {name} must have {' or '.join(map(str, ndims))} dimensions; "
                         f"got shape {tuple(t.shape)}")
    if shape is not None and (len(shape) != t.dim() or any(s is not None and s != d for s, d in zip(shape, t.shape))):
        text = shape_text or str(tuple("*" if s is None else s for s in shape))
        raise ValueError(f"{op}: {name} must have shape {text}; got {tuple(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"{op}: {name} must be contiguous; got strides {t.stride()}")


def check_devices(op: str, tensors: dict[str, Tensor | None]) -> torch.device:
    """Raise ValueError unless every given tensor is on one CUDA device (checked after dtypes and shapes, so
    those errors can be tested without a GPU); returns that device."""
    device = None
    first = None
    for name, t in tensors.items():
        if t is None:
            continue
        if t.device.type != "cuda":
            raise ValueError(f"{op}: {name} must be a CUDA tensor; got a tensor on {t.device}")
        if device is None:
            device, first = t.device, name
        elif t.device != device:
            raise ValueError(f"{op}: {name} is on {t.device} but {first} is on {device}")
    return device


def check_csr(op: str, rowptr: Any, col: Any, x: Any, dtypes: Sequence[torch.dtype] = FLOAT_DTYPES) -> None:
    """Raise TypeError/ValueError naming ``op``'s argument unless ``x`` is a 2-D tensor of one of ``dtypes``,
    ``rowptr`` a non-empty 1-D int64 tensor and ``col`` a 1-D int32 tensor (the CSR operands of the SpMM
    launchers; devices are checked by :func:`check_devices`)."""
    check_tensor(op, "x", x, dtypes=dtypes, ndim=2)
    check_tensor(op, "rowptr", rowptr, dtypes=(torch.int64,), ndim=1)
    if rowptr.numel() < 1:
        raise ValueError(f"{op}: rowptr must have at least one element (R + 1); got shape {tuple(rowptr.shape)}")
    check_tensor(op, "col", col, dtypes=(torch.int32,), ndim=1)


def check_indices(op: str, csr: tuple[str, Tensor, str, Tensor] | None,
                  bounds: Sequence[tuple[str, Tensor | None, int]] = (), rules: Sequence[tuple[str, Tensor]] = (),
                  ) -> None:
    """Raise ValueError naming the argument unless the values the kernels address memory with are valid: the
    offsets of ``csr = (ptr name, ptr, index name, index)`` start at 0, never decrease and end at the index's
    length, each ``bounds`` tensor (None: skipped) holds values in [0, bound), and no ``rules`` entry
    ``(what must hold, 0-dim tensor true when it does not)`` is broken (see :func:`permutation_rule`). One host
    sync: the launchers' public functions run it; the engine's own calls, on graphs validated when built, pass
    ``validate=False``."""
    facts: list[Tensor] = []  # int64 scalars on the tensors' device, read back together
    if csr is not None:
        ptr_name, ptr, index_name, index = csr
        facts += [ptr[0], (ptr.diff() < 0).any().long(), ptr[-1]]
    checked = [(name, t, bound) for name, t, bound in bounds if t is not None and t.numel()]
    for _, t, _ in checked:
        facts += [v.long() for v in torch.aminmax(t)]
    facts += [broken.long() for _, broken in rules]
    if not facts:
        return
    values = torch.stack(facts).tolist()
    broken = values[len(values) - len(rules):]
    if csr is not None:
        first, decreases, last = values[:3]
        values = values[3:]
        if first != 0:
            raise ValueError(f"{op}: {ptr_name} must start at 0; got {first}")
        if decreases:
            raise ValueError(f"{op}: {ptr_name} must not decrease (row offsets)")
        if last != index.numel():
            raise ValueError(f"{op}: {ptr_name} must end at the number of entries of {index_name} "
                             f"({index.numel()}); got {last}")
    for (name, _, bound), low, high in zip(checked, values[0:2 * len(checked):2], values[1:2 * len(checked):2]):
        if low < 0 or high >= bound:
            raise ValueError(f"{op}: {name} must hold values in [0, {bound}); got values in [{low}, {high}]")
    for (what, _), failed in zip(rules, broken):
        if failed:
            raise ValueError(f"{op}: {what}")


def permutation_rule(name: str, perm: Tensor) -> tuple[str, Tensor]:
    """A :func:`check_indices` rule: ``perm`` holds every value of [0, len) once (a kernel writing ``out[perm[j]]``
    leaves a slot of its uninitialised output unwritten for each repeated value). One sort, no sync."""
    n = perm.numel()
    broken = torch.sort(perm).values.ne(torch.arange(n, dtype=perm.dtype, device=perm.device)).any()
    return f"{name} must be a permutation of [0, {n}) (every value once)", broken


def check_heads(op: str, k: int, heads: int) -> int:
    """Validate ``heads`` against the feature width ``k``; returns C = k // heads."""
    if not is_int(heads) or heads < 1:
        raise ValueError(f"{op}: heads must be a positive int; got {heads!r}")
    if k % heads:
        raise ValueError(f"{op}: the feature width K={k} must be divisible by heads={heads}")
    return k // heads


_ITEM_SIZE = {torch.float32: 4, torch.float64: 8, torch.float16: 2, torch.bfloat16: 2}


def itemsize(dtype: torch.dtype) -> int:
    return _ITEM_SIZE[dtype]


def vector_width(k: int, dtype: torch.dtype, tensors: Sequence[Tensor], divides: int | None = None,
                 lanes: int = 32) -> int:
    """Widest vector (16 bytes at most) that divides ``k`` (and ``divides``), keeps every access aligned and
    still gives each of ``lanes`` lanes a full vector (k >= lanes * vec)."""
    misalignment = 0
    for t in tensors:
        misalignment |= t.data_ptr()
    return _vector_width(k, _ITEM_SIZE[dtype], misalignment & 15, divides, lanes)


@functools.cache
def _vector_width(k: int, item: int, misalignment: int, divides: int | None, lanes: int) -> int:
    for vec in (8, 4, 2, 1):
        if vec > 1 and k < lanes * vec:
            continue
        if vec * item > 16 or k % vec or (divides is not None and divides % vec):
            continue
        if misalignment % (vec * item) == 0:
            return vec
    return 1
