"""Where a certified gap sits: an answer against the bypass bound along its chain, block by block
(bench/results_scale.md, "Session 15: the goal grid").

    python bench/bench_windows.py along GRAPH.json REPORT.json [--memory-model peak] [--every NAME]
        the bypass bound's chain (placement/bypass_bound.py): at each chain node whose name ends
        with --every (default "out_relu" and "input/grad_sum", the CNN blocks' joins), the answer's
        finish time (the report's placement and device order, judged by the evaluator) beside the
        bound's lower bound on it ("fin"), and both spans since the previous such node.
    python bench/bench_windows.py cases GRAPH.json REPORT.json [--memory-model peak] [--depth 2]
        per group of windows (the name of the window's end node cut to --depth parts, and forward or
        backward): how many windows there are, in how many the bypass bound's case B (the window's
        two ends on two devices) is below cases A and C, in how many the answer keeps both ends on
        one device, what B holds the bound back by (the sum of min(A, C) - B), and what the answer
        loses against the bound along the chain there (the growth of its finish time less the
        bound's "fin" over the group's chain nodes).
    python bench/bench_windows.py window GRAPH.json A B -o OUT.json
        the window between chain nodes A and B as a problem of its own: every node on a path
        A ~> B (their edges, their times), A pinned to device 0, memory unlimited, inputs from
        outside dropped. Its optimal makespan less A's time is a lower bound on F(B) - F(A) in the
        whole problem (other work and edges only lengthen it; devices are alike, so A's device is
        any); solve it with `python -m solvers.cli OUT.json --method cpsat`.

Why: on the 10K CNN under the peak model the gap stays 14-21% at 600 s; whether that room is in
the answers or in the bound is a question per block, and one block is small enough to solve.
Untimed analysis: no row here is a speed figure.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from placement.bypass_bound import chain_bound  # noqa: E402
from placement.comm_bound import heads  # noqa: E402
from placement.evaluator import Evaluation, evaluate  # noqa: E402
from placement.formats import load_problem  # noqa: E402
from placement.memory_path_bound import best_path  # noqa: E402
from placement.problem import Problem  # noqa: E402


def judged(problem: Problem, report: dict, memory_model: str) -> Evaluation:
    """The report's placement and per-device order, judged by the evaluator."""
    index = {str(i): j for j, i in enumerate(problem.ids)}
    device = {name: d for d, name in enumerate(problem.device_names)}
    placed = [report["placement"][str(i)] for i in problem.ids]
    placement = np.array([device[p] if isinstance(p, str) else int(p) for p in placed])
    order = None
    if report.get("device_order"):
        order = [[index[str(x)] for x in report["device_order"].get(name, [])] for name in problem.device_names]
    elif report.get("start"):
        # Reports carry start times, not orders: each device runs its nodes in start order.
        start = np.array([float(report["start"][str(i)]) for i in problem.ids])
        ranked = np.lexsort((np.arange(problem.n), start))
        order = [[int(j) for j in ranked if placement[j] == d] for d in range(problem.k)]
    return evaluate(problem, placement, order=order, memory_model=memory_model)


def along(path: str, report_path: str, memory_model: str, every: list[str]) -> None:
    problem = load_problem(path)
    ev = judged(problem, json.loads(open(report_path).read()), memory_model)
    chain = best_path(problem, problem.time, np.zeros(problem.m))
    detail: dict[str, list[float]] = {}
    bound = chain_bound(problem, chain, heads(problem), heads(problem, reverse=True), detail)
    fin = detail["fin"]
    print(f"{problem.name}: answer {ev.makespan:.6g}, bypass bound {bound:.6g}, chain of {len(chain)} nodes")
    print("| chain position | node | device | answer F | bound fin | answer span | bound span |")
    print("|---|---|---|---|---|---|---|")
    last = None
    for j, v in enumerate(chain):
        if not any(problem.names[v].endswith(e) for e in every):
            continue
        span = "-" if last is None else f"{ev.finish[v] - ev.finish[chain[last]]:.4f}"
        bspan = "-" if last is None else f"{fin[j] - fin[last]:.4f}"
        print(f"| {j} | {problem.names[v]} | {ev.placement[v]} | {ev.finish[v]:.4f} | {fin[j]:.4f} | {span} | {bspan} |")
        last = j


def cases(path: str, report_path: str, memory_model: str, depth: int) -> None:
    problem = load_problem(path)
    ev = judged(problem, json.loads(open(report_path).read()), memory_model)
    chain = best_path(problem, problem.time, np.zeros(problem.m))
    each: dict[tuple[int, int], tuple[float, float, float]] = {}
    detail: dict[str, list[float]] = {}
    bound = chain_bound(problem, chain, heads(problem), heads(problem, reverse=True), detail, cases=each)

    def group(v: int) -> tuple[str, str]:
        name = str(problem.names[v])
        return "/".join(name.split("/")[:depth]), "backward" if "grad" in name else "forward"

    groups: dict[tuple[str, str], list[float]] = {}
    for (lo, hi), (w_a, w_b, w_c) in each.items():
        a, b = chain[lo], chain[hi]
        row = groups.setdefault(group(b), [0, 0, 0, 0.0, 0.0])
        row[0] += 1
        row[1] += w_b < min(w_a, w_c)
        row[2] += ev.placement[a] == ev.placement[b]
        row[3] += max(0.0, min(w_a, w_c) - w_b)
    behind = 0.0
    for v, fin in zip(chain, detail["fin"]):
        now = float(ev.finish[v]) - fin
        groups.setdefault(group(v), [0, 0, 0, 0.0, 0.0])[4] += now - behind
        behind = now
    print(f"{problem.name}: answer {ev.makespan:.6g}, bypass bound {bound:.6g}, {len(each)} windows")
    print("| windows ending in | pass | windows | B below A and C | answer's ends on one device | B holds back | the answer loses |")
    print("|---|---|---|---|---|---|---|")
    for (name, way), (count, b_low, same, held, over) in sorted(groups.items()):
        if count == 0 and abs(over) < 1e-9:
            continue
        print(f"| {name} | {way} | {count} | {b_low} | {same} | {held:.3f} | {over:.3f} |")


def window(path: str, a: str, b: str, out: str) -> None:
    problem = load_problem(path)
    ids = [str(i) for i in problem.ids]
    where = {s: j for j, s in enumerate(ids)}

    def reached(start: int, adjacency: tuple[np.ndarray, np.ndarray, np.ndarray]) -> set[int]:
        ptr, nbr, _ = adjacency
        seen, stack = {start}, [start]
        while stack:
            v = stack.pop()
            for u in nbr[ptr[v]:ptr[v + 1]].tolist():
                if u not in seen:
                    seen.add(u)
                    stack.append(u)
        return seen

    first, last = where[a], where[b]
    keep = reached(first, problem.succ_ptr) & reached(last, problem.pred_ptr)
    nodes = []
    for v in sorted(keep):
        rec = {"id": ids[v], "time": float(problem.time[v]), "out_bytes": float(problem.out_bytes[v]), "param_bytes": 0.0}
        if v == first:
            rec["devices"] = [0]
        nodes.append(rec)
    edges = [{"src": ids[s], "dst": ids[d], "comm": float(c)}
             for s, d, c in zip(problem.src.tolist(), problem.dst.tolist(), problem.comm.tolist()) if s in keep and d in keep]
    doc = {"name": f"{problem.name}: {a} -> {b}", "devices": {"count": problem.k, "memory": None}, "nodes": nodes, "edges": edges}
    with open(out, "w") as f:
        json.dump(doc, f)
    print(f"{len(nodes)} nodes, {len(edges)} edges, work {sum(r['time'] for r in nodes):.4f}, "
          f"t(A) {problem.time[first]:.4f} (span = makespan - t(A))")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("along")
    p.add_argument("graph")
    p.add_argument("report")
    p.add_argument("--memory-model", default="peak")
    p.add_argument("--every", action="append", help="chain node name endings to print (repeatable)")
    c = sub.add_parser("cases")
    c.add_argument("graph")
    c.add_argument("report")
    c.add_argument("--memory-model", default="peak")
    c.add_argument("--depth", type=int, default=1)
    w = sub.add_parser("window")
    w.add_argument("graph")
    w.add_argument("a")
    w.add_argument("b")
    w.add_argument("-o", "--out", required=True)
    args = ap.parse_args()
    if args.mode == "along":
        along(args.graph, args.report, args.memory_model, args.every or ["out_relu", "input/grad_sum"])
    elif args.mode == "cases":
        cases(args.graph, args.report, args.memory_model, args.depth)
    else:
        window(args.graph, args.a, args.b, args.out)


if __name__ == "__main__":
    main()
