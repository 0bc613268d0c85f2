"""Operator partitioning (Tofu): operator strategies on hand-worked shapes, the plan evaluator on a
hand example, the DP against exhaustive search over plans, and the commutativity of recursive steps."""
from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

import numpy as np
import pytest

from heuristics.tofu.dp import solve_factors
from heuristics.tofu.search import exhaustive_plan, joint_plan, recursive_plan, solve_step
from heuristics.tofu.coarsen import tie_classes
from placement.partition.graph import build_graph
from placement.partition.ops import PARTIAL, REPLICA, WHOLE, describe
from placement.partition.plan import Plan, PlanError, evaluate_plan, factorize, initial_shapes, plan_cost
from placement.partition.training import mlp
from placement.problem import Link, make_problem
from placement.solution import SolveOptions
from solvers.run import run
from tests.conftest import with_slow


def meta(op, ins, outs):
    return {"op": op, "inputs": [{"shape": list(s), "dtype": "float32"} for s in ins],
            "outputs": [{"shape": list(s), "dtype": "float32"} for s in outs]}


def strategies(d):
    """{var: ([need per input], [form per output])}"""
    return {v: ([d.input_need(i, v) for i in range(len(d.inputs))], [d.output_form(j, v) for j in range(len(d.outputs))])
            for v in d.extents}


# ----- operator strategies on hand-worked shapes -------------------------------------------------

def test_matmul_rows_columns_and_reduction():
    d = describe(meta("aten.mm", [(8, 6), (6, 4)], [(8, 4)]))
    s = strategies(d)
    assert s["i"] == ([("split", 0), WHOLE], [("split", 0)])  # rows: A by rows, all of B
    assert s["j"] == ([WHOLE, ("split", 1)], [("split", 1)])  # columns: all of A, B by columns
    assert s["k"] == ([("split", 1), ("split", 0)], [PARTIAL])  # reduction dim: partial sums
    assert d.extents == {"i": 8, "k": 6, "j": 4}
    assert d.strategies(d.extents, 4) == ["i", "j"]  # 6 does not split 4 ways


def test_addmm_and_linear_bias():
    d = describe(meta("aten.addmm", [(4,), (8, 6), (6, 4)], [(8, 4)]))
    s = strategies(d)
    assert s["j"][0] == [("split", 0), WHOLE, ("split", 1)]
    assert s["i"][0] == [WHOLE, ("split", 0), WHOLE]
    lin = describe(meta("aten.linear", [(2, 8, 6), (4, 6), (4,)], [(2, 8, 4)]))
    ls = strategies(lin)
    assert ls["j"] == ([WHOLE, ("split", 0), ("split", 0)], [("split", 2)])
    assert ls["k"] == ([("split", 2), ("split", 1), WHOLE], [PARTIAL])
    assert ls["b1"] == ([("split", 1), WHOLE, WHOLE], [("split", 1)])


def test_conv_batch_output_and_input_channels():
    d = describe(meta("aten.convolution", [(4, 8, 5, 5), (16, 8, 3, 3), (16,)], [(4, 16, 5, 5)]))
    s = strategies(d)
    assert set(d.extents) == {"n", "ci", "co"}  # spatial dims are halo cases: never split
    assert s["n"] == ([("split", 0), WHOLE, WHOLE], [("split", 0)])
    assert s["co"] == ([WHOLE, ("split", 0), ("split", 0)], [("split", 1)])
    assert s["ci"] == ([("split", 1), ("split", 1), WHOLE], [PARTIAL])


def test_conv_backward_and_layer_norm_backward():
    d = describe(meta("aten.convolution_backward", [(4, 16, 5, 5), (4, 8, 5, 5), (16, 8, 3, 3)],
                      [(4, 8, 5, 5), (16, 8, 3, 3), (16,)]))
    s = strategies(d)
    assert s["n"] == ([("split", 0), ("split", 0), WHOLE], [("split", 0), PARTIAL, PARTIAL])
    assert s["co"] == ([("split", 1), WHOLE, ("split", 0)], [PARTIAL, ("split", 0), ("split", 0)])
    assert s["ci"] == ([WHOLE, ("split", 1), ("split", 1)], [("split", 1), ("split", 1), REPLICA])
    ln = describe(meta("aten.native_layer_norm_backward", [(8, 16), (8, 16), (8, 1), (8, 1), (16,), (16,)],
                       [(8, 16), (16,), (16,)]))
    assert strategies(ln)["d0"][1] == [("split", 0), PARTIAL, PARTIAL]


def test_elementwise_broadcast_softmax_and_undescribed():
    d = describe(meta("aten.add", [(8, 4), (4,)], [(8, 4)]))
    assert strategies(d)["d0"] == ([("split", 0), WHOLE], [("split", 0)])
    assert strategies(d)["d1"] == ([("split", 1), ("split", 0)], [("split", 1)])
    assert not d.elementwise and describe(meta("aten.relu", [(8, 4)], [(8, 4)])).elementwise
    sm = describe(meta("aten._softmax", [(8, 4)], [(8, 4)]))
    assert list(sm.extents) == ["d0"]
    cat = describe(meta("aten.cat", [(8, 4), (8, 4)], [(16, 4)]))
    assert strategies(cat) == {"d1": ([("split", 1), ("split", 1)], [("split", 1)])}  # the joined dim stays whole
    assert describe(meta("aten.sort", [(8, 4)], [(8, 4), (8, 4)])) is None
    assert describe(meta("aten.mm", [(8, 6), (5, 4)], [(8, 4)])) is None  # shapes contradict the op
    assert describe(meta("onnx.MatMul", [(8, 6), (6, 4)], [(8, 4)])).extents == {"i": 8, "k": 6, "j": 4}


# ----- the plan evaluator on a hand example -------------------------------------------------------

def hand_problem():
    """x[8,4] and W[4,4] (sources) -> mm -> y[8,4] -> relu -> z[8,4]; float32."""
    nodes = [{"id": "x", "time": 0, "out_bytes": 128, "param_bytes": 0},
             {"id": "W", "time": 0, "out_bytes": 0, "param_bytes": 64},
             {"id": "mm", "time": 10, "out_bytes": 128, "param_bytes": 0},
             {"id": "relu", "time": 2, "out_bytes": 128, "param_bytes": 0}]
    edges = [{"src": "x", "dst": "mm", "bytes": 128}, {"src": "W", "dst": "mm", "bytes": 64},
             {"src": "mm", "dst": "relu", "bytes": 128}]
    p = make_problem(nodes, edges, devices=2, memory=1e9, link=Link(latency=1.0, bandwidth=16.0))
    metas = [meta("placeholder", [], [(8, 4)]), meta("placeholder", [], [(4, 4)]),
             meta("aten.mm", [(8, 4), (4, 4)], [(8, 4)]), meta("aten.relu", [(8, 4)], [(8, 4)])]
    em = [{"src_output": 0, "dst_inputs": [0]}, {"src_output": 0, "dst_inputs": [1]}, {"src_output": 0, "dst_inputs": [0]}]
    return replace(p, node_meta=metas, edge_meta=em)


def test_plan_evaluator_hand_example():
    g = build_graph(hand_problem())
    rows = ("split", 0)
    plan = Plan([2], [[rows, rows, rows, rows]], [[None, None, "i", "d0"]])
    # mm by rows needs all of W: each device fetches its partner's 32 bytes of W.
    assert plan_cost(g, plan) == 64.0
    pe = evaluate_plan(g, plan, "static")
    # W arrives at 1 + 32/16 = 3; mm's half runs [3, 8), relu's half [8, 9).
    assert pe.makespan == pytest.approx(9.0)
    # x 64 + W 32 + received W 32 + y 64 + z 64 per device; single device 448.
    assert pe.evaluation.static_memory.tolist() == [256.0, 256.0]
    assert pe.single_memory == 448.0
    # mm by its reduction dim: x needs columns (64 bytes), y is a partial reduce-scattered (128).
    plan_k = Plan([2], [[rows, rows, rows, rows]], [[None, None, "k", "d0"]])
    assert plan_cost(g, plan_k) == 64.0 + 128.0
    with pytest.raises(PlanError):
        plan_cost(g, Plan([8], [[rows] * 4], [[None, None, "i", "d0"]]))  # W's 4 rows do not split 8 ways


def test_factorize_is_largest_first():
    assert factorize(8) == [2, 2, 2]
    assert factorize(12) == [3, 2, 2]
    assert factorize(7) == [7]
    assert factorize(1) == []


# ----- DP against exhaustive search ---------------------------------------------------------------

def random_chain(rng: random.Random, ops: int):
    """A random chain of matrix products, transposes and element-wise ops with weights as sources."""
    nodes, edges, metas, em = [], [], [], []
    dims = [2, 4, 8]

    def node(nid, op, ins, outs, time=1.0, param=0.0):
        nodes.append({"id": nid, "time": time, "out_bytes": 0.0 if param else 4.0 * sum(math.prod(s) for s in outs), "param_bytes": param})
        metas.append(meta(op, ins, outs))

    shape = (rng.choice(dims), rng.choice(dims))
    node("x", "placeholder", [], [shape], 0.0)
    prev = "x"
    for i in range(ops):
        kind = rng.choice(["mm", "mm", "relu", "t", "add"])
        nid = f"o{i}"
        if kind == "mm":
            n = rng.choice(dims)
            node(f"w{i}", "placeholder", [], [(shape[1], n)], 0.0, param=4.0 * shape[1] * n)
            node(nid, "aten.mm", [shape, (shape[1], n)], [(shape[0], n)])
            edges.append({"src": prev, "dst": nid, "bytes": 4.0 * math.prod(shape)}); em.append({"src_output": 0, "dst_inputs": [0]})
            edges.append({"src": f"w{i}", "dst": nid, "bytes": 4.0 * shape[1] * n}); em.append({"src_output": 0, "dst_inputs": [1]})
            shape = (shape[0], n)
        elif kind == "t":
            node(nid, "aten.t", [shape], [shape[::-1]])
            edges.append({"src": prev, "dst": nid, "bytes": 4.0 * math.prod(shape)}); em.append({"src_output": 0, "dst_inputs": [0]})
            shape = shape[::-1]
        elif kind == "add":  # a skip connection: prev + the tensor two ops back when shapes agree
            node(nid, "aten.add", [shape, shape], [shape])
            edges.append({"src": prev, "dst": nid, "bytes": 4.0 * math.prod(shape)}); em.append({"src_output": 0, "dst_inputs": [0, 1]})
        else:
            node(nid, "aten.relu", [shape], [shape])
            edges.append({"src": prev, "dst": nid, "bytes": 4.0 * math.prod(shape)}); em.append({"src_output": 0, "dst_inputs": [0]})
        prev = nid
    p = make_problem(nodes, edges, devices=2, memory=1e12, link=Link(1.0, 100.0))
    order = {(int(p.src[e]), int(p.dst[e])): e for e in range(p.m)}
    emeta = [None] * p.m
    for rec, m in zip(edges, em):
        emeta[order[(p.index[rec["src"]], p.index[rec["dst"]])]] = m
    return replace(p, node_meta=metas, edge_meta=emeta)


@pytest.mark.parametrize("seed", with_slow(range(12), {5, 8}))  # 2-3 s each
def test_dp_equals_exhaustive_two_workers(seed):
    g = build_graph(random_chain(random.Random(seed), 3 + seed % 3))
    for tie in (True, False):
        plan, info = recursive_plan(g, 2, tie=tie)
        _, best = exhaustive_plan(g, 2, tie=tie)
        assert info.exact_steps == [True]
        assert plan_cost(g, plan) == pytest.approx(best)
        assert info.step_costs[0] == pytest.approx(best)


@pytest.mark.parametrize("seed", range(6))
def test_recursive_and_joint_dp_equal_exhaustive_four_workers(seed):
    g = build_graph(random_chain(random.Random(100 + seed), 2))
    _, best = exhaustive_plan(g, 4)
    joint, joint_cost, exact = joint_plan(g, 4)
    assert exact and joint_cost == pytest.approx(best)
    assert plan_cost(g, joint) == pytest.approx(best)
    plan, _ = recursive_plan(g, 4)
    # Tofu's optimality claim for the recursion, checked: same cost as the best of all plans.
    assert plan_cost(g, plan) == pytest.approx(best)


def test_dp_on_training_graph_equals_exhaustive_per_step():
    """A 1-layer MLP training step (forward, backward, Adam) has too many plans to enumerate, so
    the DP is checked against enumeration of the layouts of its variables with the evaluator's cost."""
    g = build_graph(mlp(4, [4], 2))
    classes = tie_classes(g)
    shapes, extents = initial_shapes(g)
    layouts, chosen, cost, exact, _ = solve_step(g, classes, shapes, extents, 2)
    assert exact
    plan = Plan([2], [layouts], [chosen])
    assert plan_cost(g, plan) == pytest.approx(cost)
    # Brute force over variables: each variable's layout, each operator's cheapest strategy.
    from placement.partition.plan import op_step_cost
    from heuristics.tofu.search import class_domains, op_strategies
    doms = class_domains(g, classes, shapes, 2)
    nvar = len(doms)
    assert math.prod(len(d) for d in doms) <= 1 << 16
    lowest = math.inf
    for combo in itertools.product(*[range(len(d)) for d in doms]):
        lay = [doms[classes[t]][combo[classes[t]]] for t in range(len(g.tensors))]
        total = sum(min(op_step_cost(g, o, s, lay, 2) for s in op_strategies(g, o, extents[o], 2)) for o in range(len(g.ops)))
        lowest = min(lowest, total)
    assert nvar > 5 and cost == pytest.approx(lowest)


def test_conditioning_is_marked_inexact_and_never_better():
    rng = np.random.default_rng(3)
    domains = [3] * 8
    factors = [((i, i + 1), rng.random((3, 3))) for i in range(7)] + [((0, 7), rng.random((3, 3)))]
    exact = solve_factors(domains, factors)
    brute = min(sum(t[a[v[0]], a[v[1]]] for v, t in factors) for a in itertools.product(range(3), repeat=8))
    assert exact.exact and exact.cost == pytest.approx(brute)
    capped = solve_factors(domains, factors, max_cells=9)
    assert not capped.exact and capped.cost >= brute - 1e-12
    assert sum(t[capped.assignment[v[0]], capped.assignment[v[1]]] for v, t in factors) == pytest.approx(capped.cost)


# ----- commutativity of recursive steps -------------------------------------------------------------

@pytest.mark.parametrize("seed", range(8))
def test_recursive_plan_cost_is_independent_of_step_order(seed):
    g = build_graph(random_chain(random.Random(200 + seed), 4))
    k = [4, 8, 6][seed % 3]
    plan, _ = recursive_plan(g, k)
    base = plan_cost(g, plan)
    mem = evaluate_plan(g, plan).evaluation.static_memory
    for order in itertools.permutations(range(len(plan.factors))):
        other = plan.reordered(order)
        try:
            assert plan_cost(g, other) == pytest.approx(base)
        except PlanError:
            continue  # a later step's split no longer divides evenly when applied first
        assert np.allclose(evaluate_plan(g, other).evaluation.static_memory, mem)


# ----- solve --method tofu ----------------------------------------------------------------------------

def test_run_tofu_reports_a_partitioned_plan():
    prob = mlp(16, [32, 32], 8).with_devices(4)
    res = run(prob, "tofu")
    rep = res.report(prob, "static")
    assert rep["status"] == "heuristic" and rep["placement"] is None and rep["lower_bound"] is None
    part = rep["partition"]
    g = build_graph(prob)
    pe = evaluate_plan(g, res.solution.info["plan"], "static")
    assert rep["makespan"] == pytest.approx(pe.makespan)
    assert part["communication_bytes"] == pytest.approx(pe.comm_bytes)
    assert max(part["static_memory"]) == pytest.approx(float(pe.memory.max()))
    assert part["factors"] == [2, 2]


def test_tofu_keeps_the_runs_clock():
    """The limit counts from the run's start (``opts.started``): a run with 0.01 s of its limit
    left gets no plan, where restarting the clock for the method (as run_partitioned did until
    session 40) let Tofu plan and check with the whole limit again, past the run's end."""
    import time as _time

    prob = mlp(16, [32, 32], 8).with_devices(4)
    res = run(prob, "tofu", SolveOptions(time_limit=60.0, started=_time.monotonic() - 59.99))
    assert res.status == "unknown" and res.value is None
    assert "time" in res.reason or "stop" in res.reason
    fresh = run(prob, "tofu", SolveOptions(time_limit=60.0))
    assert fresh.status == "heuristic"  # the same graph with its time plans


def test_run_tofu_without_meta_says_why():
    prob = make_problem([{"id": "a", "time": 1, "out_bytes": 1, "param_bytes": 0}], [], devices=2)
    res = run(prob, "tofu")
    assert res.status == "unknown" and "node_meta" in res.reason


def test_cli_summary_names_the_partitioned_plan():
    from solvers.cli import summary

    prob = mlp(16, [32, 32], 8).with_devices(2)
    text = summary(prob, run(prob, "tofu"), "static")
    assert "partitioned plan (Tofu) over 2 devices" in text and "x (single device" in text


def test_auto_takes_the_partitioned_plan_when_no_placement_fits():
    """One activation is larger than a device, so no placement of whole operators fits (proved),
    but every tensor split 16 ways does."""
    base = mlp(256, [64], 8).with_devices(16)
    g = build_graph(base)
    plan, _ = recursive_plan(g, 16)
    need = float(evaluate_plan(g, plan, "static").memory.max())
    assert float(np.max(base.param_bytes + base.out_bytes)) > need * 1.01
    prob = base.with_devices(16, memory=need * 1.01)
    res = run(prob, "auto", SolveOptions(time_limit=20))
    assert res.method == "auto:tofu" and res.status == "heuristic"
    assert "no whole-operator placement" in res.partition["choice"]
    assert res.value == pytest.approx(evaluate_plan(g, res.solution.info["plan"], "static").makespan)


def test_auto_keeps_the_placement_when_it_is_faster():
    """A tiny graph: transfers (latency 10 each) cost far more than computing on one device, so the
    placement wins and the report keeps the partitioned plan's makespan and the reason."""
    prob = mlp(16, [32, 32], 8).with_devices(2)
    res = run(prob, "auto", SolveOptions(time_limit=10))
    part = run(prob, "tofu")
    assert res.method != "auto:tofu" and res.evaluation is not None
    entry = [h for h in res.history if h.get("method") == "tofu"][0]
    assert entry["makespan"] == pytest.approx(part.value)
    assert res.evaluation.makespan <= part.value and "<=" in entry["choice"]


def test_folded_transpose_and_multi_tensor_edges():
    """Importers fold t/view into the edge: mm reads W[4, 6] as [6, 4]; one edge carries two
    outputs of a node (edge_meta 'tensors')."""
    from placement.partition.plan import needs

    nodes = [{"id": "x", "time": 0, "out_bytes": 64, "param_bytes": 0},
             {"id": "W", "time": 0, "out_bytes": 0, "param_bytes": 96},
             {"id": "mm", "time": 1, "out_bytes": 32, "param_bytes": 0},
             {"id": "two", "time": 1, "out_bytes": 64, "param_bytes": 0},
             {"id": "add", "time": 1, "out_bytes": 32, "param_bytes": 0}]
    edges = [{"src": "x", "dst": "mm", "bytes": 64}, {"src": "W", "dst": "mm", "bytes": 96},
             {"src": "mm", "dst": "two", "bytes": 32}, {"src": "two", "dst": "add", "bytes": 64}]
    p = make_problem(nodes, edges, devices=2, link=Link(1.0, 16.0))
    metas = [meta("placeholder.input", [], [(2, 6)]), meta("placeholder.param", [], [(4, 6)]),
             meta("aten.mm", [(2, 6), (6, 4)], [(2, 4)]), meta("aten.native_dropout", [(2, 4)], [(2, 4), (2, 4)]),
             meta("aten.add", [(2, 4), (2, 4)], [(2, 4)])]
    em = [{"src_output": 0, "dst_inputs": [0]}, {"src_output": 0, "dst_inputs": [1]}, {"src_output": 0, "dst_inputs": [0]},
          {"src_output": 0, "dst_inputs": [0], "tensors": [{"src_output": 0, "dst_inputs": [0]}, {"src_output": 1, "dst_inputs": [1]}]}]
    g = build_graph(replace(p, node_meta=metas, edge_meta=em))
    assert g.ops[4].inputs == g.ops[3].outputs  # both outputs of 'two' reach their slots
    assert g.ops[2].in_maps[1] == [1, 0]
    lay = [REPLICA] * len(g.tensors)
    # mm by columns j needs B's columns = W's rows; by the reduction k, B's rows = W's columns.
    assert needs(g, 2, "j", lay)[1] == ("split", 0)
    assert needs(g, 2, "k", lay)[1] == ("split", 1)


def test_importer_shapes_attention_masks_and_creation_ops():
    """Shapes as the torch importer records them: a conv backward without grad_input ({}), fused
    attention, the importer's 'saved' identity, and ops without inputs (sources)."""
    d = describe({"op": "aten.convolution_backward",
                  "inputs": [{"shape": [2, 16, 8, 8]}, {"shape": [2, 3, 8, 8]}, {"shape": [16, 3, 3, 3]}],
                  "outputs": [{}, {"shape": [16, 3, 3, 3]}, {}]})
    assert strategies(d)["co"][1] == [REPLICA, ("split", 0), REPLICA]
    assert strategies(d)["n"][1] == [REPLICA, PARTIAL, REPLICA]
    att = describe(meta("aten._scaled_dot_product_flash_attention_for_cpu", [(2, 4, 16, 8)] * 3, [(2, 4, 16, 8), (2, 4, 16)]))
    assert strategies(att)["s"] == ([("split", 2), WHOLE, WHOLE], [("split", 2), ("split", 2)])
    assert strategies(att)["h"][0] == [("split", 1)] * 3
    bwd = describe(meta("aten._scaled_dot_product_flash_attention_for_cpu_backward",
                        [(2, 4, 16, 8)] * 5 + [(2, 4, 16)], [(2, 4, 16, 8)] * 3))
    assert strategies(bwd)["s"][1] == [("split", 2), PARTIAL, PARTIAL]
    assert describe(meta("saved", [(8, 1)], [(8, 1)])).elementwise


def test_stop_request_ends_the_search_with_a_reason():
    prob = mlp(16, [32, 32], 8).with_devices(4)
    opts = SolveOptions()
    opts.stop.set()
    res = run(prob, "tofu", opts)
    assert res.status == "unknown" and "stop" in res.reason and res.partition is None


def test_recursion_loses_optimality_when_small_dims_run_out():
    """Tofu's optimality argument needs every step's choices to stay available in any order; a
    2 x 2 matrix product split 8 ways runs out of dims: the recursion (rows first, its cheapest
    first step) ends 20% above the joint DP's optimum, which defers rows to the last step."""
    g = build_graph(random_chain(random.Random(1025), 3))
    plan, info = recursive_plan(g, 8)
    joint, best, exact = joint_plan(g, 8)
    assert exact and plan_cost(g, joint) == pytest.approx(best)
    assert plan_cost(g, plan) == pytest.approx(96.0) and best == pytest.approx(80.0)


def test_batch_norm_by_channel_or_batch():
    d = describe(meta("aten.native_batch_norm", [(8, 4, 5, 5), (4,), (4,)], [(8, 4, 5, 5), (4,), (4,)]))
    s = strategies(d)
    assert s["c"] == ([("split", 1), ("split", 0), ("split", 0)], [("split", 1), ("split", 0), ("split", 0)])
    # by batch: the per-channel statistics are partial sums (synchronised batch norm)
    assert s["n"] == ([("split", 0), WHOLE, WHOLE], [("split", 0), PARTIAL, PARTIAL])


def test_layer_norm_forward_splits_outer_dims():
    d = describe(meta("aten.native_layer_norm", [(2, 8, 16), (16,), (16,)], [(2, 8, 16), (2, 8, 1), (2, 8, 1)]))
    assert d.extents == {"d0": 2, "d1": 8}  # the normalised dim stays whole
    assert strategies(d)["d1"] == ([("split", 1), WHOLE, WHOLE], [("split", 1)] * 3)


# ----- hybrid: some operators kept whole on one device ---------------------------------------------

@pytest.mark.parametrize("model", ["static", "peak"])
def test_hybrid_with_every_operator_placed_is_the_placement(model):
    """The plan evaluator on a plan that keeps every operator whole is the placement evaluator."""
    from placement.evaluator import evaluate
    from placement.partition.graph import with_placed

    prob = mlp(8, [16, 16], 4).with_devices(3)
    rng = np.random.default_rng(5)
    placement = rng.integers(0, 3, prob.n)
    g = with_placed(build_graph(prob), {o: int(placement[o]) for o in range(prob.n)})
    plan = Plan([3], [[REPLICA] * len(g.tensors)], [[None] * prob.n])
    pe = evaluate_plan(g, plan, model)
    ev = evaluate(prob, placement, memory_model=model)
    assert pe.makespan == pytest.approx(ev.makespan)
    assert np.allclose(pe.evaluation.static_memory, ev.static_memory)
    assert np.allclose(pe.evaluation.peak_memory, ev.peak_memory)


def test_hybrid_hand_example():
    """x and W partitioned by rows over 2 devices, mm kept whole on device 1: it gathers the half
    of x and of W held by device 0; relu (partitioned by rows) fetches its half of y from device 1."""
    from placement.partition.graph import with_placed

    g = with_placed(build_graph(hand_problem()), {2: 1})
    rows = ("split", 0)
    plan = Plan([2], [[rows, rows, REPLICA, rows]], [[None, None, None, "d0"]])
    pe = evaluate_plan(g, plan, "static")
    # gathers: x 64 + W 32 bytes into device 1; relu's half of y (64 bytes) to device 0.
    assert pe.comm_bytes == 64 + 32 + 64
    # x's half arrives at 1 + 64/16 = 5 (W's at 3); mm [5, 15); y's half reaches device 0 at
    # 15 + 1 + 64/16 = 20; relu's halves: device 1 [15, 16), device 0 [20, 21).
    assert pe.makespan == pytest.approx(21.0)
    # device 1: x 64 + W 32 + gathered 96 + y 128 + z 64; device 0: x 64 + W 32 + fetched 64 + z 64.
    assert pe.evaluation.static_memory.tolist() == [224.0, 384.0]


def test_tofu_hybrid_partitions_what_does_not_fit_and_places_the_rest():
    base = mlp(256, [64], 8).with_devices(16)
    g = build_graph(base)
    plan, _ = recursive_plan(g, 16)
    cap = 4.0 * float(evaluate_plan(g, plan).memory.max())
    prob = base.with_devices(16, memory=cap)
    res = run(prob, "tofu-hybrid", SolveOptions(time_limit=20))
    part = res.partition
    big = [str(prob.ids[o]) for o in range(prob.n)
           if prob.param_bytes[o] + prob.out_bytes[o] + sum(g.tensors[t].nbytes for t in set(g.ops[o].inputs) if t >= 0) > cap / 2]
    assert sorted(part["partitioned_operators"]) == sorted(big) and big
    assert part["placed_operators"] == prob.n - len(big)
    assert res.status == "heuristic" and max(part["static_memory"]) <= cap
    sol = res.solution
    assert res.value == pytest.approx(evaluate_plan(sol.info["graph"], sol.info["plan"], "static").makespan)
    roomy = mlp(16, [32, 32], 8).with_devices(2)
    assert "nothing to partition" in run(roomy, "tofu-hybrid").reason


def test_partitioning_respects_what_it_cannot_model():
    """Allowed devices: tofu refuses and auto does not try it; colocation groups: auto keeps a
    placement that fits and says why."""
    prob = mlp(256, [64], 8).with_devices(16)
    restricted = replace(prob, allowed=[(0,)] + [None] * (prob.n - 1))
    res = run(restricted, "tofu")
    assert res.status == "unknown" and "devices" in res.reason
    assert [h for h in run(restricted, "auto", SolveOptions(time_limit=10)).history if h.get("method") == "tofu"][0]["status"] == "skipped"
    groups = np.full(prob.n, -1)
    groups[[0, 1]] = 0
    grouped = replace(prob, colocate=groups, colocate_names=["g"])
    res = run(grouped, "auto", SolveOptions(time_limit=10))
    assert res.method != "auto:tofu" and res.evaluation is not None
    entry = [h for h in res.history if h.get("method") == "tofu"][0]
    assert "colocation" in entry["choice"]
    assert entry["status"] == "skipped" and "fallback" in entry["choice"]  # placement found: no plan made


def test_grouped_graph_falls_back_to_the_partitioned_plan():
    """With colocation groups the placement runs first, in the limit less the plan's reserve; when
    no placement of whole operators fits, the partitioned plan is still made and taken."""
    from solvers.run import tofu_reserve

    base = mlp(256, [64], 8).with_devices(16)
    g = build_graph(base)
    plan, _ = recursive_plan(g, 16)
    need = float(evaluate_plan(g, plan, "static").memory.max())
    groups = np.full(base.n, -1)
    groups[[0, 1]] = 0
    prob = replace(base.with_devices(16, memory=need * 1.01), colocate=groups, colocate_names=["g"])
    res = run(prob, "auto", SolveOptions(time_limit=20))
    assert res.method == "auto:tofu" and res.status == "heuristic"
    assert "no whole-operator placement" in res.partition["choice"] and "colocation" in res.partition["choice"]
    assert [h.get("method") for h in res.history][-1] == "tofu"  # after the placement's phases
    assert 0 < tofu_reserve(prob, 20.0) <= 0.15 * 20.0 and tofu_reserve(prob, None) == 0.0


# ----- on models imported from PyTorch ------------------------------------------------------------

def test_tofu_on_an_imported_gpt2_training_step():
    """The importer's operator semantics are enough for Tofu: every op of a GPT-2 training step is
    described, the 4-way plan's objective is the plan evaluator's makespan, and its largest device
    holds less than even a perfect 2-way split would (half the single-device peak)."""
    pytest.importorskip("torch")
    from placement.importers.torch import graph_from_torch
    from tests import torch_models

    model, inputs, loss_fn = torch_models.gpt2_tiny()
    prob = graph_from_torch(model, inputs, loss_fn=loss_fn).with_devices(4)
    res = run(prob, "tofu", SolveOptions(memory_model="peak", time_limit=60))
    assert res.feasible, res.reason
    part = res.report(prob, "peak")["partition"]
    assert part["undescribed_operators"] == []
    assert part["factors"] == [2, 2]
    pe = evaluate_plan(build_graph(prob), res.solution.info["plan"], "peak")
    assert res.report(prob, "peak")["makespan"] == pytest.approx(pe.makespan)
    assert part["max_device_memory"] < part["single_device_memory"] / 2


def _wide_stack(n: int):
    """``n`` inputs of [8, 4] stacked by one operator (as an unrolled LSTM stacks its time steps'
    outputs), then summed: the stack's table of layout combinations has 3^(n + 1) entries."""
    nodes = [{"id": f"x{i}", "time": 0, "out_bytes": 128, "param_bytes": 0} for i in range(n)]
    nodes += [{"id": "st", "time": 1, "out_bytes": 128 * n, "param_bytes": 0}, {"id": "s", "time": 1, "out_bytes": 4, "param_bytes": 0}]
    edges = [{"src": f"x{i}", "dst": "st", "bytes": 128} for i in range(n)] + [{"src": "st", "dst": "s", "bytes": 128 * n}]
    p = make_problem(nodes, edges, devices=2, link=Link(1.0, 16.0))
    metas = [meta("placeholder.input", [], [(8, 4)]) for _ in range(n)]
    metas += [meta("aten.stack", [(8, 4)] * n, [(n, 8, 4)]), meta("aten.sum", [(n, 8, 4)], [()])]
    em = [{"src_output": 0, "dst_inputs": [i]} for i in range(n)] + [{"src_output": 0, "dst_inputs": [0]}]
    return replace(p, node_meta=metas, edge_meta=em)


def test_an_operator_over_too_many_tensors_is_refused_by_name_not_a_crash():
    """Tofu tabulates every operator over its tensors' layouts: an operator with 100 tensors (the
    stack of a 100-step LSTM) cannot be tabulated (numpy crashed on 101 dimensions; 30 would have
    enumerated 3^30 entries past any time limit). tofu says which operator; auto still answers."""
    prob = _wide_stack(100)
    res = run(prob, "tofu")
    assert res.status == "unknown" and "operator 'st' has 101 distinct tensors" in res.reason
    small = run(_wide_stack(3), "tofu")  # 3^4 entries: tabulated as before
    assert small.status == "heuristic"
    auto = run(prob, "auto", SolveOptions(time_limit=10))
    assert auto.status in ("feasible", "optimal") and auto.evaluation is not None and auto.evaluation.feasible(prob)
