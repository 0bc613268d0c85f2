"""Importers: real models in, placement problems out (docs/importers.md).

One module per source, each building a :class:`~placement.problem.Problem` with operator semantics
(``node_meta``/``edge_meta``):

- ``torch``: a PyTorch model's training step (forward, backward, optimizer update) captured at
  ATen level (needs the ``torch`` extra);
- ``onnx``: an ONNX model, shapes from ONNX shape inference (needs the ``onnx`` extra);
- ``pipedream``: the per-layer ``graph.txt`` profiles written by PipeDream's profiler;
- ``devicemap``: a solved placement as a device map a PyTorch user can apply.

Shared helpers: ``devicespec`` (the roofline device table), ``costs`` (roofline and time tables),
``build`` (nodes and edges with tensor identity into a Problem).
"""
