"""graphfuse.kernels: CUDA kernels (``.cu`` files) and their launchers, compiled lazily through CuPy/NVRTC.

Imports nothing from the rest of graphfuse and needs neither CuPy nor CUDA at import time. Modules:
``runtime`` (compilation cache, launches on PyTorch's stream, validation helpers), ``spmm`` (GE-SpMM),
``gar`` (fused Gather-ApplyEdge-Reduce, SDDMM), ``gas`` (fused Gather-ApplyEdge-Scatter). See docs/kernels.md.
"""
