"""Tofu's search: the DP for ``q`` worker groups, applied recursively for ``k = q_1 * .. * q_m``.

One *step* chooses, for every tensor variable (tied class), a layout splitting one dimension ``q``
ways, and for every operator the index variable it splits, minimising the bytes the conversions
move (placement.partition.plan.op_step_cost). Each operator is a DP factor over the variables of its
tensors; its table holds, per layout combination, the cost of its cheapest strategy (Tofu's
brute-force search within a group). :func:`recursive_plan` runs the step ``m`` times on the shapes
left by the previous steps (Tofu Sec. 5.2); :func:`joint_plan` is the non-recursive DP, whose
variables are whole sequences of layouts (small graphs only: its tables grow as ``dims^m``);
:func:`exhaustive_plan` enumerates every plan and prices it with the plan evaluator (tests).
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from placement.partition.graph import PGraph
from placement.partition.ops import REPLICA
from placement.partition.plan import (Plan, apply_step, factorize, initial_shapes, layout_ok, op_step_cost,
                                      plan_cost)

from .coarsen import tie_classes
from .dp import solve_factors


@dataclass
class SearchInfo:
    factors: list[int]
    step_costs: list[float] = field(default_factory=list)
    exact_steps: list[bool] = field(default_factory=list)
    largest_table: int = 0
    variables: int = 0
    seconds: float = 0.0


def class_domains(g: PGraph, classes: list[int], shapes: list, q: int) -> list[list[Any]]:
    """Per variable, its layouts at this step: each dimension that splits evenly ``q`` ways
    (Tofu partitions every tensor), or REPLICA for a tensor with none."""
    rep: dict[int, int] = {}
    for t, c in enumerate(classes):
        rep.setdefault(c, t)
    doms = []
    for c in range(len(rep)):
        shape = shapes[rep[c]]
        if g.ops[g.tensors[rep[c]].producer].role == "placed":  # whole on its device: no layout to choose
            doms.append([REPLICA])
            continue
        opts = [("split", d) for d in range(len(shape))] if shape is not None else []
        opts = [lay for lay in opts if layout_ok(shape, lay, q)]
        doms.append(opts or [REPLICA])
    return doms


def op_strategies(g: PGraph, o: int, extents: dict[str, int], q: int) -> list[str | None]:
    op = g.ops[o]
    if op.role != "op" or op.desc is None:
        return [None]
    return op.desc.strategies(extents, q) or [None]


def _op_factor(g: PGraph, o: int, classes: list[int], doms: list[list[Any]], strategies: Sequence[Any],
               cost: Callable[[int, Any, dict[int, Any]], float]) -> tuple[tuple[int, ...], np.ndarray]:
    """The operator's table over its variables: the cheapest strategy's cost per layout combination."""
    op = g.ops[o]
    tens = [t for t in op.inputs if t >= 0] + list(op.outputs)
    vs = tuple(dict.fromkeys(classes[t] for t in tens))
    table = np.empty([len(doms[v]) for v in vs])
    for idx in itertools.product(*(range(len(doms[v])) for v in vs)):
        val = dict(zip(vs, idx))
        lay = {t: doms[classes[t]][val[classes[t]]] for t in tens}
        table[idx] = min(cost(o, s, lay) for s in strategies)
    return vs, table


def _choose(strategies: Sequence[Any], price: Callable[[Any], float]) -> Any:
    costs = [price(s) for s in strategies]
    return strategies[int(np.argmin(costs))]


class SearchStopped(Exception):
    """The caller's stop condition (time limit, Ctrl-C) fired before the plan was complete."""


class TableTooLarge(Exception):
    """An operator reads or writes so many distinct tensors that its table of layout combinations
    (one entry per combination, Tofu's brute force within an operator) cannot be built: the
    stack of an unrolled LSTM's 100 time steps has 3^101 combinations (and numpy at most 64
    dimensions). Such a graph has no plan from this search."""


def _table_cells(vs: Sequence[int], doms: list[list[Any]]) -> int:
    """Entries of an operator's table over variables ``vs`` (exact integer product)."""
    return math.prod(len(doms[v]) for v in vs)


def _check_tables(g: PGraph, classes: list[int], doms: list[list[Any]], max_cells: int) -> None:
    """Raise :class:`TableTooLarge` naming the first operator whose table would exceed
    ``max_cells`` entries (checked before any table is enumerated, so no time is lost on it)."""
    for o, op in enumerate(g.ops):
        vs = tuple(dict.fromkeys(classes[t] for t in [t for t in op.inputs if t >= 0] + list(op.outputs)))
        cells = _table_cells(vs, doms)
        if cells > max_cells:
            raise TableTooLarge(f"operator {g.problem.ids[o]!r} has {len(vs)} distinct tensors: its table of layout "
                                f"combinations would hold {cells:.3g} entries (limit {max_cells})")


def _never() -> bool:
    return False


def solve_step(g: PGraph, classes: list[int], shapes: list, extents: list[dict[str, int]], q: int,
               max_cells: int = 1 << 18, stop: Callable[[], bool] = _never) -> tuple[list[Any], list[Any], float, bool, int]:
    """One recursive step: (layout per tensor, strategy per node, cost, exact, entries of the largest DP table).
    ``stop`` is polled every 64 operators; when it returns True, :class:`SearchStopped` is raised."""
    doms = class_domains(g, classes, shapes, q)
    _check_tables(g, classes, doms, max_cells)
    strats = [op_strategies(g, o, extents[o], q) for o in range(len(g.ops))]
    cost = lambda o, s, lay: op_step_cost(g, o, s, lay, q)  # noqa: E731
    factors = []
    for o in range(len(g.ops)):
        if o % 64 == 0 and stop():
            raise SearchStopped(f"stopped while building the step's tables ({o} of {len(g.ops)} operators)")
        factors.append(_op_factor(g, o, classes, doms, strats[o], cost))
    res = solve_factors([len(d) for d in doms], factors, max_cells=max_cells, stop=stop)
    if res.stopped:
        raise SearchStopped("stopped during the DP")
    layouts = [doms[classes[t]][res.assignment[classes[t]]] for t in range(len(g.tensors))]
    chosen = [_choose(strats[o], lambda s, o=o: cost(o, s, layouts)) for o in range(len(g.ops))]
    return layouts, chosen, res.cost, res.exact, res.largest_table


def recursive_plan(g: PGraph, k: int, *, tie: bool = True, factors: Sequence[int] | None = None,
                   max_cells: int = 1 << 18, stop: Callable[[], bool] = _never) -> tuple[Plan, SearchInfo]:
    """Tofu's recursive search: one DP per factor of ``k`` (largest first), each on the shapes the
    previous steps left. Raises :class:`SearchStopped` when ``stop()`` turns True."""
    t0 = time.monotonic()
    factors = list(factors) if factors is not None else factorize(k)
    classes = tie_classes(g, tie)
    shapes, extents = initial_shapes(g)
    info = SearchInfo(factors, variables=max(classes) + 1 if classes else 0)
    plan = Plan(factors, [], [])
    for q in factors:
        layouts, chosen, cost, exact, widest = solve_step(g, classes, shapes, extents, q, max_cells=max_cells, stop=stop)
        plan.layouts.append(layouts)
        plan.strategies.append(chosen)
        info.step_costs.append(cost)
        info.exact_steps.append(exact)
        info.largest_table = max(info.largest_table, widest)
        apply_step(shapes, extents, layouts, chosen, q)
    info.seconds = time.monotonic() - t0
    return plan, info


# ----- the non-recursive DP and exhaustive search (small graphs) ------------------------------------

def _sequences(start: list[int] | dict[str, int] | None, options: Callable[[Any, int], list[Any]],
               shrink: Callable[[Any, Any, int], Any], factors: Sequence[int]) -> list[tuple]:
    """All choice sequences over the steps, each choice feasible on what the earlier ones left."""
    out: list[tuple] = []

    def rec(state: Any, i: int, acc: tuple) -> None:
        if i == len(factors):
            out.append(acc)
            return
        for c in options(state, factors[i]):
            rec(shrink(state, c, factors[i]), i + 1, acc + (c,))

    rec(start, 0, ())
    return out


def _layout_sequences(shape: list[int] | None, factors: Sequence[int]) -> list[tuple]:
    def options(sh: Any, q: int) -> list[Any]:
        opts = [("split", d) for d in range(len(sh))] if sh is not None else []
        return [x for x in opts if layout_ok(sh, x, q)] or [REPLICA]

    def shrink(sh: Any, lay: Any, q: int) -> Any:
        if lay == REPLICA:
            return sh
        sh = list(sh)
        sh[lay[1]] //= q
        return sh

    return _sequences(shape, options, shrink, factors)


def _strategy_sequences(g: PGraph, o: int, factors: Sequence[int]) -> list[tuple]:
    op = g.ops[o]
    ext0 = dict(op.desc.extents) if op.desc is not None else {}

    def options(ext: dict[str, int], q: int) -> list[Any]:
        if op.role != "op" or op.desc is None:
            return [None]
        return op.desc.strategies(ext, q) or [None]

    def shrink(ext: dict[str, int], s: Any, q: int) -> dict[str, int]:
        ext = dict(ext)
        if s is not None:
            ext[s] //= q
        return ext

    return _sequences(ext0, options, shrink, factors)


def _sequence_domains(g: PGraph, k: int, tie: bool, factors: Sequence[int] | None
                      ) -> tuple[list[int], list[int], list[list[Any]], list[list[Any]]]:
    """What the whole-plan searches choose from: the step factors, each tensor's tie class, each
    class's layout sequences over the steps, and each operator's strategy sequences."""
    factors = list(factors) if factors is not None else factorize(k)
    classes = tie_classes(g, tie)
    shapes, _ = initial_shapes(g)
    rep: dict[int, int] = {}
    for t, c in enumerate(classes):
        rep.setdefault(c, t)
    doms = [_layout_sequences(shapes[rep[c]], factors) for c in range(len(rep))]
    strats = [_strategy_sequences(g, o, factors) for o in range(len(g.ops))]
    return factors, classes, doms, strats


def joint_plan(g: PGraph, k: int, *, tie: bool = True, factors: Sequence[int] | None = None,
               max_cells: int = 1 << 22) -> tuple[Plan, float, bool]:
    """The non-recursive DP: each variable's value is its whole sequence of layouts over the steps,
    each operator's its sequence of strategies; exact over all plans of the (tied) model unless a
    table would exceed ``max_cells`` (then conditioned: the third value is False)."""
    factors, classes, doms, strats = _sequence_domains(g, k, tie, factors)

    def seq_cost(o: int, seq: tuple, lay: dict[int, tuple]) -> float:
        return sum(op_step_cost(g, o, seq[i], {t: lay[t][i] for t in lay}, q) for i, q in enumerate(factors))

    fac = [_op_factor(g, o, classes, doms, strats[o], seq_cost) for o in range(len(g.ops))]
    res = solve_factors([len(d) for d in doms], fac, max_cells=max_cells)
    seqs = [doms[classes[t]][res.assignment[classes[t]]] for t in range(len(g.tensors))]
    lay_t = {t: seqs[t] for t in range(len(g.tensors))}
    chosen = [_choose(strats[o], lambda s, o=o: seq_cost(o, s, lay_t)) for o in range(len(g.ops))]
    plan = Plan(factors, [[seqs[t][i] for t in range(len(g.tensors))] for i in range(len(factors))],
                [[chosen[o][i] for o in range(len(g.ops))] for i in range(len(factors))])
    return plan, res.cost, res.exact


def exhaustive_plan(g: PGraph, k: int, *, tie: bool = True, factors: Sequence[int] | None = None,
                    limit: int = 2_000_000) -> tuple[Plan, float]:
    """Every plan (layout and strategy sequences, tied classes sharing layouts) priced by
    :func:`plan_cost`; the cheapest (first found on ties). For tests on tiny graphs."""
    factors, classes, doms, strats = _sequence_domains(g, k, tie, factors)
    total = math.prod(len(d) for d in doms) * math.prod(len(s) for s in strats)
    if total > limit:
        raise ValueError(f"{total} plans: too many to enumerate")
    best: tuple[float, Plan] | None = None
    for lay_choice in itertools.product(*doms):
        for st_choice in itertools.product(*strats):
            plan = Plan(factors, [[lay_choice[classes[t]][i] for t in range(len(g.tensors))] for i in range(len(factors))],
                        [[st_choice[o][i] for o in range(len(g.ops))] for i in range(len(factors))])
            c = plan_cost(g, plan)
            if best is None or c < best[0] - 1e-9:
                best = (c, plan)
    assert best is not None
    return best[1], best[0]
