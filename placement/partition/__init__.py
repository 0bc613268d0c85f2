"""Operator partitioning (Tofu): operator index descriptions (ops), the tensor view of a problem
(graph), and partitioned plans with their evaluation (plan). docs/partitioning.md explains the model."""
