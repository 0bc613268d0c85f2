"""The method table: every name ``solve --method NAME`` accepts, read top to bottom.

Each row is (name, kind, objective, one-line summary, function). The functions are plain
``f(problem, opts) -> Solution`` algorithms from heuristics/ and formulations/; they know nothing of
this table or of the CLI. ``auto`` is not a row: it is the orchestration in solvers/pipeline.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from formulations.bruteforce import MAX_NODES as BRUTE_MAX_NODES
from formulations.bruteforce import brute
from formulations.cpsat import cpsat
from formulations.latency.exact import latency_cpsat, latency_local_search_method, latency_mip
from formulations.latency.heuristics import greedy
from formulations.maxload.dp import dp_method, dpl_method
from formulations.maxload.heuristics import expert, local_search, pipedream
from formulations.maxload.ip_cpsat import maxload_cpsat, maxload_cpsat_nc
from formulations.maxload.ip_mip import maxload_mip, maxload_mip_nc
from formulations.mip import mip
from formulations.held_split import held_split
from formulations.warmstart import topo_split
from heuristics.baselines import greedy_fill, single, topo_fill
from heuristics.layer_bands import band_split, weight_bands
from heuristics.chain_home import chain_home
from heuristics.chain_pin import chain_pin
from heuristics.chain_split import chain_split
from heuristics.critical_path import critical_path
from heuristics.fewer_devices import fewer_devices
from heuristics.linear_clustering import linear_clustering
from heuristics.list_scheduling import etf, heft, m_etf, m_topo, readers_first
from heuristics.halve_repair import halve_repair
from heuristics.memory_repair import memory_repair
from heuristics.band_repair import band_repair
from heuristics.memory_span import memory_span
from heuristics.min_memory import min_memory
from heuristics.pardnn import pardnn, pardnn_balanced
from heuristics.portfolio import portfolio
from heuristics.random_feasible import random_feasible
from heuristics.tofu import tofu, tofu_hybrid
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

Method = Callable[[Problem, SolveOptions], Solution]


@dataclass(frozen=True)
class MethodInfo:
    name: str
    kind: str  # "heuristic", "exact" or "partition" (a partitioned plan, not a placement)
    objective: str  # "makespan", "max-load" or "latency"
    summary: str
    func: Method


HEURISTIC, EXACT, PARTITION = "heuristic", "exact", "partition"
MAKESPAN, MAX_LOAD, LATENCY = "makespan", "max-load", "latency"

TABLE: tuple[MethodInfo, ...] = (
    # ----- makespan: exact models ----------------------------------------------------------------
    MethodInfo("cpsat", EXACT, MAKESPAN,
               "CP-SAT makespan model (optional intervals, NoOverlap, static or peak memory); proves optimality", cpsat),
    MethodInfo("mip", EXACT, MAKESPAN,
               "big-M MIP of the makespan model (SCIP/HiGHS in the ortools wheel; static or peak memory)", mip),
    MethodInfo("brute", EXACT, MAKESPAN,
               f"enumerates every placement and device order, exact for static and peak memory (tiny instances, at most {BRUTE_MAX_NODES} nodes)", brute),
    # ----- makespan: heuristics ------------------------------------------------------------------
    MethodInfo("portfolio", HEURISTIC, MAKESPAN,
               "run the heuristics that fit the time limit, keep the best memory-feasible one", portfolio),
    MethodInfo("pardnn", HEURISTIC, MAKESPAN,
               "PARDNN: slicing + LFLAM mapping + memory heuristic I (emulator, knapsack overflow handler)", pardnn),
    MethodInfo("pardnn-balanced", HEURISTIC, MAKESPAN,
               "PARDNN with memory heuristic II (chunk splitting, Eq. 5 balancing) before heuristic I", pardnn_balanced),
    MethodInfo("etf", HEURISTIC, MAKESPAN, "Earliest Time First list scheduling; memory check: static, or live bytes over its schedule (peak)", etf),
    MethodInfo("m-etf", HEURISTIC, MAKESPAN,
               "Baechi's m-ETF: ETF charging received input tensors to the receiving device's memory", m_etf),
    MethodInfo("heft", HEURISTIC, MAKESPAN,
               "HEFT: upward-rank order, earliest-finish device with gap insertion, memory check (live bytes under peak)", heft),
    MethodInfo("critical-path", HEURISTIC, MAKESPAN,
               "Mayer et al. 2017: critical path on one device, the rest earliest-finish, memory check", critical_path),
    MethodInfo("chain-split", HEURISTIC, MAKESPAN,
               "critical chain cut into 1..K memory-balanced segments (one device each, forward and backward of an "
               "activation together), the rest earliest-finish around it", chain_split),
    MethodInfo("linear-clustering", HEURISTIC, MAKESPAN,
               "Kim's linear clustering + GLB cluster mapping, static-memory check", linear_clustering),
    MethodInfo("topo-split", HEURISTIC, MAKESPAN,
               "best contiguous split of a topological order into <= K memory-feasible segments (warm start)", topo_split),
    MethodInfo("held-split", HEURISTIC, MAKESPAN,
               "peak model: CP-SAT places units under held-tensor knapsacks at least cut comm, then a memory-aware order", held_split),
    MethodInfo("topo-fill", HEURISTIC, MAKESPAN,
               "topological order, each device filled to an equal share of memory (m-TOPO)", topo_fill),
    MethodInfo("m-topo", HEURISTIC, MAKESPAN,
               "Baechi's m-TOPO: the topological equal-share fill of heuristics.baselines (alias of topo-fill)", m_topo),
    MethodInfo("greedy-fill", HEURISTIC, MAKESPAN,
               "topological order, each device filled up to its capacity (Tarnawski's greedy)", greedy_fill),
    MethodInfo("band-split", HEURISTIC, MAKESPAN,
               "training graphs (heuristics.layer_bands): each device a band of the parameter units (a layer forward "
               "and backward), balancing what is live at the loss; memory-light orders (smallest memory)", band_split),
    MethodInfo("chain-pin", HEURISTIC, MAKESPAN,
               "training graphs of unrolled loops: ETF with each weight-gradient accumulation chain and its gradients "
               "on one device, params off the busiest chain's device; deadline order (heuristics.chain_pin)", chain_pin),
    MethodInfo("chain-home", HEURISTIC, MAKESPAN,
               "training graphs of unrolled loops, memory to spare: ETF with each weight-gradient accumulation chain "
               "beside the weight it updates, the longest chain's device its own once it starts (heuristics.chain_home)",
               chain_home),
    MethodInfo("readers-first", HEURISTIC, MAKESPAN,
               "ETF where a weight that is slow to copy has its readers run first on its own device until a copy "
               "could arrive elsewhere (unrolled recurrent models over slow links: heuristics.exclusive)", readers_first),
    MethodInfo("min-memory", HEURISTIC, MAKESPAN,
               "peak model: nodes in a memory-light single-device order, each to the device that keeps live bytes "
               "level (smallest memory per device)", min_memory),
    MethodInfo("mem-span", HEURISTIC, MAKESPAN,
               "peak model: min-memory's placement along ETF's unlimited-memory order blended with a memory-light "
               "one (makespan at moderate memory)", memory_span),
    MethodInfo("mem-repair", HEURISTIC, MAKESPAN,
               "peak model: ETF's unlimited-memory placement in its own order, the holders of each over-capacity "
               "device's peak bytes moved to devices with room until it fits (makespan at moderate memory)", memory_repair),
    MethodInfo("band-repair", HEURISTIC, MAKESPAN,
               "peak model: fast unlimited-memory schedules (PARDNN on 2, K/2, K devices; ETF), each over-capacity "
               "device cut into bands of layers (forward with its backward) moved whole to devices with room, then "
               "mem-repair (makespan at moderate memory)", band_repair),
    MethodInfo("halve-repair", HEURISTIC, MAKESPAN,
               "peak model: mem-repair on K/2 devices with twice the memory, each device then split in two by layers "
               "(a layer's backward with its forward) and repaired (tight memory on many devices)", halve_repair),
    MethodInfo("weight-bands", HEURISTIC, MAKESPAN,
               "layer-wise model parallelism (heuristics.layer_bands): each device a contiguous band of the weights "
               "with the ops that use them, balancing work; critical-path order under a memory headroom", weight_bands),
    MethodInfo("fewer-devices", HEURISTIC, MAKESPAN,
               "PARDNN (with and without memory heuristic II) on K/2, K/4, ... of the devices (those with the most "
               "memory), the best answer used on all K (the others left empty)", fewer_devices),
    MethodInfo("single", HEURISTIC, MAKESPAN, "every node on the largest device (only when it fits)", single),
    MethodInfo("random", HEURISTIC, MAKESPAN,
               "random placement that respects static memory (seeded sanity anchor)", random_feasible),
    # ----- makespan: operator partitioning (answers are partitioned plans, not placements) ---------
    MethodInfo("tofu", PARTITION, MAKESPAN,
               "Tofu: split every operator over all devices (recursive DP over layouts, needs node_meta); "
               "reports a partitioned plan", tofu),
    MethodInfo("tofu-hybrid", PARTITION, MAKESPAN,
               "partition the operators needing over half a device (Tofu's DP), place the rest whole (PARDNN); "
               "reports a hybrid plan", tofu_hybrid),
    # ----- max-load (pipelined throughput, Tarnawski et al.) ---------------------------------------
    MethodInfo("dp", EXACT, MAX_LOAD,
               "Tarnawski et al. DP over ideals, Appendix B preprocessing: proves the max-load optimum over "
               "pipelines of contiguous stages", dp_method),
    MethodInfo("maxload-cpsat", EXACT, MAX_LOAD,
               "Tarnawski et al. contiguous max-load IP (Fig. 6) in CP-SAT, hinted by DPL", maxload_cpsat),
    MethodInfo("maxload-cpsat-nc", EXACT, MAX_LOAD,
               "Tarnawski et al. non-contiguous max-load IP in CP-SAT, hinted by DPL", maxload_cpsat_nc),
    MethodInfo("maxload-mip", EXACT, MAX_LOAD,
               "Tarnawski et al. contiguous max-load IP as a MIP (OR-Tools, SCIP), hinted by DPL", maxload_mip),
    MethodInfo("maxload-mip-nc", EXACT, MAX_LOAD,
               "Tarnawski et al. non-contiguous max-load IP as a MIP (OR-Tools, SCIP), hinted by DPL", maxload_mip_nc),
    MethodInfo("dpl", HEURISTIC, MAX_LOAD,
               "DP over ideals of a DFS-linearised graph (Section 5.1.2): fast, contiguous, not proved optimal", dpl_method),
    MethodInfo("local-search", HEURISTIC, MAX_LOAD,
               "best single-node moves from random splits, 10 restarts (Tarnawski et al.'s baseline)", local_search),
    MethodInfo("pipedream", HEURISTIC, MAX_LOAD,
               "PipeDream-style DP on the graph with branchings contracted into a path of blocks", pipedream),
    MethodInfo("expert", HEURISTIC, MAX_LOAD,
               "a hand-made split (solve --split FILE), evaluated for max-load", expert),
    # ----- latency (single sample through CPU memory, Tarnawski et al.) ------------------------------
    MethodInfo("latency-cpsat", EXACT, LATENCY,
               "Tarnawski et al. latency IP (Figs. 3/4, q subgraphs per accelerator) in CP-SAT, warm-started", latency_cpsat),
    MethodInfo("latency-mip", EXACT, LATENCY,
               "Tarnawski et al. latency IP (big-M MIP, OR-Tools SCIP), warm-started", latency_mip),
    MethodInfo("latency-local-search", HEURISTIC, LATENCY,
               "iterated local search on latency splits from greedy and the DP splits (Tarnawski's local search baseline)",
               latency_local_search_method),
    MethodInfo("greedy", HEURISTIC, LATENCY,
               "Tarnawski et al. latency baseline: fill accelerators in topological order, rest on CPU", greedy),
)

_BY_NAME: dict[str, MethodInfo] = {row.name: row for row in TABLE}
if len(_BY_NAME) != len(TABLE):  # pragma: no cover - a typo in the table above
    raise RuntimeError("a method name appears twice in solvers/methods.py")


def methods() -> dict[str, MethodInfo]:
    """Every method by name, in the table's order (the order ``--list-methods`` prints)."""
    return dict(_BY_NAME)


def get(name: str) -> MethodInfo:
    """The row for ``name``; KeyError naming the known methods otherwise."""
    if name not in _BY_NAME:
        raise KeyError(f"unknown method {name!r}; known: {', '.join(sorted(_BY_NAME))}")
    return _BY_NAME[name]
