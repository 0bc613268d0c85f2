"""Max-load evaluator on hand-computed splits; DP = CP-SAT = MIP = brute force on tiny instances;
published contiguous optima of small msr-fiddle workloads."""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from formulations.maxload.dp import solve_dp
from formulations.maxload.ip_cpsat import solve_cpsat
from formulations.maxload.ip_mip import solve_mip
from placement.objectives import evaluate_maxload, evaluate_objective, split_violations
from placement.problem import make_problem
from placement.solution import SolveOptions
from tests.conftest import with_slow

FIDDLE = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "msr-fiddle" / "throughput-inputs"


def diamond(memory: float = 100.0, max_cpus: int = 1):
    # a -> b, a -> c, b -> d, c -> d; tensor costs a:1, b:2, c:3
    nodes = [{"id": x, "time": t, "out_bytes": 0, "param_bytes": 10} for x, t in zip("abcd", (4, 5, 6, 7))]
    edges = [{"src": "a", "dst": "b", "comm": 1}, {"src": "a", "dst": "c", "comm": 1},
             {"src": "b", "dst": "d", "comm": 2}, {"src": "c", "dst": "d", "comm": 3}]
    return make_problem(nodes, edges, devices=2, memory=memory, node_attrs={"cpu_latency": [40, 50, 60, 70]},
                        attrs={"max_cpus": max_cpus})


def test_hand_computed_loads():
    p = diamond()
    split = np.array([0, 0, 1, -1])  # a, b on acc0; c on acc1; d on the CPU
    ev = evaluate_maxload(p, split)
    # acc0: a + b compute 9, tensor a out (c elsewhere) 1, tensor b out 2 -> 12
    # acc1: c compute 6, tensor a in 1, tensor c out 3 -> 10; CPU: d 70
    assert ev.load.tolist() == [12.0, 10.0, 70.0]
    assert ev.value == 70.0 and ev.feasible
    split = np.array([0, 1, 1, 0])  # b, c together receive a once: tensor a paid once on acc1
    ev = evaluate_maxload(p, split)
    # acc0: a 4 + d 7 + tensor a out 1 + tensors b, c in 2 + 3 -> 17; acc1: 11 + a in 1 + b, c out 5 -> 17
    assert ev.load.tolist() == [17.0, 17.0, 0.0]
    value, br = evaluate_objective(p, split, "max-load")
    assert value == 17.0 and br["devices"][0]["comm"] == 6.0


def test_training_objectives_and_violations():
    nodes = [{"id": i, "time": t, "out_bytes": 0, "param_bytes": 1, "colocate": g}
             for i, t, g in ((0, 1, "w0"), (1, 2, "w1"), (2, 4, "w1"), (3, 8, "w0"))]
    edges = [{"src": 0, "dst": 1, "comm": 0.5}, {"src": 1, "dst": 2, "comm": 0.25}, {"src": 2, "dst": 3, "comm": 0.125}]
    p = make_problem(nodes, edges, devices=2, memory=10, node_attrs={"is_backward": [0, 0, 1, 1], "cpu_latency": [1] * 4},
                     attrs={"max_cpus": 0})
    split = np.array([0, 1, 1, 0])
    ev = evaluate_maxload(p, split)
    # acc0: fw 1 + 0.5 (tensor 0 out); bw 8 + 0.125 (tensor 2 in, producer backward) -> 9.625
    # acc1: fw 2 + 0.5 (tensor 0 in); bw 4 + 0.125 (tensor 2 out) -> 6.625
    assert ev.fw.tolist() == [1.5, 2.5] and ev.bw.tolist() == [8.125, 4.125]
    assert ev.value == 9.625
    assert evaluate_maxload(p, split, objective="fw+bw").value == 2.5 + 8.125
    bad = np.array([0, 0, 1, 0])
    assert any("colocation" in v for v in evaluate_maxload(p, bad).violations)
    p2 = diamond(memory=15)
    assert any("memory" in v for v in evaluate_maxload(p2, np.array([0, 0, 1, 1])).violations)
    # contiguity: a and d together, b and c elsewhere -> a -> b -> d leaves and re-enters
    assert any("contiguous" in v for v in split_violations(diamond(), np.array([0, 1, 1, 0]), 1, "forward"))
    assert not split_violations(diamond(), np.array([0, 0, 1, 1]), 1, "forward")


def random_problem(seed: int, n: int = 6, k: int = 2, training: bool = False):
    rng = np.random.default_rng(seed)
    nodes, edges = [], []
    back = [training and i >= n // 2 for i in range(n)]
    for i in range(n):
        rec = {"id": i, "time": float(rng.integers(1, 10)), "out_bytes": 0, "param_bytes": float(rng.integers(1, 5))}
        if training and i < n // 2 and rng.random() < 0.7:
            rec["colocate"] = f"c{i}"
        if training and i >= n // 2 and rng.random() < 0.7:
            rec["colocate"] = f"c{n - 1 - i}"
        nodes.append(rec)
    for v in range(1, n):
        for u in range(v):
            if rng.random() < 0.35 or (u == v - 1 and rng.random() < 0.6):
                edges.append({"src": u, "dst": v, "comm": 0.0})
    costs = rng.integers(0, 4, n).astype(float)
    for e in edges:
        e["comm"] = costs[e["src"]]
    total = sum(r["param_bytes"] for r in nodes)
    return make_problem(nodes, edges, devices=k, memory=float(np.ceil(total * 0.6)),
                        node_attrs={"cpu_latency": (rng.integers(5, 30, n)).astype(float).tolist(), "is_backward": back},
                        attrs={"max_cpus": 1})


def brute_force(p, contiguity: str) -> float:
    best = np.inf
    devices = list(range(p.k)) + [-1]
    for combo in itertools.product(devices, repeat=p.n):
        ev = evaluate_maxload(p, np.array(combo), contiguity=contiguity)
        if not ev.violations:
            best = min(best, ev.value)
    return best


def test_pipeline_contiguity_forbids_devices_feeding_each_other():
    # a -> b and c -> d, two independent chains; {a, d} and {b, c} are each forward-contiguous
    # (no path leaves and re-enters), but acc0 feeds acc1 (a -> b) and acc1 feeds acc0 (c -> d)
    nodes = [{"id": x, "time": 1, "out_bytes": 0, "param_bytes": 1} for x in "abcd"]
    edges = [{"src": "a", "dst": "b", "comm": 1}, {"src": "c", "dst": "d", "comm": 1}]
    p = make_problem(nodes, edges, devices=2, memory=10, node_attrs={"cpu_latency": [1] * 4},
                     attrs={"max_cpus": 0})
    cyclic = np.array([0, 1, 1, 0])
    assert not split_violations(p, cyclic, 0, "forward")
    (msg,) = split_violations(p, cyclic, 0, "pipeline")
    assert "cycle" in msg and "'a' -> 'b'" in msg and "'c' -> 'd'" in msg
    assert not split_violations(p, np.array([0, 1, 0, 1]), 0, "pipeline")


def test_pipeline_contiguity_mirrors_orphaned_backward_edges():
    # forward f0 -> f1; backward g shares f0's class, backward o has a class of its own (orphan).
    # The backward edge g -> o is mirrored into the order edge device(o) -> device(g)
    nodes = [{"id": "f0", "time": 1, "out_bytes": 0, "param_bytes": 1, "colocate": "w0"},
             {"id": "f1", "time": 1, "out_bytes": 0, "param_bytes": 1},
             {"id": "g", "time": 1, "out_bytes": 0, "param_bytes": 1, "colocate": "w0"},
             {"id": "o", "time": 1, "out_bytes": 0, "param_bytes": 1, "colocate": "lonely"}]
    edges = [{"src": "f0", "dst": "f1", "comm": 1}, {"src": "f1", "dst": "g", "comm": 1},
             {"src": "g", "dst": "o", "comm": 1}]
    p = make_problem(nodes, edges, devices=2, memory=10,
                     node_attrs={"cpu_latency": [1] * 4, "is_backward": [0, 0, 1, 1]}, attrs={"max_cpus": 0})
    from placement.objectives import orphaned_backward

    assert orphaned_backward(p).tolist() == [False, False, False, True]
    # f0, g on acc0, f1, o on acc1: f0 -> f1 orders 0 before 1, mirrored g -> o orders 1 before 0
    split = np.array([0, 1, 0, 1])
    assert not split_violations(p, split, 0, "forward")
    (msg,) = split_violations(p, split, 0, "pipeline")
    assert "'f0' -> 'f1'" in msg and "'g' -> 'o'" in msg
    assert not split_violations(p, np.array([0, 1, 0, 0]), 0, "pipeline")


@pytest.mark.parametrize("seed", with_slow(range(6), {4, 5}))  # 2 s each
def test_exact_methods_match_brute_force(seed):
    p = random_problem(seed, training=seed % 2 == 1)
    opts = SolveOptions(time_limit=20, workers=1)
    contig = brute_force(p, "forward")
    noncontig = brute_force(p, "none")
    cp = solve_cpsat(p, opts, "maxload-cpsat", True)
    mip = solve_mip(p, SolveOptions(time_limit=20, workers=1), "maxload-mip", True)
    assert cp.status == "optimal" and cp.objective == pytest.approx(contig, rel=1e-6)
    assert mip.objective == pytest.approx(contig, rel=1e-6)
    cpn = solve_cpsat(p, opts, "maxload-cpsat-nc", False)
    mipn = solve_mip(p, SolveOptions(time_limit=20, workers=1), "maxload-mip-nc", False)
    assert cpn.objective == pytest.approx(noncontig, rel=1e-6)
    assert mipn.objective == pytest.approx(noncontig, rel=1e-6)
    _, dpv, _ = solve_dp(p)
    # the DP is exact for pipelines, which are forward-contiguous: never below the IP's optimum
    assert dpv >= contig - 1e-9
    assert dpv == pytest.approx(brute_force(p, "pipeline"), rel=1e-9)
    for s in (cp, mip, cpn, mipn):
        assert s.objective == evaluate_maxload(p, s.info["split"]).value


def test_gpipe_objective_matches_brute_force():
    p = random_problem(3, training=True)
    best = np.inf
    for combo in itertools.product(list(range(p.k)) + [-1], repeat=p.n):
        ev = evaluate_maxload(p, np.array(combo), objective="fw+bw")
        if not ev.violations:
            best = min(best, ev.value)
    s = solve_cpsat(p, SolveOptions(time_limit=20, workers=1, extra={"objective": "fw+bw"}), "maxload-cpsat-nc", False)
    assert s.status == "optimal" and s.objective == pytest.approx(best, rel=1e-6)
    assert s.objective == evaluate_maxload(p, s.info["split"], objective="fw+bw").value


def test_dp_on_a_chain_is_exact():
    # on a path every contiguous split is a pipeline: DP = brute force over contiguous splits
    nodes = [{"id": i, "time": t, "out_bytes": 0, "param_bytes": 1} for i, t in enumerate((5, 1, 7, 2, 6, 3))]
    edges = [{"src": i, "dst": i + 1, "comm": c} for i, c in enumerate((1, 3, 0.5, 2, 1))]
    p = make_problem(nodes, edges, devices=2, memory=4, node_attrs={"cpu_latency": [9, 4, 30, 8, 25, 6]},
                     attrs={"max_cpus": 1})
    _, dpv, _ = solve_dp(p)
    assert dpv == pytest.approx(brute_force(p, "forward"))
    from solvers.methods import get

    for name in ("dp", "dpl", "pipedream", "maxload-cpsat", "local-search"):
        info = get(name)
        assert info.objective == "max-load"
        sol = info.func(p, SolveOptions(time_limit=10, workers=1))
        value, breakdown = evaluate_objective(p, sol, "max-load")
        assert value == sol.objective and len(breakdown["devices"]) == p.k + 1
        assert sol.placement.min() >= 0 and (sol.info["split"][sol.info["cpu_nodes"]] < 0).all()
        if name in ("dp", "maxload-cpsat"):
            assert sol.objective == pytest.approx(dpv)


@pytest.mark.parametrize("workload,published", [
    ("OperatorGraphs/bert_l-3_inference", 27.92),
    ("LayerGraphs/bert24_inference", 17.79),
    ("LayerGraphs/bert24_training", 41.75),
    ("LayerGraphs/gnmt_training", 107.00),
])
def test_published_contiguous_optimum(workload, published):
    from placement.formats.fiddle import read_fiddle

    path = FIDDLE / f"{workload}.json"
    if not path.exists():
        pytest.fail("msr-fiddle workloads not found: the tests need ../shared beside the project")
    p = read_fiddle(path)
    s = solve_cpsat(p, SolveOptions(time_limit=120, workers=2), "maxload-cpsat", True)
    assert s.status == "optimal"
    assert s.objective == pytest.approx(published, abs=0.005 + 1e-3 * published)
    assert s.lower_bound <= s.objective and s.lower_bound == pytest.approx(s.objective, rel=1e-5)
    assert not evaluate_maxload(p, s.info["split"], contiguity="forward").violations


def with_free_leaves(p):
    """The problem plus a zero-time sink under every node with an out-edge (it reads that node's
    tensor) and a zero-time source feeding node 0: the free leaves of Appendix B."""
    nodes = [{"id": int(i), "time": float(p.time[i]), "out_bytes": 0, "param_bytes": float(p.param_bytes[i])}
             for i in range(p.n)]
    edges = [{"src": int(u), "dst": int(v), "comm": float(c)} for u, v, c in zip(p.src, p.dst, p.comm)]
    cpu = list(p.node_attrs["cpu_latency"])
    cost_of = {e["src"]: e["comm"] for e in edges}
    for u, c in sorted(cost_of.items()):
        nodes.append({"id": f"leaf{u}", "time": 0.0, "out_bytes": 0, "param_bytes": 0.0})
        edges.append({"src": u, "dst": f"leaf{u}", "comm": c})
        cpu.append(0.0)
    nodes.append({"id": "src", "time": 0.0, "out_bytes": 0, "param_bytes": 0.0})
    edges.append({"src": "src", "dst": 0, "comm": 2.0})
    cpu.append(0.0)
    return make_problem(nodes, edges, devices=p.k, memory=float(sum(r["param_bytes"] for r in nodes)),
                        node_attrs={"cpu_latency": cpu}, attrs={"max_cpus": 1})


@pytest.mark.parametrize("seed", range(5))
def test_free_leaf_merging_keeps_the_dp_exact(seed):
    from formulations.maxload.preprocess import build_units

    p = with_free_leaves(random_problem(seed, n=4 if seed == 0 else 7, k=2 if seed == 0 else 3))
    assert build_units(p, merge_leaves=True).count < build_units(p).count
    _, merged, _ = solve_dp(p)
    _, plain, _ = solve_dp(p, merge_leaves=False, upper=1e9)  # no leaf merging, no window pruning
    assert merged == pytest.approx(plain, rel=1e-9)
    if seed == 0:
        assert merged == pytest.approx(brute_force(p, "pipeline"), rel=1e-9)


def test_published_ideal_counts_after_free_leaf_merging():
    from formulations.maxload.dp import enumerate_ideals
    from formulations.maxload.preprocess import build_units
    from placement.formats.fiddle import read_fiddle

    for name, ideals in (("gnmt_inference", 17914), ("bert24_training", 30)):
        p = read_fiddle(FIDDLE / "LayerGraphs" / f"{name}.json")
        assert enumerate_ideals(build_units(p, merge_leaves=True), 10 ** 6)[0].size == ideals
    _, v, info = solve_dp(read_fiddle(FIDDLE / "LayerGraphs" / "bert24_inference.json"))
    assert info["ideals"] == 30 and v == pytest.approx(17.79, abs=0.005)


def test_lns_over_all_devices_reaches_the_noncontiguous_optimum():
    from formulations.maxload.common import ip_data, split_from_atoms
    from formulations.maxload.lns import lns_improve

    import time

    for seed in (1, 4):
        p = random_problem(seed, n=6)
        data = ip_data(p)
        start = np.full(len(data.atoms), data.k)  # everything on the CPU core
        atoms, stats = lns_improve(p, data, start, time.monotonic() + 30, seed=0)
        value = evaluate_maxload(p, split_from_atoms(data, atoms)).value
        assert stats["improved"] >= 1 and stats["end"] == value
        # k = 2 accelerators + 1 core: the random triples free every device, so LNS is exact
        assert value == pytest.approx(brute_force(p, "none"), rel=1e-6)


@pytest.mark.parametrize("seed", with_slow(range(3), {1, 2}))  # 2-4 s each
def test_dp_proves_the_pipeline_optimum_on_identical_accelerators(seed):
    from solvers.methods import get

    p = random_problem(10 + seed, n=6, k=3, training=True)
    sol = get("dp").func(p, SolveOptions(time_limit=30, workers=1))
    assert sol.status == "optimal" and sol.info["contiguity"] == "pipeline"
    assert sol.objective == pytest.approx(brute_force(p, "pipeline"), rel=1e-9)
    assert sol.lower_bound == sol.objective
    # unequal memories: the DP checks the smallest, so it can only claim a feasible split
    uneven = p.with_devices(memory=[p.memory[0], p.memory[0], 2 * p.memory[0]])
    sol2 = get("dp").func(uneven, SolveOptions(time_limit=30, workers=1))
    assert sol2.status == "feasible" and sol2.objective >= brute_force(uneven, "pipeline") - 1e-9


@pytest.mark.parametrize("seed", range(3))
def test_dp_equals_pipeline_brute_force_with_two_cpu_cores_and_unsupported_nodes(seed):
    from dataclasses import replace

    p = random_problem(20 + seed, n=6, k=2, training=seed != 1)
    supported = np.ones(p.n, dtype=bool)
    supported[seed + 1] = False  # this node must go to one of the two cores
    p = replace(p, attrs={**p.attrs, "max_cpus": 2}, node_attrs={**p.node_attrs, "supported": supported})
    best = np.inf
    for combo in itertools.product([0, 1, -1, -2], repeat=p.n):
        ev = evaluate_maxload(p, np.array(combo), contiguity="pipeline")
        if not ev.violations:
            best = min(best, ev.value)
    split, value, _ = solve_dp(p)
    assert value == pytest.approx(best, rel=1e-9)
    assert split[seed + 1] < 0 and not evaluate_maxload(p, split, contiguity="pipeline").violations
