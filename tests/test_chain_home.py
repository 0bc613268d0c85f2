"""heuristics/chain_home.py: on generated LSTMs (memory to spare) every weight's update sits with the
chain of running sums it reads and the longest chain has a device of its own; the answer is what
the evaluator measures on the member's own order and beats ETF's and chain-pin's; graphs without
accumulation chains (CNN, transformer) give up at once; determinism; the portfolio runs it right after HEFT (last under the peak model)."""
from __future__ import annotations

import numpy as np
import pytest

from heuristics.chain_home import MIN_SHARE, chain_home, home_groups
from heuristics.chain_pin import accumulation_chains, chain_pin
from heuristics.list_scheduling import etf
from heuristics.portfolio import ORDER, PEAK_ORDER, PEAK_TIGHT_ORDER, portfolio
from placement.bounds import makespan_lower_bound
from placement.evaluator import evaluate
from placement.generate import generate
from placement.solution import SolveOptions
from solvers.methods import get

STATIC = SolveOptions(memory_model="static")


@pytest.fixture(scope="module", params=[4, 8])
def lstm(request):
    return generate("lstm", 1500, seed=0, devices=request.param, memory_fraction=None)


def test_answer_is_the_evaluators_and_above_the_bound(lstm):
    sol = chain_home(lstm, STATIC)
    assert sol.status == "heuristic"
    ev = evaluate(lstm, sol.placement, order=sol.order, memory_model="static")
    assert ev.makespan == pytest.approx(sol.objective, rel=1e-12)
    assert np.allclose(ev.start, sol.start)
    assert sol.objective >= makespan_lower_bound(lstm, "static") * (1 - 1e-9)


def test_weights_sit_with_their_chains(lstm):
    """Each layer's and the output layer's weight (with its update) on the device of the last
    running sum it reads: no transfer of the whole weight's gradient at the end."""
    sol = chain_home(lstm, STATIC)
    pl = np.asarray(sol.placement)
    chains = accumulation_chains(lstm, MIN_SHARE * float(lstm.out_bytes.max()))
    homes = home_groups(lstm, chains)
    layers = lstm.attrs.get("layers")
    assert len(chains) == (layers + 1 if layers else len(chains)) and len(chains) >= 2
    for (path, _), home in zip(chains, homes):
        names = {lstm.names[v] for v in home}
        assert any(n.endswith("weight/update") for n in names), names
        assert set(pl[home].tolist()) == {int(pl[path[-1]])}
        assert len(set(pl[path].tolist())) == 1  # a chain never crosses devices
    longest = max(range(len(chains)), key=lambda i: float(lstm.time[chains[i][0]].sum()))
    own = int(pl[chains[longest][0][-1]])
    assert all(int(pl[c[0][-1]]) != own for i, c in enumerate(chains) if i != longest)


def test_beats_etf_and_chain_pin_on_the_generated_lstm(lstm):
    """The measured reason for the member (bench/results_scale.md, session 13): these values are
    ETF's and chain-pin's own, judged by the evaluator."""
    home = chain_home(lstm, STATIC).objective
    assert home < 0.95 * etf(lstm, STATIC).objective
    assert home < 0.95 * chain_pin(lstm, STATIC).objective


def test_deterministic(lstm):
    a, b = chain_home(lstm, STATIC), chain_home(lstm, STATIC)
    assert np.array_equal(a.placement, b.placement) and a.order == b.order and a.objective == b.objective


@pytest.mark.parametrize("kind", ["cnn", "transformer"])
def test_gives_up_without_chains(kind):
    p = generate(kind, 2000, seed=0, devices=4, memory_fraction=None)
    sol = get("chain-home").func(p, STATIC)
    assert sol.status == "unknown" and sol.placement is None
    assert "no weight-gradient accumulation chain" in sol.reason


def test_one_device_gives_up():
    p = generate("lstm", 1500, seed=0, devices=1, memory_fraction=None)
    assert chain_home(p, STATIC).status == "unknown"


def test_portfolio_runs_it_after_heft_and_keeps_the_best():
    assert ORDER.index("heft") + 1 == ORDER.index("chain-home")
    assert PEAK_ORDER[-1] == "chain-home" and PEAK_TIGHT_ORDER[-1] == "chain-home"
    p = generate("lstm", 1000, seed=1, devices=4, memory_fraction=None)
    sol = portfolio(p, STATIC)
    rec = {m["method"]: m for m in sol.info["members"]}
    assert rec["chain-home"]["feasible"]
    assert sol.objective <= rec["chain-home"]["makespan"]
    assert sol.objective == min(m["makespan"] for m in sol.info["members"] if m["feasible"])


def restricted_chain(restrict: dict[str, list[int]] | None = None, coloc: dict[str, str] | None = None, steps: int = 10):
    """tests.test_waits_search's running sum s0 -> ... -> s9 of gradients g_i (100 bytes each, as the
    sums) made from a loss, with six independent fillers f_j, the last sum read by the weight's
    update (colocated with the weight W), on 3 devices, transfers of 3 units; ``restrict``: allowed
    devices by node id, ``coloc``: more colocation groups."""
    from placement.problem import make_problem
    from tests.test_waits_search import chain_records

    nodes, edges = chain_records(steps, 6, comm=3.0)
    nodes += [{"id": "W", "time": 0.0, "out_bytes": 0, "param_bytes": 100, "colocate": "w"},
              {"id": "upd", "time": 1.0, "out_bytes": 0, "param_bytes": 0, "colocate": "w"}]
    edges += [{"src": f"s{steps - 1}", "dst": "upd", "comm": 3.0}, {"src": "W", "dst": "upd", "comm": 3.0}]
    for rec in nodes:
        if restrict and rec["id"] in restrict:
            rec["devices"] = restrict[rec["id"]]
        if coloc and rec["id"] in coloc:
            rec["colocate"] = coloc[rec["id"]]
    return make_problem(nodes, edges, devices=3)


@pytest.mark.parametrize("model", ["static", "peak"])
@pytest.mark.parametrize("restrict,coloc", [
    ({"s3": [1]}, None),  # a sum of the chain only on device 1: the whole chain goes there
    ({"g0": [2]}, None),  # a first gradient (pinned with the chain) only on device 2
    ({"upd": [2]}, None),  # the weight's update (the chain's home group) only on device 2
    ({"f0": [2]}, {"g0": "x", "f0": "x"}),  # a first gradient colocated with a node only on device 2
    ({"f1": [1]}, {"s2": "y", "f1": "y"}),  # a sum colocated with a node only on device 1
    ({"s3": [1, 2], "upd": [2]}, None),
])
def test_respects_allowed_devices_and_colocation(restrict, coloc, model):
    """Session 14 review: the pins once ignored ``allowed`` (ScheduleError from the evaluator)."""
    p = restricted_chain(restrict, coloc)
    assert accumulation_chains(p, MIN_SHARE * float(p.out_bytes.max()))  # the case has its chain
    sol = chain_home(p, SolveOptions(memory_model=model))
    assert sol.status == "heuristic"
    mask = p.allowed_mask()
    assert mask[np.arange(p.n), sol.placement].all()
    ev = evaluate(p, sol.placement, order=sol.order, memory_model=model)  # raises on a broken restriction
    assert ev.makespan == sol.objective and np.array_equal(ev.start, sol.start)
    chain = [p.index[f"s{i}"] for i in range(10)] + [p.index["upd"], p.index["W"]]
    assert len(set(sol.placement[chain].tolist())) == 1  # the chain and its weight on one device
    again = chain_home(p, SolveOptions(memory_model=model))
    assert np.array_equal(again.placement, sol.placement) and again.order == sol.order


def test_gives_up_when_no_device_takes_the_longest_chain():
    p = restricted_chain({"s2": [1], "s5": [2]})
    sol = chain_home(p, STATIC)
    assert sol.status == "unknown" and sol.placement is None and "device restrictions" in sol.reason


def test_the_refusal_names_the_tensor_size_it_looked_for():
    p = generate("cnn", 2000, seed=0, devices=4, memory_fraction=None)
    sol = get("chain-home").func(p, STATIC)
    biggest = float(p.out_bytes.max())
    assert f"{0.1 * biggest:.4g} bytes or more (0.1 x the largest tensor)" in sol.reason
    one = get("chain-home").func(p.with_devices(1, float("inf")), STATIC)
    assert one.status == "unknown" and "one device" in one.reason
