"""The ``solve`` command: load a graph, place it, evaluate it, report.

Exit status: 0 when a feasible answer was written; 1 when none exists (proved infeasible) or none
was found (the report is still written, with the reason); 2 for bad input or bad options (nothing
written).
"""
from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import time
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from formulations.maxload.heuristics import read_split
from placement.evaluator import MEMORY_MODELS
from placement.explain import explain, explain_text
from placement.formats import FORMATS, load_problem
from placement.problem import Problem, ProblemError
from placement.report import write_placement, write_report
from placement.solution import SolveOptions
from placement.trace import write_chrome_trace, write_gantt
from placement.units import format_bytes, parse_memory_list

from .methods import methods
from . import run as run_module
from .frontier import frontier, frontier_table, min_devices, plot_frontier
from .run import RunResult, objective_model, run
from .sweep import ray_available

OBJECTIVES = ("makespan", "max-load", "latency")
DEFAULT_EXAMPLE = "default.json"


class UsageError(Exception):
    """Bad options: exit 2."""


def default_graph() -> Path:
    """The shipped default example: data/default.json, installed as the package data placement.data
    (or found beside the sources when running from a checkout)."""
    try:
        installed = Path(str(resources.files("placement.data").joinpath(DEFAULT_EXAMPLE)))
        if installed.exists():
            return installed
    except ModuleNotFoundError:
        pass
    return Path(__file__).resolve().parents[1] / "data" / DEFAULT_EXAMPLE


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="solve",
        description="Place a DNN operator graph on K memory-limited devices and report the makespan, memory per "
                    "device, a valid lower bound and the gap. With no GRAPH, solves the shipped default example.",
    )
    p.add_argument("graph", nargs="?", help="problem file: native JSON, msr-fiddle JSON, a PARDNN .dot (or its directory), a PipeDream graph.txt or an ONNX model; any of them gzipped")
    p.add_argument("--devices", type=int, metavar="K", help="number of devices (overrides the file)")
    p.add_argument("--memory", metavar="SIZE", help="memory per device: bytes, 16GB (=16e9), 16GiB (=16*2^30), or a comma list, one per device (overrides the file)")
    p.add_argument("--memory-model", choices=MEMORY_MODELS, default="static", help="static: params + outputs of a device's nodes (default); peak: peak over time of live tensors (PARDNN Eq. 2)")
    p.add_argument("--time-limit", type=float, default=60.0, metavar="S", help="seconds for the whole run (default 60)")
    p.add_argument("--objective", choices=OBJECTIVES, default="makespan", help="what to minimise (default makespan)")
    p.add_argument("--method", default="auto", metavar="NAME", help="auto (default: the best available portfolio) or one method from --list-methods")
    p.add_argument("--list-methods", action="store_true", help="list the method names and exit")
    p.add_argument("--out", metavar="FILE", help="write the placement as 'node device' lines (PARDNN's format)")
    p.add_argument("--report", metavar="FILE", help="write the JSON report")
    p.add_argument("--explain", action="store_true", help="print per-device load, memory peaks and the critical path (always in the report)")
    p.add_argument("--trace", metavar="FILE", help="write the schedule as Chrome trace JSON (open in Perfetto)")
    p.add_argument("--gantt", metavar="FILE", help="write a PNG Gantt chart of the schedule (needs matplotlib: pip install '.[plot]')")
    p.add_argument("--coarse-size", type=int, metavar="N", help="target size of the coarsened graph for the exact phase of auto on big graphs")
    p.add_argument("--format", choices=FORMATS, help="input format (default: detected from the content)")
    p.add_argument("--seed", type=int, default=0, help="seed for heuristics (default 0)")
    p.add_argument("--workers", type=int, metavar="N", help="CP-SAT search workers (default: the machine's cores)")
    p.add_argument("--split", metavar="FILE", help="--method expert: the split to evaluate (JSON: a device per node index, or node id -> device; CPU core c as -1 - c)")
    p.add_argument("--reserve", type=float, default=0.0, metavar="FRACTION", help="fraction of each device's memory to keep free (default 0): a soft target for heuristics; exact methods keep it and prove optimal/infeasible only for the stated capacities")
    p.add_argument("--frontier", action="store_true", help="sweep memory per device from the memory lower bound up: the makespan-memory curve (table, --report, --plot)")
    p.add_argument("--points", type=int, default=8, metavar="N", help="frontier points (default 8)")
    p.add_argument("--plot", metavar="FILE", help="with --frontier: write the curve as a PNG (needs matplotlib: pip install '.[plot]')")
    p.add_argument("--min-devices", action="store_true", help="the fewest devices of --memory capacity on which a placement is found")
    p.add_argument("--parallel", choices=("auto", "ray", "none"), default="auto", help="frontier points on Ray when installed (auto, default), required (ray) or sequential (none)")
    p.add_argument("--ray-address", metavar="ADDR", help="an existing Ray cluster (default: a local one)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--verbose", action="store_true", help="also show the solvers' own logs (CP-SAT search log)")
    return p


def list_methods() -> str:
    rows = [f"{'auto':18} {'pipeline':10} {'makespan':9} warm start (portfolio), exact CP-SAT (coarsened on big graphs), refine; keeps the best"]
    for name, info in methods().items():
        rows.append(f"{name:18} {info.kind:10} {info.objective:9} {info.summary}")
    return "\n".join(rows)


def _prepare(args: argparse.Namespace) -> tuple[Problem, SolveOptions]:
    if args.time_limit is not None and args.time_limit <= 0:
        raise UsageError(f"--time-limit must be positive, got {args.time_limit}")
    if args.devices is not None and args.devices < 1:
        raise UsageError(f"--devices must be at least 1, got {args.devices}")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {args.workers}")
    if not 0.0 <= args.reserve < 1.0:
        raise UsageError(f"--reserve must be in [0, 1), got {args.reserve}")
    if args.gantt:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError("--gantt needs matplotlib: pip install '.[plot]'") from None
    if args.frontier or args.min_devices:
        if args.frontier and args.min_devices:
            raise UsageError("--frontier and --min-devices are separate questions: give one")
        if args.objective != "makespan":
            raise UsageError("--frontier and --min-devices answer for the makespan objective")
        if args.points < 1:
            raise UsageError(f"--points must be at least 1, got {args.points}")
        if args.min_devices and args.memory is None:
            raise UsageError("--min-devices needs --memory (the capacity of each device)")
    if args.plot:
        if not args.frontier:
            raise UsageError("--plot draws the frontier: add --frontier")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError("--plot needs matplotlib: pip install '.[plot]'") from None
    if args.parallel == "ray":
        if not ray_available():
            raise UsageError("--parallel ray needs Ray: pip install '.[ray]'")
    if args.coarse_size is not None and args.coarse_size < 2:
        raise UsageError(f"--coarse-size must be at least 2, got {args.coarse_size}")
    for flag, value in (("--out", args.out), ("--report", args.report), ("--trace", args.trace), ("--gantt", args.gantt),
                        ("--plot", args.plot)):
        if value is not None:
            folder = Path(value).parent
            if not folder.is_dir():
                raise UsageError(f"{flag}: directory {str(folder)!r} does not exist")
            if Path(value).is_dir():
                raise UsageError(f"{flag}: {value!r} is a directory")
    memory = None
    if args.memory is not None:
        try:
            memory = parse_memory_list(args.memory)
        except ValueError as exc:
            raise UsageError(f"--memory: {exc}") from None
    table = methods()
    if args.method != "auto" and args.method not in table:
        raise UsageError(f"--method: unknown method {args.method!r}; see --list-methods")
    if args.objective != "makespan" and args.memory_model != "static":
        raise UsageError(f"--objective {args.objective} uses static memory (Tarnawski et al.'s model); drop --memory-model {args.memory_model}")
    if args.method != "auto" and table[args.method].objective != args.objective:
        raise UsageError(f"--method {args.method} optimises {table[args.method].objective}, not {args.objective}")
    if args.objective != "makespan" and args.method == "auto":
        if run_module.AUTO_FOR.get(args.objective) not in table:
            raise UsageError(f"--objective {args.objective}: no method for it is installed yet")
    graph = args.graph or default_graph()
    problem = load_problem(graph, args.format)
    if args.devices is not None or memory is not None:
        if isinstance(memory, list) and args.devices is not None and len(memory) != args.devices:
            raise UsageError(f"--memory lists {len(memory)} sizes for --devices {args.devices}")
        count = args.devices if args.devices is not None else (len(memory) if isinstance(memory, list) else None)
        problem = problem.with_devices(count, memory)
    opts = SolveOptions(memory_model=args.memory_model, time_limit=args.time_limit, workers=args.workers,
                        seed=args.seed, reserve=args.reserve, verbose=args.verbose)
    if args.coarse_size is not None:
        opts.extra["coarse_size"] = args.coarse_size
    if (args.split is None) != (args.method != "expert"):
        raise UsageError("--method expert needs --split FILE" if args.split is None else "--split is read only by --method expert")
    if args.split is not None:
        try:
            opts.extra["split"] = read_split(problem, args.split)
        except (OSError, ValueError, TypeError) as exc:
            raise UsageError(f"--split {args.split}: {exc}") from None
    return problem, opts


def summary(problem: Problem, result: RunResult, memory_model: str) -> str:
    lines = [f"{problem.describe()}; memory model: {memory_model}"]
    stopped = " (interrupted: best answer so far)" if result.interrupted else ""
    lines.append(f"status: {result.status}{stopped}   method: {result.method}   time: {result.seconds:.2f} s")
    if result.objective_name != "makespan" and result.split is not None:
        g = result.gap
        lines.append(f"{result.objective_name}: {result.value:.6g}   lower bound: {result.lower_bound:.6g}   gap: {100 * (g or 0):.2f}%")
        if result.solution is not None:
            lines.append(f"model: {objective_model(result.objective_name, result.solution)}")
        rows = result.breakdown.get("devices", []) if result.breakdown else []
        if rows:
            lines.append("device      load   compute      comm   memory       capacity")
        for row in rows:
            mem = format_bytes(row["memory"]) if "memory" in row else "-"
            cap = format_bytes(row["capacity"]) if "capacity" in row else "-"
            lines.append(f"{row['device']:7} {row.get('load', 0):9.4g} {row.get('compute', 0):9.4g} {row.get('comm', 0):9.4g}   {mem:>10}   {cap:>10}")
        for row in result.breakdown.get("subgraphs", []) if result.breakdown else []:
            lines.append("  " + ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items() if not isinstance(v, (list, dict))))
    elif result.partition is not None:
        part = result.partition
        lines.append(f"partitioned plan (Tofu) over {problem.k} devices, factors {part['factors']}: makespan {result.value:.6g}, "
                     f"communication {format_bytes(part['communication_bytes'])}")
        lines.append(f"max device memory {format_bytes(part['max_device_memory'])} = "
                     f"{part['memory_vs_single_over_k']:.3f} x (single device {format_bytes(part['single_device_memory'])}) / {problem.k}")
        if part.get("undescribed_operators"):
            lines.append(f"run whole on every device (no description): {', '.join(part['undescribed_operators'])}")
    elif result.evaluation is not None:
        ev = result.evaluation
        g = result.gap
        lines.append(f"makespan: {ev.makespan:.6g}   lower bound: {result.lower_bound:.6g}   gap: {100 * g:.2f}%" if g is not None else "")
        lines.append("device  nodes  static memory   peak memory     capacity")
        counts = [int((ev.placement == d).sum()) for d in range(problem.k)]
        for d in range(problem.k):
            lines.append(f"{problem.device_names[d]:7} {counts[d]:6d}  {format_bytes(ev.static_memory[d]):>13}  "
                         f"{format_bytes(ev.peak_memory[d]):>12}  {format_bytes(problem.memory[d]):>11}")
    else:
        lines.append(f"lower bound: {result.lower_bound:.6g}")
    if result.memory_bound.get("best"):
        lines.append(f"memory lower bound: {format_bytes(result.memory_bound['best'])} per device (no placement on "
                     f"{problem.k} devices fits below it)")
    if result.reason:
        lines.append(f"reason: {result.reason}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    started = time.monotonic()  # --time-limit counts loading the graph too
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list_methods:
        print(list_methods())
        return 0
    try:
        problem, opts = _prepare(args)
    except (UsageError, ProblemError) as exc:
        print(f"solve: error: {exc}", file=sys.stderr)
        return 2
    opts.started = started
    if args.frontier or args.min_devices:
        return _sweep_main(problem, opts, args)
    progress = None if args.quiet else (lambda msg: print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr))
    with _stop_on_signals(opts.stop):
        result = _in_worker_thread(lambda: run(problem, args.method, opts, progress=progress, objective=args.objective))
    report = result.report(problem, opts.memory_model)
    if result.evaluation is not None:
        report["explain"] = explain(problem, result.evaluation)
    if args.report:
        write_report(args.report, report)
    if args.out and result.answered and (result.evaluation is not None or result.split is not None):
        write_placement(args.out, problem, result.evaluation.placement if result.evaluation is not None else result.split)
    if result.evaluation is not None and args.trace:
        write_chrome_trace(args.trace, problem, result.evaluation)
    if result.evaluation is not None and args.gantt:
        write_gantt(args.gantt, problem, result.evaluation)
    print(summary(problem, result, opts.memory_model))
    if args.explain and result.evaluation is not None:
        print(explain_text(problem, result.evaluation))
    return 0 if result.answered else 1


def _sweep_main(problem: Problem, opts: SolveOptions, args: argparse.Namespace) -> int:
    """``--frontier`` and ``--min-devices``: independent solves over memory or device counts."""
    if args.frontier:
        fr = frontier(problem, opts.memory_model, args.method, args.points, args.time_limit, args.seed,
                      args.parallel, args.ray_address)
        print(frontier_table(fr, format_bytes))
        if args.report:
            write_report(args.report, {**fr.as_dict(), "problem": {"name": problem.name, "nodes": problem.n, "edges": problem.m}})
        if args.plot:
            plot_frontier(args.plot, fr)
        return 0 if fr.smallest_feasible is not None else 1
    cap = float(problem.memory.max())
    md = min_devices(problem, cap, opts.memory_model, args.method, args.time_limit, args.seed)
    verdict = "-" if md.devices is None else f"{md.devices}{' (proved fewest: fewer cannot hold the memory)' if md.proved else ''}"
    print(f"devices of {format_bytes(cap)}: fewest found {verdict}; the memory lower bound allows no fewer than {md.fewest_by_bound}")
    for row in md.tried:
        print(f"  K={row['devices']}: {row['status']} makespan={row['makespan']}")
    if args.report:
        write_report(args.report, {"capacity": cap, "memory_model": opts.memory_model, "devices": md.devices, "proved": md.proved,
                                   "fewest_by_bound": md.fewest_by_bound, "tried": md.tried})
    return 0 if md.devices is not None else 1


def _in_worker_thread(job: Callable[[], RunResult]) -> RunResult:
    """Run ``job`` in a worker thread while the main thread waits in short steps: Python runs signal
    handlers only in the main thread, between bytecodes, so a main thread blocked inside a long
    native solve would not see Ctrl-C until the solve ended."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = job()
        except BaseException as exc:  # re-raised in the main thread
            box["error"] = exc

    worker = threading.Thread(target=target, name="solve", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    if "error" in box:
        raise box["error"]
    return box["result"]


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """First Ctrl-C or SIGTERM: ask the methods to stop and keep the best answer so far; a second
    Ctrl-C aborts at once."""
    def handler(signum: int, frame: object) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop.set()
        print(f"solve: {signal.Signals(signum).name} received, stopping with the best answer so far", file=sys.stderr)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


if __name__ == "__main__":
    sys.exit(main())
