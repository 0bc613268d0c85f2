"""Single-sample latency (Tarnawski et al., Section 7): the objective's exact models and everything
they need, in one package.

exact.py (the latency IP in CP-SAT and as a MIP, q subgraphs per accelerator), bounds.py (the
contiguity- and colocation-aware path bound), closure.py (the closure bound and its cut-set split),
pairs.py (the pair bound over two consecutive runs), heuristics.py (the greedy baseline and the
Solution wrapper), search.py (iterated local search over splits).
"""
