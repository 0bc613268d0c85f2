"""The ``solve`` command: load a graph, place it, evaluate it, report.

Exit status: 0 when a feasible answer was written; 1 when none exists (proved infeasible) or none
was found (the report is still written, with the reason); 2 for bad input or bad options (nothing
written).
"""
from __future__ import annotations

if __name__ == "__main__":  # first of all: Ctrl-C during the imports below is one line too
    from solvers.early_signals import install_early_handlers

    install_early_handlers()

import argparse
import math
import os
import signal
import sys
import threading
import time
from importlib import resources
from pathlib import Path
from typing import Callable, NoReturn, Sequence

from formulations.maxload.heuristics import read_split
from placement.evaluator import MEMORY_MODELS
from placement.explain import explain, explain_text
from placement.formats import FORMATS, load_problem
from placement.problem import Problem, ProblemError, check_device_count
from placement.output import OutputError, check_writable
from placement.report import json_safe, unwritable_id, write_placement, write_report
from placement.solution import BestSoFar, SolveOptions
from placement.trace import write_chrome_trace, write_gantt
from placement.units import format_bytes, parse_memory_list

from . import IMPORTED_AT
from .background import in_worker, worker
from .methods import methods
from . import run as run_module
from .frontier import frontier, frontier_table, min_devices, plot_frontier
from .pipeline import finish_reserve
from .run import RunResult, interrupted_result, objective_model, run
from .sweep import ray_available, ray_session
from .unwind import unwind

OBJECTIVES = ("makespan", "max-load", "latency")
DEFAULT_EXAMPLE = "default.json"


class UsageError(Exception):
    """Bad options: exit 2."""


class _Parser(argparse.ArgumentParser):
    """argparse prints its usage (8 lines) before an error; the contract is one line, exit 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


# Seconds a stopped run gets to return before the command reports without it (Ctrl-C, SIGTERM,
# or the time limit passed): "Ctrl-C stops within a second", writing the report included.
STOP_GRACE = 0.25
KEEPALIVE_SECONDS = 8.0  # a progress line at least this often (auto's own heartbeat says more, every 7 s)
# How long an unwound run may take to end (solvers/unwind.py): Python code ends at once; a native
# call ends when it returns, and is not waited for longer.
UNWIND_WAIT = 0.1
OUTPUT_FLAGS = ("--report", "--out", "--trace", "--gantt", "--plot")
# The interpreter's own start-up before it imports this package: 20-50 ms warm, under a second
# cold (the first run after an install, under load).
INTERPRETER_START = 1.0


def process_started() -> float:
    """The process's start on the time.monotonic() clock (Linux: from /proc), so that --time-limit
    counts Python's start-up and imports too; the current time where that is unknown.

    /proc gives the fork, not the exec: a shell that runs other commands first and then replaces
    itself with this one (``bash -c "pip install . && solve"`` does) would count their time too
    (a fresh venv's first run read 18-20 s at "loaded"), so the start is never taken earlier than
    INTERPRETER_START before this package was first imported."""
    now = time.monotonic()
    floor = IMPORTED_AT - INTERPRETER_START
    try:
        with open("/proc/self/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        age = uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return now
    return max(now - min(max(age, 0.0), 60.0), floor)


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
    p = _Parser(
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
    p.add_argument("--workers", type=int, metavar="N", help="CP-SAT search workers (default: the machine's cores); 1 also keeps auto's search in one process (no side track)")
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
    if not (math.isfinite(args.time_limit) and args.time_limit > 0):
        raise UsageError(f"--time-limit must be a positive number of seconds, got {args.time_limit}")
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
    _check_outputs(args)
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
    if args.devices is not None:
        check_device_count(args.devices, "--devices")
    graph = args.graph or default_graph()
    problem = load_problem(graph, args.format)
    if args.devices is not None or memory is not None:
        if isinstance(memory, list) and args.devices is not None and len(memory) != args.devices:
            raise UsageError(f"--memory lists {len(memory)} sizes for --devices {args.devices}")
        count = args.devices if args.devices is not None else (len(memory) if isinstance(memory, list) else None)
        problem = problem.with_devices(count, memory)
    if args.out:
        bad = unwritable_id(problem)
        if bad is not None:
            raise UsageError(f"--out: node id {bad!r} (empty, a line break, white space at an end, or a leading '#') "
                             "cannot be written as a 'node device' line; use --report")
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


def _sweep_main(problem: Problem, opts: SolveOptions, args: argparse.Namespace) -> int:
    """``--frontier`` and ``--min-devices``: independent solves over memory or device counts, in a
    worker thread (solvers/background.py); Ctrl-C ends them with what they have."""
    if args.frontier:
        with ray_session(args.parallel, args.ray_address):  # Ray wants the main thread for its own signal handlers
            fr = in_worker(lambda: frontier(problem, opts.memory_model, args.method, args.points, args.time_limit,
                                             args.seed, args.parallel, args.ray_address, started=opts.started,
                                             stop=opts.stop))
        print(frontier_table(fr, format_bytes))
        if args.report:
            write_report(args.report, {**fr.as_dict(), "problem": {"name": problem.name, "nodes": problem.n, "edges": problem.m}})
        if args.plot:
            plot_frontier(args.plot, fr)
        return 0 if fr.smallest_feasible is not None else 1
    cap = float(problem.memory.max())
    md = in_worker(lambda: min_devices(problem, cap, opts.memory_model, args.method, args.time_limit, args.seed,
                                        started=opts.started, stop=opts.stop))
    verdict = "-" if md.devices is None else f"{md.devices}{' (proved fewest: fewer cannot hold the memory)' if md.proved else ''}"
    print(f"devices of {format_bytes(cap)}: fewest found {verdict}; the memory lower bound allows no fewer than {md.fewest_by_bound}")
    for row in md.tried:
        print(f"  K={row['devices']}: {row['status']} makespan={row['makespan']}")
    if args.report:
        write_report(args.report, {"capacity": cap, "memory_model": opts.memory_model, "devices": md.devices, "proved": md.proved,
                                   "fewest_by_bound": md.fewest_by_bound, "tried": md.tried})
    return 0 if md.devices is not None else 1


def _check_outputs(args: argparse.Namespace) -> None:
    """Every output can be written, and none overwrites another or the input: found out before the
    solve, not after it (an unwritable --report once lost the answer of a whole run)."""
    seen: dict[str, str] = {}
    inputs = {os.path.realpath(args.graph)} if args.graph else set()
    for flag in OUTPUT_FLAGS:
        value = getattr(args, flag[2:])
        if value is None:
            continue
        try:
            check_writable(value)
        except OutputError as exc:
            raise UsageError(f"{flag}: {exc}") from None
        real = os.path.realpath(value)
        if real.startswith(("/dev/", "/proc/")):
            continue  # /dev/stdout twice is fine
        if real in seen:
            raise UsageError(f"{seen[real]} and {flag} name the same file {value!r}")
        if real in inputs:
            raise UsageError(f"{flag} would overwrite the input {value!r}")
        seen[real] = flag


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
        parts = [k for k in result.memory_bound if k != "best"]
        part = f", from {max(parts, key=lambda k: result.memory_bound[k])}" if parts else ""
        lines.append(f"memory lower bound: {format_bytes(result.memory_bound['best'])} per device (no placement on "
                     f"{problem.k} devices fits below it{part})")
    if result.reason:
        lines.append(f"reason: {result.reason}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``solve`` command (see the module docstring for the exit statuses)."""
    return Command().main(argv)


class Command:
    """One run of ``solve``: its signal handling, its watchdog and its outputs.

    Signals: while the graph loads, Ctrl-C or SIGTERM ends the run at once (one line, exit 130,
    nothing written). While solving, the first asks the methods to stop and keeps the best answer
    so far; a second Ctrl-C abandons the run (one line, exit 130, nothing written). While the
    outputs are written, the first signal lets them finish; a second Ctrl-C aborts the file being
    written, which stays complete or absent.
    The watchdog: a run that has not returned STOP_GRACE seconds after a stop (signal or time
    limit) is abandoned, unwound (solvers/unwind.py: an exception raised inside its thread ends a
    pure-Python computation deaf to the stop flag), and the best verified answer published so far
    is reported instead;
    ``abandoned`` then tells the caller to end the process without waiting for that thread."""

    def __init__(self, started: float | None = None) -> None:
        # The clock of --time-limit: the process's start when this is the program (run_as_program), the
        # call's start when main() is called from other code (a test, a notebook).
        self.started = time.monotonic() if started is None else started
        self.stage = "loading"
        self.stop = threading.Event()
        self.signalled_at: float | None = None  # the first Ctrl-C or SIGTERM while solving
        self.interrupted_in: str | None = None  # the phase that first signal landed in
        self.progress: BestSoFar | None = None  # the run's answer, bound and phase so far
        self.limit_at: float | None = None  # when the watchdog asked the run to stop for the time limit
        self.abandoned = False
        self.stdout_gone = False
        self.last_line: float | None = None  # when the last progress line was printed (None: --quiet)

    def main(self, argv: Sequence[str] | None) -> int:
        old = None
        if threading.current_thread() is threading.main_thread():
            old = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            return self._run(argv)
        except KeyboardInterrupt:
            if self.stage == "solving":
                self.abandoned = True
            nothing = "; nothing written" if self.stage in ("loading", "solving") else ""
            print(f"solve: interrupted while {self.stage}{nothing}", file=sys.stderr)
            return 130
        finally:
            for sig, handler in (old or {}).items():
                signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.stage == "loading" or (self.signalled_at is not None and signum == signal.SIGINT):
            raise KeyboardInterrupt
        if self.signalled_at is not None:
            return
        self.signalled_at = time.monotonic()
        self.interrupted_in = self.progress.phase if self.stage == "solving" and self.progress is not None else self.stage
        self.stop.set()
        if self.stage == "solving":
            print(f"solve: {signal.Signals(signum).name} received, stopping with the best answer so far", file=sys.stderr)
        else:  # the answer is being written: finish it (a second Ctrl-C aborts, leaving each file whole or absent)
            print(f"solve: {signal.Signals(signum).name} received while {self.stage}; finishing them", file=sys.stderr)

    def _run(self, argv: Sequence[str] | None) -> int:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
            if args.list_methods:
                self._print(list_methods())
                return 0
            problem, opts = _prepare(args)
        except (UsageError, ProblemError) as exc:
            print(f"solve: error: {_one_line(str(exc))}", file=sys.stderr)
            return 2
        opts.started = self.started
        opts.stop = self.stop
        self.progress = opts.best_so_far
        if args.frontier or args.min_devices:
            self.stage = "solving"
            return _sweep_main(problem, opts, args)
        progress = None if args.quiet else self._line
        if progress:
            progress(f"loaded {problem.name}: {problem.n} nodes, {problem.m} edges, {problem.k} devices "
                     f"({time.monotonic() - self.started:.1f}s)")
        self.stage = "solving"
        result = self._solve(lambda: run(problem, args.method, opts, progress=progress, objective=args.objective),
                             problem, opts, args)
        result.interrupted = self.signalled_at is not None  # reaching the time limit is no interruption
        self.stage = "writing the outputs"
        report = result.report(problem, opts.memory_model)
        if result.interrupted:
            report["interrupted_in"] = self.interrupted_in
        if result.evaluation is not None:
            report["explain"] = json_safe(explain(problem, result.evaluation))  # unlimited capacity is inf
        try:
            if args.report:
                write_report(args.report, report)
            if args.out and result.answered and (result.evaluation is not None or result.split is not None):
                write_placement(args.out, problem, result.evaluation.placement if result.evaluation is not None else result.split)
            if result.evaluation is not None and args.trace:
                write_chrome_trace(args.trace, problem, result.evaluation)
            if result.evaluation is not None and args.gantt:
                write_gantt(args.gantt, problem, result.evaluation)
        except BrokenPipeError:
            self.stdout_gone = True  # e.g. --report /dev/stdout | head: the reader has what it wanted
        except OutputError as exc:
            print(f"solve: error: {_one_line(str(exc))}", file=sys.stderr)
            self._print(summary(problem, result, opts.memory_model))
            return 2
        self.stage = "printing"
        self._print(summary(problem, result, opts.memory_model))
        if args.explain and result.evaluation is not None:
            self._print(explain_text(problem, result.evaluation))
        return 0 if result.answered else 1

    def _line(self, msg: str) -> None:
        """A progress line on stderr, stamped with the time of day."""
        self.last_line = time.monotonic()
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    def _keepalive(self, now: float) -> None:
        """A line naming the phase, the best answer published and the bound, whenever nothing was
        said for KEEPALIVE_SECONDS: `auto`'s heartbeat speaks every 7 s within its phases, this
        covers the rest (the bounds, methods without a heartbeat)."""
        if self.last_line is None or now - self.last_line < KEEPALIVE_SECONDS or self.progress is None:
            return
        answer, bound = self.progress.get()
        value = None if answer is None else answer[1].objective
        self._line(f"{self.progress.phase}: incumbent={'-' if value is None else f'{value:.6g}'} "
                   f"bound={'-' if bound is None else f'{bound:.6g}'} elapsed={now - self.started:.1f}s")

    def _print(self, text: str) -> None:
        """Print to stdout; a reader that went away (``solve ... | head``) is not an error."""
        if self.stdout_gone:
            return
        try:
            print(text, flush=True)
        except BrokenPipeError:
            self.stdout_gone = True
            devnull = os.open(os.devnull, os.O_WRONLY)  # so the interpreter's final flush fails no more
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)

    def _solve(self, job: Callable[[], RunResult], problem: Problem, opts: SolveOptions, args: argparse.Namespace) -> RunResult:
        """Run ``job`` in a worker thread while the main thread waits in short steps (Python runs
        signal handlers only in the main thread, so a main thread blocked in a native solve would
        not see Ctrl-C) and watches the clock."""
        limit = float(args.time_limit)
        # The run plans to end when the finish reserve begins; past that it is asked to stop, and
        # STOP_GRACE later it is abandoned: the reserve pays for the report either way.
        soft = self.started + limit - finish_reserve(problem, limit)
        thread, box = worker(job, "solve")
        while thread.is_alive():
            thread.join(0.05)
            now = time.monotonic()
            self._keepalive(now)
            if now >= soft and self.limit_at is None:
                self.limit_at = now
                self.stop.set()
            since = min(t for t in (self.signalled_at, self.limit_at, math.inf) if t is not None)
            if thread.is_alive() and now - since > STOP_GRACE:
                self.abandoned = True
                if unwind(thread):  # so that it stops taking the interpreter lock from the report below
                    thread.join(UNWIND_WAIT)
                why = "interrupted" if self.signalled_at is not None else f"the time limit of {limit:g} s"
                return interrupted_result(problem, opts, args.method, f"{why}: the run did not stop within {STOP_GRACE} s; "
                                          "reporting the best answer verified so far", args.objective)
        if "error" in box:
            raise box["error"]
        return box["result"]


def _one_line(text: str) -> str:
    return " ".join(text.split("\n")) if "\n" in text else text


def run_as_program() -> NoReturn:
    """Run ``solve`` as the program and end the process with its status. The time limit counts
    from the process's start. When a solver thread was abandoned (it did not stop in time), the
    process ends without waiting for it (os._exit, after flushing)."""
    command = Command(started=process_started())
    code = command.main(None)
    if command.abandoned or command.signalled_at is not None or code == 130:
        # Stopped: end now, without freeing a big graph object by object (a few tenths of a
        # second at 200K nodes) or waiting for an abandoned solver thread.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    # The outputs are written: a signal from now on would only kill the interpreter's tear-down
    # (which restores the default handlers) and turn the answer's exit status into a signal's.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    sys.exit(code)


if __name__ == "__main__":
    run_as_program()
