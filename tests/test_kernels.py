"""The compiled kernels (placement/kernels.py) equal the Python loops they replace, bit for bit.

Each check runs a public function twice on the same input, with ``PLACEMENT_KERNELS=off`` (the
Python loops) and ``=on`` (the compiled kernels at every size), and compares every float exactly.
The graphs are random DAGs whose node indices are not in topological order (so the tie-breaking
by topological rank is exercised), with integer and zero times and transfers (many ties).

These tests need the extra ``fast`` (numba). Without it they fail, naming the extra, unless
``PLACEMENT_KERNELS=off`` says it is deliberately absent: then they are skipped.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import time
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heuristics.list_scheduling import etf
from placement import kernels
from placement.bounds import bottom_levels
from placement.evaluator import edge_delay, evaluate
from placement.generate import generate
from placement.incremental import IncrementalSchedule, _forest_intervals, device_order, kept_order_start
from placement.problem import Problem, make_problem
from placement.solution import SolveOptions
from solvers.refine import RefineStats, refine
from solvers.reschedule import list_schedule_start


def require_compiled() -> None:
    """Fail (or skip, when PLACEMENT_KERNELS=off says so) unless numba is there to compile."""
    if os.environ.get(kernels.MODE_VAR, "").strip().lower() == "off":
        pytest.skip("PLACEMENT_KERNELS=off: the extra 'fast' (numba) is deliberately absent")
    if kernels.load() is None:
        pytest.fail("numba is not installed: the compiled kernels cannot be tested. Install the extra "
                    "(pip install '.[fast]'), or set PLACEMENT_KERNELS=off to say it is deliberately absent")


@contextmanager
def kernel_mode(value: str):
    old = os.environ.get(kernels.MODE_VAR)
    os.environ[kernels.MODE_VAR] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[kernels.MODE_VAR]
        else:
            os.environ[kernels.MODE_VAR] = old


def both(call):
    """``call()`` with the Python loops and with the compiled kernels."""
    with kernel_mode("off"):
        plain = call()
    with kernel_mode("on"):
        fast = call()
    return plain, fast


def random_dag(seed: int, n: int, k: int, zero_p: float) -> Problem:
    """A random DAG on shuffled labels: edges go forward in a hidden random order, not by index."""
    rng = random.Random(seed)
    hidden = list(range(n))
    rng.shuffle(hidden)  # hidden[i]: the node at place i of the hidden order
    nodes = [{"id": v, "time": 0.0 if rng.random() < zero_p else float(rng.randint(1, 4)),
              "out_bytes": rng.randint(0, 30), "param_bytes": rng.randint(0, 10)} for v in range(n)]
    density = rng.choice([0.1, 0.3, 0.6])
    edges = [{"src": hidden[i], "dst": hidden[j], "comm": float(rng.randint(0, 3))}
             for i in range(n) for j in range(i + 1, n) if rng.random() < density]
    return make_problem(nodes, edges, devices=k, name=f"dag{seed}")


graphs = st.builds(random_dag, seed=st.integers(0, 10**6), n=st.integers(1, 40), k=st.integers(1, 5),
                   zero_p=st.sampled_from([0.0, 0.3, 0.8]))


def placement_of(prob: Problem, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, prob.k, size=prob.n)


def assert_same_floats(a, b) -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()  # bit for bit (also tells -0.0 from 0.0)


@settings(max_examples=200, deadline=None)
@given(prob=graphs, seed=st.integers(0, 10**6), memory_model=st.sampled_from(["static", "peak"]))
def test_fifo_and_ordered_schedules_equal_the_python_loops(prob, seed, memory_model):
    require_compiled()
    pl = placement_of(prob, seed)
    plain, fast = both(lambda: evaluate(prob, pl, memory_model=memory_model))
    for field in ("start", "finish", "static_memory", "peak_memory"):
        assert_same_floats(getattr(plain, field), getattr(fast, field))
    assert plain.makespan == fast.makespan
    # The ordered schedule of an order by (a shuffled reference, rank): not the FIFO's.
    ref = np.random.default_rng(seed + 1).permutation(prob.n).astype(float) if seed % 2 else plain.start
    order = device_order(prob, pl, ref)
    try:
        plain_o = evaluate(prob, pl, order=order, memory_model=memory_model)
    except ValueError as exc:  # an order against the graph: both must say so, in the same words
        with kernel_mode("on"), pytest.raises(ValueError) as fast_exc:
            evaluate(prob, pl, order=order, memory_model=memory_model)
        assert str(fast_exc.value) == str(exc)
        return
    with kernel_mode("on"):
        fast_o = evaluate(prob, pl, order=order, memory_model=memory_model)
    assert_same_floats(plain_o.start, fast_o.start)
    assert_same_floats(plain_o.peak_memory, fast_o.peak_memory)


@settings(max_examples=200, deadline=None)
@given(prob=graphs, seed=st.integers(0, 10**6), comm=st.booleans())
def test_bottom_levels_and_list_schedule_equal_the_python_loops(prob, seed, comm):
    require_compiled()
    pl = placement_of(prob, seed)
    delay = edge_delay(prob, pl) if comm else None
    plain, fast = both(lambda: bottom_levels(prob, delay))
    assert_same_floats(plain, fast)
    # Priorities with ties (rounded levels) and without (the levels themselves).
    prio = np.floor(plain / 2) if seed % 2 else plain
    (order_p, start_p), (order_f, start_f) = both(lambda: list_schedule_start(prob, pl, prio))
    assert order_p == order_f
    assert_same_floats(start_p, start_f)


@settings(max_examples=200, deadline=None)
@given(prob=graphs, seed=st.integers(0, 10**6))
def test_kept_order_and_incremental_tails_equal_the_python_loops(prob, seed):
    require_compiled()
    pl = placement_of(prob, seed)
    ref = evaluate(prob, placement_of(prob, seed + 1)).start  # a schedule of another placement
    plain, fast = both(lambda: kept_order_start(prob, pl, ref))
    assert_same_floats(plain, fast)
    plain_i, fast_i = both(lambda: IncrementalSchedule(prob, pl, ref))
    assert_same_floats(plain_i.start, fast_i.start)
    assert plain_i._tail == fast_i._tail and plain_i._tail_next == fast_i._tail_next
    assert [type(x) for x in fast_i._tail_next[:1]] == [type(x) for x in plain_i._tail_next[:1]]  # Python ints


def test_kept_order_start_is_none_for_a_reference_that_is_not_a_schedule():
    require_compiled()
    prob = random_dag(5, 12, 3, 0.0)
    assert prob.m > 0
    ref = np.zeros(prob.n)
    ref[prob.src[0]] = 5.0  # the source of an edge after its destination
    assert both(lambda: kept_order_start(prob, np.zeros(prob.n, dtype=np.int64), ref)) == (None, None)


def test_auto_uses_the_kernels_from_the_threshold_only(monkeypatch):
    require_compiled()
    kernels.load()  # in auto mode the first call on a big graph only starts loading them in the background
    monkeypatch.setenv(kernels.MODE_VAR, "auto")
    assert kernels.for_size(kernels.THRESHOLD - 1) is None
    assert kernels.for_size(kernels.THRESHOLD) is not None
    monkeypatch.setenv(kernels.MODE_VAR, "off")
    assert kernels.for_size(10**6) is None
    monkeypatch.setenv(kernels.MODE_VAR, "sometimes")
    with pytest.raises(ValueError, match="PLACEMENT_KERNELS"):
        kernels.for_size(10)


@pytest.mark.parametrize("family, memory_model", [("cnn", "static"), ("cnn", "peak"), ("lstm", "static"),
                                                  ("lstm", "peak"), ("transformer", "static")])
def test_refine_takes_the_same_path_with_and_without_the_kernels(family, memory_model):
    """At a fixed evaluation budget refine reaches the same placement and start times."""
    require_compiled()
    prob = generate(family, 1500, seed=3, devices=4)
    pl = np.asarray(etf(prob, SolveOptions(memory_model=memory_model)).placement)
    fifo = evaluate(prob, pl, memory_model=memory_model)

    def run():
        stats = RefineStats()
        got, ev = refine(prob, pl, SolveOptions(seed=1), deadline=time.monotonic() + 1e6, memory_model=memory_model,
                         max_evals=1000, keep_order=True, start=fifo.start, stats=stats, incremental=True)
        answer = hashlib.sha1(np.asarray(got, dtype=np.int64).tobytes() + ev.start.tobytes()).hexdigest()
        return answer, stats.evaluations, stats.accepted

    plain, fast = both(run)
    assert plain == fast
    assert plain[2] > 0  # the path compared moved something


def test_other_dtypes_and_strided_arrays_reuse_the_one_compiled_signature():
    """A problem holding strided or other-typed arrays gets the same results, and no kernel is
    compiled a second time for it (that would pause a run for seconds)."""
    from formulations.common import retime

    require_compiled()
    base = random_dag(11, 30, 3, 0.3)
    prob = dataclasses.replace(base, time=np.repeat(base.time, 2)[::2], comm=np.repeat(base.comm, 2)[::2].astype(np.float32))
    assert not prob.time.flags["C_CONTIGUOUS"]
    pl = placement_of(prob, 2).astype(np.int32)
    plain, fast = both(lambda: (evaluate(prob, pl).start, bottom_levels(prob, edge_delay(prob, pl)),
                                list_schedule_start(prob, pl, prob.time)[1], IncrementalSchedule(prob, pl, np.zeros(prob.n)).start,
                                retime(prob, pl, device_order(prob, pl, np.zeros(prob.n)), release=np.arange(prob.n, dtype=np.int32))))
    for a, b in zip(plain, fast):
        assert_same_floats(a, b)
    ev = evaluate(prob, pl)
    inc = IncrementalSchedule(prob, pl, ev.start)
    trials = both(lambda: inc.try_move({0: (int(pl[0]) + 1) % 3, 5: int(pl[5])}, cutoff=inc.makespan))
    assert (trials[0].makespan, trials[0].recomputed) == (trials[1].makespan, trials[1].recomputed)
    from solvers.refine import critical_chain, spread_runs
    units = np.arange(prob.n)
    runs = both(lambda: spread_runs(prob, ev, list(range(prob.n)), units, prob.time.astype(np.float32),
                                    np.ones((prob.n, 3), dtype=np.int8), "static"))
    assert runs[0] == runs[1]
    chains = both(lambda: critical_chain(prob, ev))
    assert chains[0] == chains[1]
    compiled = kernels.load()
    for name in kernels._KERNELS:
        assert len(getattr(compiled, name).kernel.signatures) == 1, name


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 60), roots=st.integers(1, 5))
def test_forest_intervals_equal_the_pointer_doubling(seed, n, roots):
    require_compiled()
    rng = np.random.default_rng(seed)
    parent = np.full(n, -1, dtype=np.int64)
    hidden = rng.permutation(n)  # a parent comes earlier in a hidden order: a forest, not by index
    for i in range(min(roots, n), n):
        parent[hidden[i]] = hidden[rng.integers(0, i)]
    rank = rng.permutation(n).astype(np.int64)
    plain, fast = both(lambda: _forest_intervals(parent, rank))
    _, ranked = both(lambda: _forest_intervals(parent, rank, np.argsort(rank)))  # children sorted by counting
    for a, b, c in zip(plain, fast, ranked):
        assert a.dtype == b.dtype == c.dtype == np.int64 and np.array_equal(a, b) and np.array_equal(a, c)
    tin, end = fast
    for v in range(n):  # and they are Euler intervals: x on v's root path iff tin[x] <= tin[v] < end[x]
        path, x = set(), v
        while x >= 0:
            path.add(x)
            x = parent[x]
        assert path == {x for x in range(n) if tin[x] <= tin[v] < end[x]}


@settings(max_examples=150, deadline=None)
@given(prob=graphs, seed=st.integers(0, 10**6),
       steps=st.lists(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 4)), min_size=1, max_size=6),
                      min_size=1, max_size=5))
def test_the_incremental_cone_equals_the_python_loop(prob, seed, steps):
    """try_move's re-timed cone, compiled: the same trial (makespan or bound, nodes visited, new
    starts in the same order) for every cutoff, and the same schedule after accepted moves."""
    require_compiled()
    pl = placement_of(prob, seed)
    ref = evaluate(prob, pl).start
    inc = IncrementalSchedule(prob, pl, ref)
    for move in steps:
        moves = {v % prob.n: d % prob.k for v, d in move}
        for cutoff in (float("inf"), inc.makespan, inc.makespan * (0.5 + (seed % 7) / 10)):
            (a, b) = both(lambda: inc.try_move(moves, cutoff=cutoff))
            assert (a.makespan, a.recomputed, a.complete) == (b.makespan, b.recomputed, b.complete)
            assert list(a.start.items()) == list(b.start.items())
        trial = inc.try_move(moves)
        if trial.makespan <= inc.makespan:
            inc.commit(trial)


def _twice(x):
    return 2 * x


def test_kernels_compile_without_a_disk_cache_when_no_cache_directory_is_writable(monkeypatch):
    """numba raises at decoration when it finds no writable cache directory (a read-only install
    and home); the kernels are then compiled without the cache instead of not at all."""
    require_compiled()
    import numba
    from numba.core import caching

    monkeypatch.setattr(caching.CacheImpl, "_locator_classes", [])  # as if every cache directory were read-only
    with pytest.raises(RuntimeError, match="no locator"):
        numba.njit(cache=True)(_twice)
    compiled = kernels._jit(numba, _twice)
    assert compiled(21) == 42
    assert compiled.signatures  # compiled, not the Python function


def chains_from(prob: Problem, pl: np.ndarray, rng: np.random.Generator, how: str) -> list[list[int]]:
    """Device orders for ``retime``: by a schedule's starts (follows the graph), or each device's
    nodes shuffled (often against the graph); zero-time nodes left out half of the time, as
    window LNS does."""
    if how == "schedule":
        order = device_order(prob, pl, evaluate(prob, pl).start)
    else:
        order = [rng.permutation(np.flatnonzero(pl == d)).tolist() for d in range(prob.k)]
    if rng.random() < 0.5:
        order = [[v for v in seq if prob.time[v] > 0] for seq in order]
    return order


@settings(max_examples=250, deadline=None)
@given(prob=graphs, seed=st.integers(0, 10**6), how=st.sampled_from(["schedule", "shuffled"]),
       release=st.sampled_from([None, "int", "float"]), override=st.sampled_from([None, "int", "float"]))
def test_retime_equals_the_python_loop(prob, seed, how, release, override):
    """formulations.common.retime compiled: the same starts bit for bit, or None for both when the
    device order contradicts the graph; releases and time / transfer overrides (integer arrays as
    the CP-SAT model passes, and fractions) included."""
    from formulations.common import retime

    require_compiled()
    rng = np.random.default_rng(seed)
    pl = placement_of(prob, seed)
    order = chains_from(prob, pl, rng, how)
    rel = None if release is None else rng.integers(0, 9, prob.n) if release == "int" else rng.random(prob.n) * 7
    dur = comm = None
    if override == "int":
        dur, comm = rng.integers(0, 5, prob.n), rng.integers(0, 4, prob.m)
    elif override == "float":
        dur, comm = rng.random(prob.n) * 3, rng.random(prob.m) / 3
    plain, fast = both(lambda: retime(prob, pl, order, time=dur, comm=comm, release=rel))
    if how == "schedule":
        assert plain is not None  # a schedule's own order never contradicts the graph
    if plain is None:
        assert fast is None
        return
    assert_same_floats(plain, fast)
    # And the reference is right: every start is the latest of its release, its inputs' arrivals
    # and its device predecessor's finish (0 when it has none of them).
    d = prob.time if dur is None else dur
    c = prob.comm if comm is None else comm
    need = np.zeros(prob.n) if rel is None else rel.astype(float)
    for e in range(prob.m):
        u, v = prob.src[e], prob.dst[e]
        need[v] = max(need[v], fast[u] + d[u] + (c[e] if pl[u] != pl[v] else 0))
    for seq in order:
        for a, b in zip(seq, seq[1:]):
            need[b] = max(need[b], fast[a] + d[a])
    assert np.array_equal(need, fast)


def test_retime_with_an_order_naming_no_node_falls_back_to_the_python_loop():
    """An index outside 0..n-1 is not handed to the compiled pass (no bounds checks there)."""
    from formulations.common import retime

    require_compiled()
    prob = random_dag(3, 10, 2, 0.0)
    pl = np.zeros(prob.n, dtype=np.int64)
    with kernel_mode("on"), pytest.raises(IndexError):
        retime(prob, pl, [list(range(prob.n)) + [prob.n]])
    with kernel_mode("off"), pytest.raises(IndexError):
        retime(prob, pl, [list(range(prob.n)) + [prob.n]])


def test_window_lns_takes_the_same_path_with_and_without_the_kernels():
    """A fixed number of windows (each solved to optimality by one CP-SAT worker: deterministic)
    reaches the same placement and start times with the compiled re-timing and without."""
    from formulations import window_lns as wl

    require_compiled()
    prob = generate("cnn", 200, seed=2, devices=3)
    pl = np.asarray(etf(prob, SolveOptions()).placement)
    start = evaluate(prob, pl).start

    def run():
        search = wl.WindowSearch(prob, pl, start, SolveOptions(workers=1, seed=4), window=20, window_seconds=60.0)
        real = wl.solve_window
        calls = []

        def counted(*args, **kwargs):
            got = real(*args, **kwargs)
            calls.append(1)
            if len(calls) >= 10:
                search.opts.stop.set()  # the run ends after this window, before re-timing it
            return got

        wl.solve_window = counted
        try:
            ev = search.run(time.monotonic() + 1e6)
        finally:
            wl.solve_window = real
        s = search.stats
        return (hashlib.sha1(np.asarray(ev.placement, dtype=np.int64).tobytes() + ev.start.tobytes()).hexdigest(),
                s.windows, s.improved, s.closed)

    plain, fast = both(run)
    assert plain == fast
    assert plain[1] == 10 and plain[2] > 0 and plain[3] == 10  # every window closed; some improved the schedule


@settings(max_examples=200, deadline=None)
@given(prob=graphs, seed=st.integers(0, 10**6), group=st.integers(1, 4), static=st.booleans())
def test_spread_runs_equals_the_python_loop(prob, seed, group, static):
    """spread_runs compiled: the same batch move (units and devices, in the same order) for any
    chain (here a random sequence of distinct nodes: long runs on few devices, pieces of 8 nodes
    and more, whose sums numpy adds pairwise), colocation units, masks and capacities."""
    from solvers.refine import spread_runs

    require_compiled()
    rng = np.random.default_rng(seed)
    pl = rng.integers(0, min(prob.k, 2), size=prob.n)  # two devices at most: long runs
    ev = evaluate(prob, pl)
    chain = rng.permutation(prob.n)[:rng.integers(0, prob.n + 1)].tolist()
    units_of = (np.arange(prob.n) // group).astype(np.int64)  # consecutive nodes share a unit
    count = int(units_of.max()) + 1
    need = rng.random(count) * 10
    mask = rng.random((count, prob.k)) < 0.8
    mask[units_of, pl] = True  # every unit allowed where its nodes are
    if not static:
        need = need * 0.1
    plain, fast = both(lambda: spread_runs(prob, ev, chain, units_of, need, mask, "static" if static else "peak"))
    assert list(plain.items()) == list(fast.items())


@settings(max_examples=150, deadline=None)
@given(prob=graphs, seed=st.integers(0, 10**6), width=st.integers(1, 12), steps=st.integers(1, 4))
def test_bounded_trials_equal_the_python_loop_and_the_evaluator(prob, seed, width, steps):
    """try_move compiled (overlay, bound, cone) on blocks of neighbours in one device's order and
    scattered nodes: the same trial as the Python loop at every cutoff; a complete trial's
    schedule is the evaluator's, an incomplete one's bound never above the true makespan."""
    require_compiled()
    rng = np.random.default_rng(seed)
    pl = placement_of(prob, seed)
    ref = evaluate(prob, pl).start  # the reference: its order (start, rank) is what the trials keep
    inc = IncrementalSchedule(prob, pl, ref)
    for _ in range(steps):
        seq = inc.order[int(rng.integers(0, prob.k))]
        if seq and rng.random() < 0.5:
            lo = int(rng.integers(0, len(seq)))
            nodes = seq[lo:lo + width]
        else:
            nodes = rng.choice(prob.n, size=min(width, prob.n), replace=False).tolist()
        moves = {int(v): int(rng.integers(0, prob.k)) for v in nodes}
        new_pl = inc.placement.copy()
        for v, d in moves.items():
            new_pl[v] = d
        truth = evaluate(prob, new_pl, order=device_order(prob, new_pl, ref))
        for cutoff in (float("inf"), inc.makespan, truth.makespan, truth.makespan * 1.01, inc.makespan * 0.7):
            a, b = both(lambda: inc.try_move(moves, cutoff=cutoff))
            assert (a.makespan, a.recomputed, a.complete) == (b.makespan, b.recomputed, b.complete)
            assert list(a.start.items()) == list(b.start.items())
            if b.complete:
                start, _ = b.times()
                assert_same_floats(start, truth.start)
                assert b.makespan == truth.makespan
            else:
                assert cutoff <= b.makespan <= truth.makespan
        trial = inc.try_move(moves)
        if rng.random() < 0.7:
            ref = trial.times()[0]  # before the commit: a trial's times are changes over its base
            inc.commit(trial)


@settings(max_examples=200, deadline=None)
@given(prob=graphs, seed=st.integers(0, 10**6), ordered=st.booleans())
def test_critical_chain_equals_the_python_loop(prob, seed, ordered):
    """critical_chain's walk compiled: the same chain, on FIFO and kept-order schedules (zero-time
    nodes: ties between an input's arrival and the device predecessor's finish)."""
    from solvers.refine import critical_chain

    require_compiled()
    pl = placement_of(prob, seed)
    ev = evaluate(prob, pl)
    if ordered:
        other = evaluate(prob, placement_of(prob, seed + 1)).start  # a schedule of another placement: a valid order
        ev = evaluate(prob, pl, order=device_order(prob, pl, other))
    plain, fast = both(lambda: critical_chain(prob, ev))
    assert plain == fast
    assert plain and ev.finish[plain[0]] == ev.makespan


@settings(max_examples=150, deadline=None)
@given(prob=graphs, seed=st.integers(0, 10**6))
def test_the_bounds_structures_equal_the_python_loops(prob, seed):
    """The bound's structures of a base (forests sorted by counting, the avoid table filled by a
    compiled scatter, the witnesses) are the Python path's, value for value."""
    require_compiled()
    pl = placement_of(prob, seed)
    ref = evaluate(prob, placement_of(prob, seed + 1)).start  # a schedule of another placement

    def build():
        inc = IncrementalSchedule(prob, pl, ref)
        inc._prepare_bounds()
        return inc

    plain, fast = both(build)
    for name in ("_head_tin", "_head_end", "_tail_tin", "_tail_end"):
        a, b = getattr(plain, name), getattr(fast, name)
        assert a.dtype == b.dtype == np.int64 and np.array_equal(a, b), name
    for name in ("_avoid", "_before", "_after"):
        assert_same_floats(getattr(plain, name), getattr(fast, name))
    assert plain._witness == fast._witness


def test_auto_never_waits_for_a_load_under_way(monkeypatch):
    """Session 14 review: in auto mode a caller goes on with the Python loops while the kernels load
    (for_size's promise). A call made while the loader still held its lock with nothing loaded yet
    (numba being imported: ``_loaded`` still None) waited for the whole import and compile: 30 s
    of a solve's search thread with a stale cache. Here the load is faked and held open until the
    callers have returned; the generous join below only keeps a regression from hanging the suite."""
    import threading

    started, release, returned = threading.Event(), threading.Event(), threading.Event()

    def slow_load():  # as kernels.load: the lock held, nothing loaded yet (numba's import)
        with kernels._lock:
            started.set()
            release.wait()
            kernels._loaded = False  # as if numba were missing: the callers keep the Python loops
        return None

    monkeypatch.setenv(kernels.MODE_VAR, "auto")
    monkeypatch.setattr(kernels, "_loaded", None)
    monkeypatch.setattr(kernels, "_loader", None)
    monkeypatch.setattr(kernels, "load", slow_load)
    got = []

    def caller() -> None:
        got.append(kernels.for_size(10**6))  # starts the loader
        started.wait()
        got.append(kernels.for_size(10**6))  # during the load: must not wait for it
        returned.set()

    thread = threading.Thread(target=caller, daemon=True)
    thread.start()
    try:
        assert returned.wait(20.0), "for_size waited for the background load"
        assert got == [None, None]
    finally:
        release.set()
        thread.join(20.0)
        kernels._loader.join(20.0)


@settings(max_examples=200, deadline=None)
@given(prob=graphs, seed=st.integers(0, 10**6), fractional=st.booleans())
def test_device_peaks_equal_the_buffers_sweep(prob, seed, fractional):
    """placement.evaluator.peak_profile (each device's peak and the first time it is reached)
    through kernels.device_peaks equals the numpy buffers-and-sweep, bit for bit: on a FIFO
    schedule and on random start times with many ties (rounded to halves), with byte sizes that
    are whole and that are fractions (where the order of the sums shows in the last bits)."""
    require_compiled()
    from placement.evaluator import peak_profile

    rng = np.random.default_rng(seed)
    if fractional:
        prob = dataclasses.replace(prob, out_bytes=rng.random(prob.n) * 1e3 / 7)
    pl = placement_of(prob, seed)
    fifo = evaluate(prob, pl, memory_model="peak")
    start = np.round(rng.random(prob.n) * 8) / 2
    finish = start + np.round(rng.random(prob.n) * 4) / 2
    for s, f in ((fifo.start, fifo.finish), (start, finish)):
        (peak_p, when_p), (peak_f, when_f) = both(lambda: peak_profile(prob, pl, s, f))
        assert_same_floats(peak_p, peak_f)
        assert_same_floats(when_p, when_f)
