"""The solve command end to end: outputs agree with the evaluator, exit statuses, overrides."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from placement.bounds import makespan_lower_bound
from placement.evaluator import check, evaluate
from placement.formats import load_problem
from placement.report import read_placement
from solvers.cli import default_graph, main
from tests.conftest import DATA, ROOT

EXAMPLE = DATA / "pardnn_example"


def run_cli(tmp_path, *args):
    report, out = tmp_path / "report.json", tmp_path / "placement.txt"
    code = main([*map(str, args), "--report", str(report), "--out", str(out), "--quiet"])
    rep = json.loads(report.read_text()) if report.exists() else None
    return code, rep, out


def test_report_agrees_with_the_evaluator(tmp_path):
    code, rep, out = run_cli(tmp_path, EXAMPLE, "--method", "topo-fill")
    assert code == 0 and rep["status"] == "heuristic" and rep["method"] == "topo-fill"
    for key in ("status", "objective", "makespan", "lower_bound", "gap", "memory_model", "static_memory",
                "peak_memory", "placement", "start", "seconds", "method"):
        assert key in rep
    prob = load_problem(EXAMPLE)
    placement = read_placement(out, prob)
    assert {str(prob.ids[i]): int(d) for i, d in enumerate(placement)} == rep["placement"]
    ev = check(prob, rep["placement"], rep["start"], rep["memory_model"])
    assert ev.makespan == pytest.approx(rep["makespan"]) == pytest.approx(rep["objective"])
    assert evaluate(prob, placement).makespan == pytest.approx(rep["makespan"])
    assert rep["static_memory"] == pytest.approx(ev.static_memory.tolist())
    assert rep["peak_memory"] == pytest.approx(ev.peak_memory.tolist())
    assert rep["lower_bound"] == pytest.approx(makespan_lower_bound(prob, rep["memory_model"]))  # with the memory path bound
    assert rep["gap"] == pytest.approx((rep["makespan"] - rep["lower_bound"]) / rep["makespan"])


def test_peak_model_and_overrides(tmp_path):
    code, rep, _ = run_cli(tmp_path, EXAMPLE, "--method", "topo-fill", "--memory-model", "peak",
                           "--devices", "3", "--memory", "30KB")
    assert code == 0
    assert rep["memory_model"] == "peak" and rep["capacity"] == [30e3] * 3
    assert max(rep["peak_memory"]) <= 30e3
    assert len(set(rep["placement"].values())) >= 2


def test_infeasible_writes_report_with_reason(tmp_path):
    code, rep, out = run_cli(tmp_path, EXAMPLE, "--memory", "10KB", "--method", "topo-fill")
    assert code == 1
    assert rep["status"] == "infeasible"
    assert "w1" in rep["reason"] and "needs" in rep["reason"]  # w1 alone holds 12 KB of parameters
    assert rep["placement"] is None and not out.exists()


def test_no_answer_found_is_exit_one(tmp_path):
    # Fits on two devices but not on one: the single-device method finds nothing.
    code, rep, out = run_cli(tmp_path, EXAMPLE, "--memory", "30KB", "--method", "single")
    assert code == 1 and rep["status"] == "unknown" and rep["reason"]
    assert not out.exists()


def test_list_methods(capsys):
    assert main(["--list-methods"]) == 0
    listed = capsys.readouterr().out
    for name in ("auto", "topo-fill", "greedy-fill", "single"):
        assert f"\n{name} " in "\n" + listed


def test_default_example_is_shipped_and_memory_bound():
    path = default_graph()
    prob = load_problem(path)
    total = float((prob.param_bytes + prob.out_bytes).sum())
    assert prob.k > 1 and total > prob.memory.max(), "the default example should need more than one device"


def test_solve_without_arguments_runs_the_default_example(tmp_path):
    report = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "solvers.cli", "--time-limit", "20", "--report", str(report)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(report.read_text())
    prob = load_problem(default_graph())
    assert rep["problem"]["nodes"] == prob.n
    assert check(prob, rep["placement"], rep["start"]).makespan == pytest.approx(rep["makespan"])
    assert "makespan" in proc.stdout and "lower bound" in proc.stdout


# SIGTERM takes SIGINT's handler (test_interrupts.test_signal_rules_per_stage): its whole run is slow
@pytest.mark.parametrize("sig", ["SIGINT", pytest.param("SIGTERM", marks=pytest.mark.slow)])
def test_signal_stops_with_the_best_answer(sig, tmp_path):
    import signal
    import time

    from placement.formats import write_problem
    from placement.generate import generate

    prob = generate("transformer", 1500, seed=1, devices=4, memory_fraction=0.4)
    graph, report = tmp_path / "g.json", tmp_path / "r.json"
    write_problem(prob, graph)
    proc = subprocess.Popen([sys.executable, "-m", "solvers.cli", str(graph), "--time-limit", "300", "--report", str(report)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Signal once the warm start has reported (an answer exists), whatever the machine's load.
    first = ""
    deadline = time.monotonic() + 240
    while "warm-start:" not in first and time.monotonic() < deadline and proc.poll() is None:
        first = proc.stderr.readline()
    assert "warm-start:" in first, "the warm start never reported progress"
    time.sleep(1)  # inside the exact phase
    assert proc.poll() is None, "solve ended before it was signalled"
    proc.send_signal(getattr(signal, sig))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    rep = json.loads(report.read_text())
    assert rep["interrupted"] is True
    assert rep["status"] in ("feasible", "heuristic")
    assert check(load_problem(graph), rep["placement"], rep["start"]).makespan == pytest.approx(rep["makespan"])
    assert "interrupted" in out


@pytest.mark.parametrize("objective,method,graph", [
    ("max-load", "dp", "throughput-inputs/LayerGraphs/bert24_inference.json"),
    ("latency", "greedy", "latency-inputs/OperatorGraphs/bert_l-3_inference.json"),
])
def test_other_objectives_report_what_their_evaluator_computes(objective, method, graph, workloads, tmp_path):
    from placement.objectives import evaluate_maxload, evaluate_objective

    code, rep, out = run_cli(tmp_path, workloads / graph, "--objective", objective, "--method", method, "--time-limit", "30")
    assert code == 0, rep
    prob = load_problem(workloads / graph)
    split = np.array([rep["placement"][str(nid)] for nid in prob.ids])
    assert np.array_equal(read_placement_split(out, prob), split)
    extra = {"slot": np.array([rep["slot"][str(nid)] for nid in prob.ids])} if "slot" in rep else {}
    value, _ = evaluate_objective(prob, split, objective, **extra)
    assert rep["objective"] == pytest.approx(value)
    assert rep["objective_name"] == objective and rep["makespan"] is None
    assert rep["lower_bound"] <= rep["objective"] + 1e-9
    if method == "dp":
        # an optimality claim is only as wide as its model: the report names it, and the split obeys it
        assert rep["status"] == "optimal" and "contiguity='pipeline'" in rep["model"]
        assert not evaluate_maxload(prob, split, contiguity="pipeline").violations
    else:
        assert rep["model"].startswith("latency")


def read_placement_split(path, prob):
    """Placement files of max-load/latency answers may name CPU cores as negative devices."""
    dev = {}
    for line in path.read_text().splitlines():
        name, d = line.rsplit(None, 1)
        dev[name] = int(d)
    return np.array([dev[str(nid)] for nid in prob.ids])


def test_objective_method_mismatch_is_a_usage_error(tmp_path, capsys):
    assert main([str(EXAMPLE), "--objective", "max-load", "--method", "heft", "--quiet"]) == 2
    assert "optimises makespan, not max-load" in capsys.readouterr().err
