"""Exact max-load DP over ideals (Section 5.1.1) and its linearised variant DPL (Section 5.1.2).

The DP runs on the unit DAG of preprocess.py: every contiguous device set is I \\ I' for ideals
I' c I, and dp[I][k'][l'] is the least max-load splitting I over k' accelerators and l' CPU cores.
It is filled "push" style: ideals are visited by size, and from each I' the loads of all I \\ I'
(I a superset) are computed at once with numpy, from per-ideal prefix sums (compute, CPU time,
memory, unsupported nodes) and, for communication, the number of each tensor's endpoints inside
the ideal: a tensor crosses the boundary of I \\ I' iff its count difference is strictly between 0
and its endpoint count. Only the tensors partial in I' (its frontier) are looked at per pair: the
others cross I \\ I' iff they are partial in I, a per-ideal sum. Supersets are searched only among
the ideals whose compute lies within the DPL value of I' (docs/objectives.md, "The DP").

The DP is exact over the splits it searches: *pipelines* of unit-contiguous sets (the device sets,
in some order, are successive differences of ideals, so every edge of the unit DAG goes forward
along the pipeline). That is the paper's pipeline model, ``contiguity="pipeline"`` in
placement/objectives.py: colocation classes share a device anyway, a cycle of the contracted graph
cannot span two devices of a pipeline, and orphaned backward nodes are held by their mirrored edges.
So when the accelerators are identical (the DP checks memory against one capacity) the exact DP
reports status "optimal" for that model, with ``info["exact_in"]`` saying so; tests compare it
with brute force over pipelines. For the IP's ``"forward"`` contiguity, which also admits devices
that feed each other in a cycle, its value is only an upper bound; the IPs certify that class.
DPL searches a subset of the pipelines and always reports "feasible".
"""
from __future__ import annotations

import time

import numpy as np

from placement.objectives import (cpu_time, evaluate_maxload, max_cpus, node_bytes, supported, tensors)
from placement.problem import Problem
from placement.report import within_optimal_gap
from placement.solution import Solution, SolveOptions

from .preprocess import Units, build_units

DEFAULT_MAX_IDEALS = 60000


class TooManyIdeals(RuntimeError):
    pass


def enumerate_ideals(units: Units, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """All ideals of the unit DAG, by nondecreasing size, as (parent ideal, added unit) arrays:
    ideal 0 is empty and ideal j = ideal parent[j] plus unit added[j]."""
    n = units.count
    preds = [set(p) for p in units.pred]
    start = tuple(v for v in range(n) if not preds[v])
    index: dict[int, int] = {0: 0}
    parent = [-1]
    added = [-1]
    frontier: list[tuple[int, tuple[int, ...]]] = [(0, start)]
    while frontier:
        nxt: list[tuple[int, tuple[int, ...]]] = []
        for mask, cands in frontier:
            pid = index[mask]
            for v in cands:
                new = mask | (1 << v)
                if new in index:
                    continue
                index[new] = len(parent)
                parent.append(pid)
                added.append(v)
                if len(parent) > limit:
                    raise TooManyIdeals(f"more than {limit} ideals")
                more = [w for w in units.succ[v] if all((new >> p) & 1 for p in preds[w])]
                nxt.append((new, tuple(c for c in cands if c != v) + tuple(more)))
        frontier = nxt
    return np.asarray(parent, dtype=np.int64), np.asarray(added, dtype=np.int64)


def ideal_matrix(units: Units, parent: np.ndarray, added: np.ndarray) -> np.ndarray:
    x = np.zeros((parent.size, units.count), dtype=bool)
    for j in range(1, parent.size):
        x[j] = x[parent[j]]
        x[j, added[j]] = True
    return x


def solve_dp(problem: Problem, linearize: bool = False, max_ideals: int = DEFAULT_MAX_IDEALS,
             n_cpus: int | None = None, deadline: float | None = None, units: Units | None = None,
             combine: str = "max", upper: float | None = None,
             merge_leaves: bool | None = None) -> tuple[np.ndarray, float, dict]:
    """The best unit-contiguous split: (device array, value, info). ``combine="max"`` minimises the
    max-load; ``combine="sum"`` minimises the sum of device loads, i.e. the latency of running the
    device subgraphs one after another (an upper bound of the single-sample latency of the split).
    ``units`` replaces the Appendix B units (PipeDream's path of blocks, for instance).
    ``merge_leaves`` (default: on for ``"max"`` on the Appendix B units) merges free leaf units
    (preprocess.py). ``upper``: a value some split searched by this DP attains; with ``"max"`` only
    segments whose compute (accelerator or CPU) is at most ``upper`` are tried, which cannot
    remove an optimal split. By default the exact DP (``"max"``, not linearised) first runs DPL on
    the same units and uses its value: DPL's ideals are ideals of the unit DAG, so its split is
    one the DP searches."""
    t0 = time.monotonic()
    if combine not in ("max", "sum"):
        raise ValueError(f"combine must be 'max' or 'sum', got {combine!r}")
    join = np.maximum if combine == "max" else np.add
    if merge_leaves is None:
        merge_leaves = combine == "max" and units is None
    if units is None:
        if combine == "max" and not linearize and upper is None:
            upper = solve_dp(problem, linearize=True, max_ideals=max_ideals, n_cpus=n_cpus, deadline=deadline,
                             merge_leaves=merge_leaves)[1]
        units = build_units(problem, linearize=linearize, merge_leaves=merge_leaves)
    if combine != "max":
        upper = None
    parent, added = enumerate_ideals(units, max_ideals)
    x = ideal_matrix(units, parent, added)
    n_id = parent.size
    k = problem.k
    l = max_cpus(problem) if n_cpus is None else n_cpus
    # unit -> original node incidence, and per-unit sums
    n = problem.n
    unit_of = np.empty(n, dtype=np.int64)
    for u, mem in enumerate(units.members):
        unit_of[mem] = u
    nu = units.count

    def per_unit(values: np.ndarray) -> np.ndarray:
        return np.bincount(unit_of, weights=values, minlength=nu)

    xf = x.astype(np.float64)
    acc = xf @ per_unit(problem.time)
    cpu = xf @ per_unit(cpu_time(problem))
    mem = xf @ per_unit(node_bytes(problem))
    unsup = xf @ per_unit((~supported(problem)).astype(float))
    tens = tensors(problem)
    nt = tens.producer.size
    # endpoints of each tensor: producer and consumers (unique nodes)
    ends_t = np.concatenate([np.arange(nt), tens.of_edge])
    ends_v = np.concatenate([tens.producer, problem.dst])
    pairs = np.unique(np.stack([ends_t, unit_of[ends_v]], 1), axis=0)
    inc = np.zeros((nu, nt), dtype=np.float64)
    np.add.at(inc, (pairs[:, 1], pairs[:, 0]), 1.0)  # units touched per tensor (tensor inside a unit: never crosses)
    size_t = inc.sum(0)
    cnt = (xf @ inc).astype(np.int32)  # [ideal, tensor]: endpoints inside the ideal
    cost = tens.cost
    cap = float(problem.memory.min())
    inf = np.inf
    dp = np.full((k + 1, l + 1, n_id), inf)
    dp[0, 0, 0] = 0.0
    par = np.full((k + 1, l + 1, n_id), -1, dtype=np.int64)
    # ideal j's maximal units: the sub-ideals test needs only them
    succ_mat = np.zeros((nu, nu), dtype=np.float32)
    for a, ws in enumerate(units.succ):
        succ_mat[a, ws] = 1.0
    has_succ_in = (x.astype(np.float32) @ succ_mat.T) > 0  # [ideal, unit]: some successor of unit inside
    maximal = x & ~has_succ_in
    size = x.sum(1)
    pairs_done = 0
    # supersets of an ideal are searched among the ideals whose compute lies within ``upper`` of it
    slack = None if upper is None else upper * (1 + 1e-9) + 1e-9
    windows = [(np.argsort(vals, kind="stable"), vals) for vals in ([acc] if k > 0 else []) + ([cpu] if l > 0 else [])]
    windows = [(order, vals[order], vals) for order, vals in windows]
    partial = (cnt > 0) & (cnt < size_t)  # [ideal, tensor]: some but not all endpoints inside
    part_cost = partial @ cost  # crossing cost of each ideal on its own
    in_window = np.zeros(n_id, dtype=bool)
    for a in range(n_id):
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError("DP out of time")
        live = np.isfinite(dp[:, :, a])
        if not live.any():
            continue
        if slack is None:
            cand = np.arange(n_id)
        else:
            in_window[:] = False
            for order, sorted_vals, vals in windows:
                lo = sorted_vals.searchsorted(vals[a], "left")
                hi = sorted_vals.searchsorted(vals[a] + slack, "right")
                in_window[order[lo:hi]] = True
            cand = np.flatnonzero(in_window)
        cand = cand[size[cand] > size[a]]
        mx = np.flatnonzero(maximal[a])
        sup = cand[x[np.ix_(cand, mx)].all(1)] if mx.size else cand
        if sup.size == 0:
            continue
        pairs_done += sup.size
        cpu_load = cpu[sup] - cpu[a]
        acc_ok = (mem[sup] - mem[a] <= cap * (1 + 1e-12) + 1e-9) & (unsup[sup] - unsup[a] < 0.5)
        acc_load = np.full(sup.size, inf)
        if acc_ok.any() and k > 0:
            js = sup[acc_ok]
            # tensors partial in a cross j \ a iff j adds endpoints; the others iff partial in j
            bnd = np.flatnonzero(partial[a])
            sub = cnt[np.ix_(js, bnd)]
            fix = (sub > cnt[a, bnd]).astype(np.float64) - (sub < size_t[bnd])
            acc_load[acc_ok] = acc[js] - acc[a] + part_cost[js] + fix @ cost[bnd]
        for kk in range(k + 1):
            for ll in range(l + 1):
                base = dp[kk, ll, a]
                if not np.isfinite(base):
                    continue
                if kk < k:
                    cand = join(base, acc_load)
                    tgt = dp[kk + 1, ll, sup]
                    better = cand < tgt
                    if better.any():
                        dp[kk + 1, ll, sup[better]] = cand[better]
                        par[kk + 1, ll, sup[better]] = a
                if ll < l:
                    cand = join(base, cpu_load)
                    tgt = dp[kk, ll + 1, sup]
                    better = cand < tgt
                    if better.any():
                        dp[kk, ll + 1, sup[better]] = cand[better]
                        par[kk, ll + 1, sup[better]] = a
    full = n_id - 1
    assert size[full] == nu
    best = np.unravel_index(np.argmin(dp[:, :, full]), dp[:, :, full].shape)
    value = float(dp[best[0], best[1], full])
    if not np.isfinite(value):
        raise RuntimeError("no unit-contiguous split fits the accelerators' memory")
    split = np.empty(n, dtype=np.int64)
    kk, ll, j = int(best[0]), int(best[1]), full
    acc_next, cpu_next = 0, 0
    while j != 0:
        a = int(par[kk, ll, j])
        seg = np.flatnonzero(x[j] & ~x[a])
        nodes = np.concatenate([units.members[u] for u in seg])
        j_prev = a
        # which branch produced dp[kk, ll, j]: the one whose predecessor state is consistent
        from_acc = kk > 0 and dp[kk - 1, ll, a] <= dp[kk, ll, j] + 1e-12 and _seg_fits(nodes, problem, cap)
        from_cpu = ll > 0 and dp[kk, ll - 1, a] <= dp[kk, ll, j] + 1e-12
        seg_ev_acc = _acc_load(problem, nodes) if from_acc else inf
        seg_ev_cpu = float(cpu_time(problem)[nodes].sum()) if from_cpu else inf
        if from_acc and join(dp[kk - 1, ll, a], seg_ev_acc) <= dp[kk, ll, j] * (1 + 1e-9) + 1e-9:
            split[nodes] = acc_next
            acc_next += 1
            kk -= 1
        elif from_cpu and join(dp[kk, ll - 1, a], seg_ev_cpu) <= dp[kk, ll, j] * (1 + 1e-9) + 1e-9:
            split[nodes] = -1 - cpu_next
            cpu_next += 1
            ll -= 1
        else:
            raise AssertionError("DP reconstruction lost its way")
        j = j_prev
    # devices were numbered from the end of the pipeline; number them from its start
    accs = split >= 0
    split[accs] = acc_next - 1 - split[accs]
    cpus = ~accs
    split[cpus] = -1 - (cpu_next - 1 - (-1 - split[cpus]))
    info = {"ideals": int(n_id), "units": int(nu), "orphans": int(units.orphans), "pairs": int(pairs_done),
            "dp_value": value, "seconds": time.monotonic() - t0, "linearized": linearize}
    return split, value, info


def _seg_fits(nodes: np.ndarray, problem: Problem, cap: float) -> bool:
    return bool(node_bytes(problem)[nodes].sum() <= cap * (1 + 1e-12) + 1e-9 and supported(problem)[nodes].all())


def _acc_load(problem: Problem, nodes: np.ndarray) -> float:
    """Load of ``nodes`` alone on an accelerator (for reconstruction)."""
    split = np.full(problem.n, -1, dtype=np.int64)
    split[nodes] = 0
    from placement.objectives import device_loads

    fw, bw, _, _ = device_loads(problem, split, 1)
    return float(fw[0] + bw[0])


def _run(problem: Problem, opts: SolveOptions, name: str, linearize: bool) -> Solution:
    t0 = time.monotonic()
    rem = opts.remaining()
    deadline = None if rem is None else time.monotonic() + rem
    try:
        split, value, info = solve_dp(problem, linearize=linearize,
                                      max_ideals=int(opts.extra.get("max_ideals", DEFAULT_MAX_IDEALS)),
                                      deadline=deadline)
    except (TooManyIdeals, TimeoutError, RuntimeError) as exc:
        return Solution(name, "unknown", reason=f"{name}: {exc}", seconds=time.monotonic() - t0)
    if linearize:
        info["exact_in"] = "linearised unit pipelines"
        return finish_solution(problem, name, split, "feasible", t0, info, claimed=value)
    identical = bool(np.all(problem.memory == problem.memory[0]))
    info["exact_in"] = ("pipelines (contiguity='pipeline')" if identical
                        else "pipelines under the smallest accelerator memory")
    # the DP's value is the exact optimum over pipelines: the proved bound on identical accelerators
    return finish_solution(problem, name, split, "optimal" if identical else "feasible", t0, info,
                           claimed=value, lower_bound=value if identical else None, contiguity="pipeline")


def finish_solution(problem: Problem, name: str, split: np.ndarray, status: str, t0: float, info: dict,
                    claimed: float | None = None, lower_bound: float | None = None, contiguity: str = "forward",
                    objective: str = "max-load") -> Solution:
    """Evaluate a split with placement.objectives and wrap it; raise if a claimed value differs."""
    ev = evaluate_maxload(problem, split, objective=objective, contiguity=contiguity)
    if ev.violations:
        raise AssertionError(f"{name} returned an infeasible split: {ev.violations}")
    if claimed is not None and abs(claimed - ev.value) > 1e-6 * max(1.0, abs(ev.value)):
        raise AssertionError(f"{name}: claimed max-load {claimed} but the evaluator computes {ev.value}")
    info = dict(info)
    info["split"] = split
    info["cpu_nodes"] = np.flatnonzero(split < 0).tolist()
    info["breakdown"] = ev.breakdown(problem)
    info["objective_kind"] = objective
    info["contiguity"] = contiguity
    if status == "optimal" and not within_optimal_gap(ev.value, lower_bound, objective):
        raise AssertionError(f"{name} claims an optimal {objective} {ev.value} with the proved bound {lower_bound}")
    return Solution(name, status, placement=accelerator_placement(problem, split), objective=ev.value,
                    lower_bound=lower_bound, seconds=time.monotonic() - t0, info=info)


def accelerator_placement(problem: Problem, split: np.ndarray) -> np.ndarray:
    """Solution.placement: the split with each CPU node given the accelerator of its nearest
    placed predecessor in topological order (0 if none), so the array is a valid device vector;
    the authoritative split (CPU core c as -1 - c) is ``info['split']``."""
    out = split.copy()
    last = 0
    for v in problem.topo_order.tolist():
        if out[v] >= 0:
            last = int(out[v])
        else:
            out[v] = last
    return out


def dp_method(problem: Problem, opts: SolveOptions) -> Solution:
    return _run(problem, opts, "dp", linearize=False)


def dpl_method(problem: Problem, opts: SolveOptions) -> Solution:
    return _run(problem, opts, "dpl", linearize=True)
