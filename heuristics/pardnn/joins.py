"""Step 1, after the mapping: pull the late inputs of the critical-path device's joins onto it.

Not in the paper. LFLAM balances work by top levels, a timeline with unlimited devices, so it
cannot see queueing: on a training graph the device of a small secondary (an attention head's
value gradient, 0.03 units) may be busy at that moment with a 14-unit weight-gradient matmul of
the same layer, and the critical path, which waits for the small node's result at its join, idles
for the length of the matmul. Measured on generated transformer graphs, such waits are nearly all
of the critical-path device's idle time, in our mapping and in the authors' alike.

Each round evaluates the placement (the project's evaluator, FIFO executor), walks the critical
path's device in start order and, at every idle gap, takes the input that arrived last; when it
comes from another device and belongs to a secondary cluster, that cluster is moved onto the
critical path's device (colocation and allowed devices repaired as in the pipeline). The batch is
kept only if the evaluated makespan drops and the memory overflow (beyond the usable capacity, under
the problem's memory model) does not grow; otherwise the rounds stop. Each round costs one evaluation, so the number of rounds is bounded by the caller.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from placement.evaluator import Evaluation, evaluate
from placement.problem import Problem
from placement.solution import halt_if

from .slicing import Slicing


def late_inputs(problem: Problem, sl: Slicing, placement: np.ndarray, ev: Evaluation, device: int) -> list[int]:
    """Secondary clusters to pull onto ``device``: at each idle gap of ``device`` (its node v
    starts after the device became free at b), the remote inputs of v that arrived after b, latest
    first, as long as pulling them helps: pulling the m latest lets v start at about
    max(b + their clusters' work, arrival of the (m+1)-th), and the best m is taken. Inputs on a
    primary (another critical path) cannot be pulled and end the prefix."""
    pp, pn, pe = problem.pred_ptr
    on = np.flatnonzero(placement == device)
    on = on[np.argsort(ev.start[on], kind="stable")]
    start, finish, comm = ev.start.tolist(), ev.finish.tolist(), problem.comm.tolist()
    pl, cl = placement.tolist(), sl.cluster.tolist()
    work = np.bincount(sl.cluster, weights=problem.time, minlength=len(sl.paths)).tolist()
    ptr, pred, eid = pp.tolist(), pn.tolist(), pe.tolist()
    out: list[int] = []
    busy_until = 0.0
    for v in on.tolist():
        if start[v] > busy_until * (1 + 1e-12) + 1e-12:
            late = sorted(((finish[pred[j]] + comm[eid[j]], pred[j]) for j in range(ptr[v], ptr[v + 1])
                           if pl[pred[j]] != device and finish[pred[j]] + comm[eid[j]] > busy_until), reverse=True)
            best_m, best_t, pulled, seen = 0, start[v], 0.0, set()
            for m, (_, u) in enumerate(late, 1):
                c = cl[u]
                if c < sl.primaries:
                    break
                if c not in seen:
                    seen.add(c)
                    pulled += work[c]
                t = max(busy_until + pulled, late[m][0] if m < len(late) else busy_until)
                if t < best_t:
                    best_m, best_t = m, t
            out.extend(cl[u] for _, u in late[:best_m])
        busy_until = max(busy_until, finish[v])
    return out


def pull_join_inputs(problem: Problem, sl: Slicing, placement: np.ndarray, ev: Evaluation, device: int,
                     rounds: int, repair: Callable[[Problem, np.ndarray], np.ndarray],
                     usable: np.ndarray, memory_model: str = "static",
                     stop: Callable[[], bool] | None = None) -> tuple[np.ndarray, Evaluation, dict]:
    """Up to ``rounds`` rounds of the move described in the module docstring. ``ev`` is the
    evaluation of ``placement``; ``usable`` the per-device memory the moves must not overflow
    further under ``memory_model``; ``stop`` (a stop request's ``is_set``) abandons the rounds
    (OutOfTime). Returns (placement, its evaluation, info)."""

    def overflow(e: Evaluation) -> float:
        used = e.peak_memory if memory_model == "peak" else e.static_memory
        return float(np.maximum(used - usable, 0.0).sum())

    over = overflow(ev)
    done = moved = 0
    for _ in range(rounds):
        halt_if(stop)
        clusters = sorted(set(late_inputs(problem, sl, placement, ev, device)))
        if not clusters:
            break
        trial = placement.copy()
        for c in clusters:
            trial[sl.paths[c]] = device
        trial = repair(problem, trial)
        halt_if(stop)
        trial_ev = evaluate(problem, trial, memory_model=memory_model)
        trial_over = overflow(trial_ev)
        if not trial_ev.makespan < ev.makespan or trial_over > over * (1 + 1e-12) + 1e-9:
            break
        placement, ev, over = trial, trial_ev, trial_over
        done += 1
        moved += len(clusters)
    return placement, ev, {"rounds": done, "clusters_moved": moved}
