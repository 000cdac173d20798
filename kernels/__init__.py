"""graphfuse.kernels: CUDA kernels (``.cu`` files) and their launchers, compiled lazily through CuPy/NVRTC.

Imports nothing from the rest of graphfuse and needs neither CuPy nor CUDA at import time. Modules:
``runtime`` (compilation cache, launches on PyTorch's stream, validation helpers), ``spmm`` (GE-SpMM),
``hp_spmm`` (HP-SpMM), ``sddmm`` (HP-SDDMM), ``es_spmm`` (edge-sampled ES-SpMM), ``gar`` (fused
Gather-ApplyEdge-Reduce), ``gas`` (fused Gather-ApplyEdge-Scatter), ``gat_attention`` (fused GAT edge softmax),
``graph_processing`` (COO → CSR/CSC with normalisation), ``radix_sort`` and ``sampling`` (the neighbour
sampler's picks). See docs/kernels.md.
"""
