"""Memory heuristic I, part 2: the memory consumption tracker (PARDNN Eq. 2) and node potentials.

Given a placement and the emulated schedule (the evaluator's FIFO executor is the scheduler
emulator), this finds each device's peak memory, the time it is reached, and the *memory potential*
M_pot(n, t*) of every node at its device's peak time t*: what moving n away would free at t*, i.e.
n's parameters, n's output if n is running at t*, and the outputs of n's direct ancestors held on
n's device at t* for which n is the last consumer there (Table 2 of the paper).

The buffer intervals and the peak times come from placement.evaluator (buffers, peak_profile), so
the peak found here is the evaluator's by construction.
Under the static model memory does not depend on time: the potential of a node is its params +
output and the tracker reduces to sums.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement.evaluator import buffers, peak_profile
from placement.problem import Problem


@dataclass
class MemoryState:
    """Per device: memory (bytes) under the model and the peak time (nan for static); per node:
    its memory potential at its device's peak time."""

    memory: np.ndarray
    peak_time: np.ndarray
    potential: np.ndarray


def static_state(problem: Problem, placement: np.ndarray) -> MemoryState:
    need = problem.param_bytes + problem.out_bytes
    mem = np.bincount(placement, weights=need, minlength=problem.k)
    return MemoryState(mem, np.full(problem.k, np.nan), need.copy())


def peak_state(problem: Problem, placement: np.ndarray, start: np.ndarray, finish: np.ndarray) -> MemoryState:
    """Eq. 2 peak per device, when it happens, and the potentials at that moment."""
    buf = buffers(problem, placement, start, finish)
    peak, when = peak_profile(problem, placement, start, finish, buf)
    # potentials at t* of each node's device
    pot = problem.param_bytes.copy()
    tstar = when[placement]
    own = (start <= tstar) & (tstar < finish)
    pot += np.where(own, problem.out_bytes, 0.0)
    # outputs held on d at t* whose last consumer there is the node
    held = buf.last >= 0
    th = when[buf.device[held]]
    cover = (buf.t0[held] <= th) & (th < buf.t1[held])
    np.add.at(pot, buf.last[held][cover], buf.size[held][cover])
    return MemoryState(peak, when, pot)
