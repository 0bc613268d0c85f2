"""Session 14 review of session 13's waits in the search and re-base of the moved part, by
property tests on small random graphs with random waits, kernels on and off:

- a chain of committed trials (the compiled re-base of the moved part, or a full reset) leaves the
  incremental schedule equal, structure by structure, to one built afresh, and its start times are
  the evaluator's ordered schedule with the waits; also with many zero-time nodes and free
  transfers (ties of equal starts everywhere), with the bound's structures built before each trial
  and cutoffs (a stopped trial only when the evaluator's makespan reaches its cutoff);
- refine's and window LNS's answers with waits claim what the evaluator's checker measures on
  their start times (makespan, static and peak memory) and meet every wait.

Every expected value comes from the evaluator (``evaluate``, ``check``), never from the code under
test."""
from __future__ import annotations

import time

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from formulations.window_lns import lns
from placement.evaluator import check, evaluate
from placement.incremental import IncrementalSchedule, device_order
from placement.solution import SolveOptions
from solvers.refine import kept_waits, refine
from tests.test_incremental_commit import assert_same_state
from tests.test_kernels import kernel_mode, require_compiled
from tests.test_waits_search import waited_case


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(3, 14), k=st.integers(2, 3), count=st.integers(1, 8),
       link=st.booleans(), mode=st.sampled_from(["on", "off"]), model=st.sampled_from(["static", "peak"]),
       tight=st.booleans())
def test_refine_with_waits_claims_what_the_evaluator_measures(seed, n, k, count, link, mode, model, tight):
    """``tight``: capacity the start's own memory, so memory binds the moves."""
    if mode == "on":
        require_compiled()
    with kernel_mode(mode):
        prob, pl, waits, g, ref = waited_case(seed, n, k, count, link)
        start_ev = evaluate(prob, pl, order=device_order(prob, pl, ref, graph=g), memory_model=model, waits=waits)
        if tight:
            prob = prob.with_devices(prob.k, float(start_ev.memory.max()))
        got_pl, got = refine(prob, pl, SolveOptions(memory_model=model, seed=seed), deadline=time.monotonic() + 60,
                             memory_model=model, max_evals=120, start=ref, keep_order=True, waits=waits)
    truth = check(prob, got_pl, got.start, model, check_memory=False)
    assert truth.makespan == got.makespan
    assert np.array_equal(truth.static_memory, got.static_memory)
    assert np.array_equal(truth.peak_memory, got.peak_memory)
    assert got.makespan <= start_ev.makespan
    assert kept_waits(prob, got, waits) == ([tuple(w) for w in waits] or None)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(3, 12), count=st.integers(1, 6), link=st.booleans(),
       mode=st.sampled_from(["on", "off"]), model=st.sampled_from(["static", "peak"]))
def test_window_lns_with_waits_claims_what_the_evaluator_measures(seed, n, count, link, mode, model):
    if mode == "on":
        require_compiled()
    with kernel_mode(mode):
        prob, pl, waits, g, ref = waited_case(seed, n, 2, count, link)
        got_pl, got = lns(prob, pl, ref, SolveOptions(memory_model=model, seed=seed, workers=1),
                          deadline=time.monotonic() + 1.5, memory_model=model, window=prob.n, window_seconds=0.5,
                          waits=waits)
    truth = check(prob, got_pl, got.start, model, check_memory=False)
    assert truth.makespan == got.makespan
    assert np.array_equal(truth.peak_memory, got.peak_memory)
    assert kept_waits(prob, got, waits) == ([tuple(w) for w in waits] or None)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 16), k=st.integers(1, 4), count=st.integers(0, 8),
       link=st.booleans(), zero_p=st.sampled_from([0.3, 0.6, 0.9]), mode=st.sampled_from(["on", "off"]),
       steps=st.lists(st.tuples(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 3)), min_size=1, max_size=4),
                                st.booleans()), min_size=1, max_size=8))
def test_trials_and_commits_with_waits_and_ties_equal_the_evaluator(seed, n, k, count, link, zero_p, mode, steps):
    """Random moves, each tried with and without cutoffs (the bound's structures built first), some
    committed; ``ref``: the order the base keeps (the last committed trial's start times)."""
    if mode == "on":
        require_compiled()
    with kernel_mode(mode):
        prob, pl, waits, g, ref = waited_case(seed, n, k, count, link, zero_time_p=zero_p, free=0.5)
        inc = IncrementalSchedule(prob, pl, ref, waits)
        for move, commit in steps:
            moves = {v % n: d % k for v, d in move}
            new_pl = inc.placement.copy()
            for v, d in moves.items():
                new_pl[v] = d
            want = evaluate(prob, new_pl, order=device_order(prob, new_pl, ref, graph=g), memory_model="peak",
                            waits=waits)
            inc._prepare_bounds()
            for cutoff in (float("inf"), inc.makespan, want.makespan, want.makespan * 1.01 + 1e-6):
                trial = inc.try_move(moves, cutoff=cutoff)
                if trial.complete:
                    ev = trial.evaluation("peak")
                    assert np.array_equal(ev.start, want.start) and trial.makespan == want.makespan
                    assert np.array_equal(ev.peak_memory, want.peak_memory)
                else:
                    assert want.makespan >= cutoff - 1e-9 and trial.makespan <= want.makespan + 1e-9
            if commit:
                inc.commit(inc.try_move(moves))
                assert_same_state(inc, IncrementalSchedule(prob, new_pl, want.start, waits))
                ref = want.start
