"""Lower bounds of the single-sample latency (Section 4 model), valid for every feasible split
with q = 1 or more subgraphs per accelerator.

Path bound: along any path v1..vr of the graph the last output cannot be ready before the path
is processed, whatever the split: a node costs ``time`` on an accelerator or ``cpu_latency`` on a
CPU; consecutive path nodes in different places pay the transfer of the earlier node's tensor once
per accelerator side (accelerator -> accelerator twice, accelerator <-> CPU once, CPU -> CPU
never); a maximal run of path nodes in one subgraph must fit one accelerator's memory. (A subgraph
holding a run starts after the run's predecessor is in host memory, reads it, computes at least the
run, and its outputs - the run's last tensor among them - are available only after its writes.)
The exact minimum over such assignments of one path is a small DP; any path gives a valid bound,
so the bound is the best over a few candidate paths: the longest path by min(time, cpu_latency)
and the longest paths through the costliest tensors' edges.
"""
from __future__ import annotations

import numpy as np

from placement.objectives import cpu_time, node_bytes, supported, tensors
from placement.problem import Problem


def path_min_latency(problem: Problem, path: list[int]) -> float:
    """Least possible completion time of ``path`` under the rules of the module docstring."""
    acc = np.where(supported(problem), problem.time, np.inf)
    cpu = cpu_time(problem)
    size = node_bytes(problem)
    cap = float(problem.memory.max())
    tens = tensors(problem)
    eid = {(int(u), int(v)): e for e, (u, v) in enumerate(zip(problem.src, problem.dst))}
    r = len(path)
    cost = [float(tens.cost[tens.of_edge[eid[(path[i], path[i + 1])]]]) for i in range(r - 1)]
    # best_cpu[i]: least time with node i on a CPU; best_acc[i]: node i the last of a run on an accelerator
    best_cpu = np.full(r, np.inf)
    best_acc = np.full(r, np.inf)
    for i in range(r):
        v = path[i]
        if i == 0:
            best_cpu[i] = cpu[v]
        else:
            c = cost[i - 1]
            best_cpu[i] = min(best_cpu[i - 1], best_acc[i - 1] + c) + cpu[v]
        # accelerator run path[j..i]
        run_time, run_mem = 0.0, 0.0
        for j in range(i, -1, -1):
            run_time += acc[path[j]]
            run_mem += size[path[j]]
            if run_mem > cap or not np.isfinite(run_time):
                break
            if j == 0:
                before = 0.0
            else:
                c = cost[j - 1]
                before = min(best_cpu[j - 1] + c, best_acc[j - 1] + 2 * c)
            best_acc[i] = min(best_acc[i], before + run_time)
    return float(min(best_cpu[-1], best_acc[-1]))


def candidate_paths(problem: Problem, count: int = 12) -> list[list[int]]:
    n = problem.n
    w = np.minimum(np.where(supported(problem), problem.time, np.inf), cpu_time(problem))
    tens = tensors(problem)
    ecost = tens.cost[tens.of_edge] if problem.m else np.zeros(0)
    order = problem.topo_order.tolist()
    pptr, pnbr, pedge = problem.pred_ptr
    sptr, snbr, sedge = problem.succ_ptr
    down = np.zeros(n)  # longest path weight ending at v (inclusive), by w + edge cost
    dpar = np.full(n, -1)
    for v in order:
        best, arg = 0.0, -1
        for j in range(pptr[v], pptr[v + 1]):
            u = int(pnbr[j])
            val = down[u] + ecost[pedge[j]]
            if val > best:
                best, arg = val, u
        down[v] = best + w[v]
        dpar[v] = arg
    up = np.zeros(n)  # longest path weight starting at v (inclusive)
    upar = np.full(n, -1)
    for v in reversed(order):
        best, arg = 0.0, -1
        for j in range(sptr[v], sptr[v + 1]):
            x = int(snbr[j])
            val = up[x] + ecost[sedge[j]]
            if val > best:
                best, arg = val, x
        up[v] = best + w[v]
        upar[v] = arg

    def through(u: int, v: int) -> list[int]:
        head = []
        x = u
        while x >= 0:
            head.append(x)
            x = int(dpar[x])
        tail = []
        x = v
        while x >= 0:
            tail.append(x)
            x = int(upar[x])
        return head[::-1] + tail

    paths = []
    end = int(np.argmax(down))
    p = []
    x = end
    while x >= 0:
        p.append(x)
        x = int(dpar[x])
    paths.append(p[::-1])
    for e in np.argsort(-ecost)[:count].tolist():
        paths.append(through(int(problem.src[e]), int(problem.dst[e])))
    return paths


def latency_lower_bound(problem: Problem, count: int = 12) -> tuple[float, list[int]]:
    """(bound, the path that gives it)."""
    best, arg = 0.0, []
    for path in candidate_paths(problem, count):
        val = path_min_latency(problem, path)
        if val > best:
            best, arg = val, path
    return best, arg
