"""The explanation of a schedule adds up, and the timeline exports carry every node."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from placement.evaluator import evaluate
from placement.explain import critical_path, explain
from placement.trace import chrome_trace, write_chrome_trace
from tests.conftest import random_problem


@pytest.mark.parametrize("seed", range(25))
def test_critical_path_accounts_for_the_makespan(seed):
    rng = random.Random(seed)
    prob = random_problem(seed, rng.randint(1, 25), rng.randint(1, 4))
    ev = evaluate(prob, [rng.randrange(prob.k) for _ in range(prob.n)])
    chain = critical_path(prob, ev)
    assert chain[0]["start"] == 0 and chain[0]["because"] == "start"
    assert chain[-1]["finish"] == pytest.approx(ev.makespan)
    for a, b in zip(chain, chain[1:]):  # consecutive steps are tight
        assert b["start"] == pytest.approx(a["finish"] + b.get("comm", 0.0))
    info = explain(prob, ev)
    assert info["critical_path_compute"] + info["critical_path_comm"] == pytest.approx(ev.makespan)
    assert sum(d["busy"] for d in info["devices"]) == pytest.approx(prob.time.sum())


def test_chrome_trace_has_one_event_per_node(tmp_path):
    prob = random_problem(1, 12, 3)
    ev = evaluate(prob, np.arange(prob.n) % 3)
    write_chrome_trace(tmp_path / "t.json", prob, ev)
    doc = json.loads((tmp_path / "t.json").read_text())
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert sorted(e["args"]["id"] for e in spans) == sorted(str(i) for i in prob.ids)
    by_id = {e["args"]["id"]: e for e in spans}
    for i, nid in enumerate(prob.ids):
        assert by_id[str(nid)]["ts"] == pytest.approx(ev.start[i] * 1000)
        assert by_id[str(nid)]["tid"] == ev.placement[i]
    assert doc == chrome_trace(prob, ev)


def test_written_report_round_trips_one_field_per_line(tmp_path):
    from placement.report import write_report

    rep = {"status": "feasible", "objective": 1.5, "gap": None, "placement": {"a": 0, "b": 3},
           "start": {"a": 0.0, "b": 2.25}, "explain": {"devices": [{"load": 1.0}], "path": ["a", "b"]}, "empty": {}}
    path = tmp_path / "r.json"
    write_report(path, rep)
    text = path.read_text()
    assert json.loads(text) == rep
    assert text.count("\n") == len(rep) + 2  # "{", one line per field, "}"


@pytest.mark.parametrize("seed", range(10))
def test_a_long_critical_path_is_summarised_consistently(seed):
    """Beyond ``steps_listed`` steps the path is summarised: its ends, per-device totals and the
    reasons' counts agree with the full chain."""
    rng = random.Random(seed)
    prob = random_problem(seed, rng.randint(8, 30), rng.randint(1, 4))
    ev = evaluate(prob, [rng.randrange(prob.k) for _ in range(prob.n)])
    chain = critical_path(prob, ev)
    full, short = explain(prob, ev), explain(prob, ev, steps_listed=2)
    assert full["critical_path"] == chain and full["critical_path_steps"] == len(chain)
    if len(chain) <= 2:
        assert short["critical_path"] == chain
        return
    summary = short["critical_path"], short["critical_path_summary"]
    assert summary[0] is None and short["critical_path_steps"] == len(chain)
    s = summary[1]
    assert s["first"] == chain[:1] and s["last"] == chain[-1:]
    assert sum(d["steps"] for d in s["devices"]) == len(chain)
    for d in s["devices"]:
        on = [step for step in chain if step["device"] == d["device"]]
        assert d["steps"] == len(on)
        assert d["compute"] == pytest.approx(sum(st["finish"] - st["start"] for st in on))
        assert d["comm"] == pytest.approx(sum(st.get("comm", 0.0) for st in on))
    assert s["because"] == {why: sum(st["because"] == why for st in chain) for why in ("start", "input", "device")}
    assert short["critical_path_compute"] + short["critical_path_comm"] == pytest.approx(ev.makespan)
