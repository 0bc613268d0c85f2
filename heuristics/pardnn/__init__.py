"""PARDNN (Fawzy et al. 2021): every step a separate function, and the ``pardnn`` method.

slicing.slice_graph (Algorithm 1), mapping.lflam (Algorithm 2, bit.LevelBIT for span sums),
memory_tracker (Eq. 2 peaks and potentials), overflow.handle_overflow (greedy 0-1 min-knapsack),
memory_ii (Eq. 5 residual balancing, critical-path chunk splitting), pipeline.pardnn (all of it).
"""
from .pipeline import pardnn, pardnn_balanced, run_pipeline  # noqa: F401
