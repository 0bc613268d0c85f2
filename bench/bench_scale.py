"""Scale benchmarks of issue 16: refine's moves per second, and ``solve`` against the best heuristic.

Why: on 10K-200K-node graphs one full evaluation costs 10-100 ms, so local search tried a few
moves per second; placement/incremental.py re-times only the cone a move affects. This measures
both sides on the same graphs and starts, and (``solve``) the whole CLI against its warm start.

    python3 bench/bench_scale.py moves GRAPH.json [...] [--seconds 20 | --evals N] [--memory-model static]
            [--modes fifo,full,incremental] [--baseline DIR] [--kinds] [--batch-patience none|N]
        refine from ETF's placement for --seconds each: FIFO judged (full evaluations), ordered
        judged with full evaluations, ordered judged incrementally; moves/s, accepted moves,
        makespan reached. One process, one graph at a time: run it under
        `flock /tmp/bench.lock` and note `uptime`. --baseline DIR: the same rows first with the
        project imported from DIR (e.g. `git archive main | tar -x -C DIR`), in a subprocess.
        --kinds: a second row per run, moves tried per CPU second by kind (single unit, swap,
        block or run, batch) and the CPU seconds of the rest of the loop (candidates, kicks).
        --evals N: N evaluations each instead of --seconds (the same path on both trees; compare CPU
        seconds; "answer" fingerprints the placement and start times reached).
    python3 bench/bench_scale.py retime GRAPH.json [...] [--count 400] [--baseline DIR]
        the evaluator alone: single-node moves of critical nodes judged in full and incrementally.
    python3 bench/bench_scale.py kernels GRAPH.json [...] [--count 5]
        per call, each compiled kernel (placement/kernels.py) against its Python loop (best of --count).
    python3 bench/bench_scale.py kernel-load x
        whole processes: numba's first compile of the kernels, then their load from the disk cache.
    python3 bench/bench_scale.py ab GRAPH.json [...] [--time-limit 120] [--variants lns,coarse]
        ``auto`` in-process with each exact phase for big graphs (LNS windows or the coarse solve).
    python3 bench/bench_scale.py solve GRAPH.json [...] [--time-limit 120] [--memory-model static] [--memory 4GB] [--keep DIR] [--baseline DIR]
        `python -m solvers.cli GRAPH --time-limit T --report R --quiet` as a whole process: wall
        seconds, makespan, certified gap, the warm start's best member and its makespan.
    python3 bench/bench_scale.py members GRAPH.json [...] [--time-limit 600] [--memory-model peak] [--keep DIR] [--only m1,m2]
        untimed screen: every portfolio member alone (heuristics/portfolio.py's order for the
        problem) with the time limit a user would give it, judged by the evaluator; the valid lower
        bound; whether the best member leaves ROOM below it for the goal; each member's seconds
        against the budget auto's warm start gets at that limit. --keep DIR: one JSON line per graph.

Prints markdown table rows with the load average.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# BENCH_TREE: import the project from another checkout (the baseline of --baseline; e.g. a
# `git archive main` extracted somewhere), this script's own tree otherwise.
TREE = Path(os.environ.get("BENCH_TREE") or ROOT)
sys.path.insert(0, str(TREE))

from heuristics.list_scheduling import etf  # noqa: E402
from placement.evaluator import evaluate  # noqa: E402
from placement.formats import load_problem  # noqa: E402
from placement.solution import SolveOptions  # noqa: E402
from solvers.refine import RefineStats, refine  # noqa: E402


def load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


MOVES_MODES = {"fifo": ("fifo, full", False, False), "full": ("ordered, full", True, False),
               "incremental": ("ordered, incremental", True, True)}


MOVE_KINDS = ("single", "swap", "block/run", "batch")


def _kind(units: list[int], devs: list[int], reorder: bool) -> str:
    """refine's move kinds: one unit (a node or its colocation group), a swap of two units, a
    block or run of several units to one device, the batch move (spread_runs)."""
    if reorder:
        return "batch"
    if len(units) == 2 and devs[0] != devs[1]:
        return "swap"
    return "single" if len(units) == 1 else "block/run"


def _timing_moves(search_cls) -> dict[str, list[float]]:
    """Wrap ``_Search._try`` (main's and this tree's have the same signature) to count and time
    every move by kind: {kind: [tried, accepted, cpu seconds, wall seconds]}; the rest of the
    loop (candidates, kicks, start) is what the kinds leave of the total."""
    kinds: dict[str, list[float]] = {k: [0, 0, 0.0, 0.0] for k in MOVE_KINDS}
    original = search_cls._try

    def timed(self, units, devs, reorder=False):
        c, t = time.process_time(), time.perf_counter()
        ok = original(self, units, devs, reorder)
        row = kinds[_kind(units, devs, reorder)]
        row[0] += 1
        row[1] += bool(ok)
        row[2] += time.process_time() - c
        row[3] += time.perf_counter() - t
        return ok

    search_cls._try = timed
    return kinds


def _load_kernels() -> None:
    """Load the compiled kernels now (when this tree has them and numba is installed), so that no
    timed run shares its first seconds with their background loading."""
    try:
        from placement import kernels
    except ImportError:  # a tree from before session 11
        return
    kernels.load()


def moves(paths: list[str], seconds: float, memory_model: str, modes: list[str], label: str, header: bool = True,
          kinds_table: bool = False, evals: int | None = None, batch_patience: str | None = None) -> None:
    """Refine from ETF for ``seconds`` each or, with ``evals``, for that many evaluations (no
    deadline: the same path on any tree that keeps refine's path, compared by CPU seconds; the
    last column fingerprints the answer's placement and start times). ``batch_patience``: "none"
    or a number, refine's BATCH_PATIENCE for this tree's rows (session 13; "none" is the path
    from before it)."""
    import solvers.refine as refine_mod

    if batch_patience is not None:
        refine_mod.BATCH_PATIENCE = None if batch_patience == "none" else int(batch_patience)
        label = f"{label} (batch patience {batch_patience})"
    _load_kernels()
    kinds = _timing_moves(refine_mod._Search) if kinds_table else None
    if header:
        print("| graph | n | K | code | mode | moves | moves/s | accepted | start -> end makespan | cpu s | moves per cpu s "
              "| answer | load |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        prob = load_problem(path)
        pl = np.asarray(etf(prob, SolveOptions(memory_model=memory_model)).placement)
        fifo = evaluate(prob, pl, memory_model=memory_model)
        for mode, keep, inc in (MOVES_MODES[m] for m in modes):
            stats = RefineStats()
            if kinds:
                for row in kinds.values():
                    row[:] = [0, 0, 0.0, 0.0]
            t, c = time.monotonic(), time.process_time()
            got, ev = refine(prob, pl, SolveOptions(seed=0), deadline=t + (1e6 if evals else seconds),
                             memory_model=memory_model, keep_order=keep, start=fifo.start if keep else None, stats=stats,
                             incremental=inc, max_evals=evals)
            took, cpu = time.monotonic() - t, time.process_time() - c
            answer = hashlib.sha1(np.asarray(got, dtype=np.int64).tobytes() + ev.start.tobytes()).hexdigest()[:8]
            print(f"| {Path(path).stem} | {prob.n} | {prob.k} | {label} | {mode} | {stats.evaluations} | "
                  f"{stats.evaluations / took:.0f} | {stats.accepted} | {stats.start_makespan:.6g} -> {ev.makespan:.9g} "
                  f"| {cpu:.1f} | {stats.evaluations / max(cpu, 1e-9):.0f} | {answer} | {load()} |", flush=True)
            if kinds:
                rest = [took - sum(r[3] for r in kinds.values()), cpu - sum(r[2] for r in kinds.values())]
                print(f"|  | by kind ({label}): tried / accepted / cpu s / tried per cpu s | " + " | ".join(
                    f"{k} {r[0]:.0f} / {r[1]:.0f} / {r[2]:.2f} / {r[0] / max(r[2], 1e-9):.0f}" for k, r in kinds.items())
                      + f" | rest {rest[1]:.2f} cpu s (wall {rest[0]:.1f}) | | | |", flush=True)


def retime(paths: list[str], count: int, memory_model: str, label: str, header: bool = True) -> None:
    """The evaluator alone: ``count`` single-unit moves (a node of the critical path, with its
    colocation group, to a random other device) judged by a full ordered evaluation and by
    IncrementalSchedule.try_move with the incumbent's makespan as cutoff (what refine asks), from
    ETF's placement and FIFO schedule. Moves that improve need their whole new schedule (refine
    accepts them); the others only a proof that they do not: both are timed apart."""
    from placement.incremental import IncrementalSchedule, device_order

    _load_kernels()
    if header:
        print("| graph | n | K | code | full ordered evaluations/s | incremental, cutoff: moves per cpu s | improving moves | "
              "rejected moves per cpu s | cpu ms per improving move | mean cone of a rejected move | no cutoff: moves/s | load |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        prob = load_problem(path)
        pl = np.asarray(etf(prob, SolveOptions(memory_model=memory_model)).placement)
        ref = evaluate(prob, pl, memory_model=memory_model).start
        inc = IncrementalSchedule(prob, pl, ref)
        eps = 1e-9 * inc.makespan
        crit = np.flatnonzero(inc.start + prob.time + inc.tail >= inc.makespan - eps)
        rng = np.random.default_rng(0)
        moves = []
        for v in rng.choice(crit, size=count).tolist():
            d = int(rng.integers(prob.k - 1))
            d += d >= pl[v]
            group = prob.groups[prob.colocate[v]] if prob.colocate[v] >= 0 else [v]  # colocated nodes move together
            moves.append({int(x): d for x in group})
        t = time.monotonic()
        full = max(3, count // 20)
        for mv in moves[:full]:
            new = pl.copy()
            for v, d in mv.items():
                new[v] = d
            evaluate(prob, new, order=device_order(prob, new, ref), memory_model=memory_model)
        full_rate = full / (time.monotonic() - t)
        cutoff = inc.makespan - eps
        inc.try_move(moves[0], cutoff=cutoff)  # untimed: a first trial with a cutoff may build what the bound needs
        t = time.monotonic()
        better = [inc.try_move(mv).makespan < cutoff for mv in moves]  # the whole new schedule: improving or not
        plain_rate = len(moves) / (time.monotonic() - t)
        spent = [0.0, 0.0]  # CPU seconds on rejected, improving moves
        cone = 0
        for mv, good in zip(moves, better):
            t = time.process_time()
            trial = inc.try_move(mv, cutoff=cutoff)
            spent[good] += time.process_time() - t
            if not good:
                cone += trial.recomputed
        bad = len(moves) - sum(better)
        print(f"| {Path(path).stem} | {prob.n} | {prob.k} | {label} | {full_rate:.1f} | {len(moves) / sum(spent):.0f} | "
              f"{sum(better)} of {len(moves)} | {bad / max(spent[0], 1e-12):.0f} | "
              f"{1000 * spent[1] / max(1, sum(better)):.1f} | {cone / max(1, bad):.0f} | {plain_rate:.0f} | {load()} |", flush=True)


def solve(paths: list[str], time_limit: float, memory_model: str, label: str, header: bool = True,
          memory: str | None = None, keep: str | None = None) -> None:
    """Each graph as a whole `solve` process; ``keep``: a directory to copy each JSON report to."""
    if header:
        print("| graph | n | K | code | model | limit s | wall s | auto makespan | bound (which) | gap | best heuristic (member) | vs it | phases | load |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "r.json"
            t = time.monotonic()
            subprocess.run([sys.executable, "-m", "solvers.cli", path, "--time-limit", str(time_limit), "--report",
                            str(report), "--memory-model", memory_model, "--quiet"] + (["--memory", memory] if memory else []),
                           cwd=TREE, check=True, stdout=subprocess.DEVNULL)
            wall = time.monotonic() - t
            rep = json.loads(report.read_text())
            if keep:
                Path(keep).mkdir(parents=True, exist_ok=True)
                tag = f"{Path(path).stem}_{memory_model}{'_' + memory if memory else ''}_{time_limit:g}s_{label.replace(' ', '-')}.json"
                (Path(keep) / tag).write_text(report.read_text())
        hist = rep.get("phases", [])
        warm = next((h for h in hist if h.get("name") == "warm-start"), {})
        wm = warm.get("makespan")
        mk, lb = rep["makespan"], rep["lower_bound"]
        vs = f"{100 * (mk - wm) / wm:+.2f}%" if wm else "-"
        bounds = rep.get("bounds", {})
        which = max((k for k in bounds if k != "best"), key=lambda k: bounds[k], default="-")
        if lb > bounds.get("best", 0.0) * (1 + 1e-9):
            which = "exact phase"
        steps = " / ".join(f"{h.get('name', h.get('method'))} {h.get('seconds', 0):.0f}s" for h in hist)
        print(f"| {Path(path).stem} | {rep['problem']['nodes']} | {rep['problem']['devices']} | {label} | {memory_model} | {time_limit:g} | "
              f"{wall:.1f} | {mk:.6g} | {lb:.6g} ({which}) | {100 * (mk - lb) / mk:.2f}% | {wm if wm is None else f'{wm:.6g}'} "
              f"({warm.get('note', '-')}) | {vs} | {steps} | {load()} |", flush=True)


# Issue 16: "5% below the best single heuristic on every graph where the certified gap leaves 5% of room".
ROOM = 0.05


def members(paths: list[str], time_limit: float, memory_model: str, keep: str | None = None,
            only: list[str] | None = None) -> None:
    """Each portfolio member alone on each graph, with ``time_limit`` as ``solve --method NAME``
    would give it (less the finish reserve); members whose estimated time exceeds the limit are
    skipped, as the portfolio would. Prints one row per member and one summary row per graph:
    the best single heuristic, the valid lower bound (placement/bounds.py, the one a report
    starts from), and whether (best - bound) / best leaves ROOM. ``warm s`` is the warm-start
    budget auto gives the whole portfolio at this limit: a member slower than it is one auto's
    warm start does not run to the end, though a user running it alone gets its answer. ``only``:
    these members alone (at 200K nodes each takes minutes): the best of them is then an upper
    bound on the best single heuristic, and the room it shows may be more than there is."""
    from heuristics.portfolio import MEMBERS, estimate_seconds, member_order
    from placement.bounds import lower_bounds
    from solvers.pipeline import WARM_SHARE, finish_reserve, warm_seconds
    from solvers.run import verify

    print("| graph | n | K | member | makespan | feasible | seconds | estimate s | note | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        prob = load_problem(path)
        name = Path(path).stem
        t = time.monotonic()
        bound = lower_bounds(prob, memory_model)
        bound_s = time.monotonic() - t
        reserve = finish_reserve(prob, time_limit)
        warm = warm_seconds(prob, time_limit - reserve, WARM_SHARE, memory_model)
        opts = SolveOptions(memory_model=memory_model)
        rows = []
        for member in (m for m in member_order(prob, opts)[0] if only is None or m in only):
            est = estimate_seconds(member, prob.n, prob.m, prob.k, memory_model)
            row = {"member": member, "makespan": None, "feasible": False, "seconds": 0.0, "estimate": est, "note": ""}
            if est > time_limit - reserve:
                row["note"] = "skipped: estimate over the limit"
            else:
                t = time.monotonic()
                try:
                    sol = MEMBERS[member](prob, SolveOptions(memory_model=memory_model, time_limit=time_limit - reserve))
                    row["seconds"] = time.monotonic() - t
                    if sol.placement is not None and sol.status in ("heuristic", "feasible", "optimal"):
                        ev = verify(prob, sol, memory_model)
                        row["makespan"], row["feasible"] = ev.makespan, bool(ev.feasible(prob))
                    row["note"] = (sol.reason or "")[:80]
                except Exception as exc:  # noqa: BLE001 - one broken member must not end the screen
                    row["seconds"], row["note"] = time.monotonic() - t, f"{type(exc).__name__}: {exc}"[:80]
            rows.append(row)
            shown = "-" if row["makespan"] is None else f"{row['makespan']:.6g}"
            print(f"| {name} | {prob.n} | {prob.k} | {member} | {shown} | {'yes' if row['feasible'] else 'no'} | "
                  f"{row['seconds']:.1f} | {est:.1f} | {row['note'].replace('|', '/')} | {load()} |", flush=True)
        fit = [r for r in rows if r["feasible"]]
        best = min(fit, key=lambda r: r["makespan"], default=None)
        in_warm = min((r for r in fit if r["seconds"] <= warm), key=lambda r: r["makespan"], default=None)
        summary = {"graph": name, "n": prob.n, "k": prob.k, "memory_model": memory_model, "time_limit": time_limit,
                   "bound": bound.best, "bounds": bound.as_dict(), "bound_seconds": bound_s, "warm_seconds": warm,
                   "best": best, "best_within_warm": in_warm, "members": rows, "only": only}
        if best is not None:
            room = (best["makespan"] - bound.best) / best["makespan"]
            summary["room"] = room
            print(f"| **{name}** | {prob.n} | {prob.k} | best: {best['member']} | {best['makespan']:.6g} | bound "
                  f"{bound.best:.6g} ({bound_s:.0f} s) | room {100 * room:.2f}% ({'yes' if room >= ROOM else 'no'}) | warm {warm:.0f} s"
                  f" | within it: {in_warm['member'] if in_warm else '-'} {in_warm['makespan'] if in_warm else ''} | {load()} |", flush=True)
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            with open(Path(keep) / "members.jsonl", "a") as out:
                out.write(json.dumps(summary) + "\n")


def kernel_times(paths: list[str], reps: int, label: str, header: bool = True) -> None:
    """Per call, each compiled kernel (placement/kernels.py) against its Python loop, through the
    function that uses it, on the same input (a random placement of colocation groups, its FIFO
    schedule as the reference): best of ``reps`` calls in ms, and whether the results are equal."""
    from placement import kernels
    from placement.bounds import bottom_levels
    from placement.evaluator import _ordered_schedule, _ready_simulation, edge_delay
    from placement.incremental import IncrementalSchedule, device_order, kept_order_start
    from solvers.reschedule import list_schedule_start

    names = ("evaluate (FIFO + memory)", "FIFO simulation", "ordered schedule", "bottom levels", "list schedule",
             "kept-order pass", "incremental tails")
    if header:
        print("| graph | n | code | " + " | ".join(f"{x}: Python / compiled ms" for x in names) + " | equal | load |")
        print("|---|---|---|" + "---|" * len(names) + "---|---|")
    for path in paths:
        prob = load_problem(path)
        pl = np.random.default_rng(0).integers(0, prob.k, size=prob.n)
        for members in prob.groups:
            pl[members] = pl[members[0]]
        delay = edge_delay(prob, pl)
        ref = _ready_simulation(prob, pl, delay)[0]
        order = device_order(prob, pl, ref)
        inc = IncrementalSchedule(prob, pl, ref)
        at = np.lexsort((prob.topo_rank, ref))
        nxt = np.full(prob.n, -1, dtype=np.int64)
        for seq in order:
            nxt[seq[:-1]] = seq[1:]
        prio = bottom_levels(prob, delay)
        calls = (lambda: evaluate(prob, pl).peak_memory, lambda: _ready_simulation(prob, pl, delay)[0],
                 lambda: _ordered_schedule(prob, pl, delay, order)[0], lambda: bottom_levels(prob, delay),
                 lambda: list_schedule_start(prob, pl, prio)[1], lambda: kept_order_start(prob, pl, ref),
                 lambda: (inc._tails(at, nxt), np.asarray(inc._tail))[1])
        cells, same = [], True
        for call in calls:
            got, ms = [], []
            for setting in ("off", "on"):
                os.environ[kernels.MODE_VAR] = setting
                call()  # the first call of a kernel loads it
                best = float("inf")
                for _ in range(reps):
                    t = time.perf_counter()
                    out = call()
                    best = min(best, time.perf_counter() - t)
                got.append(out)
                ms.append(1000 * best)
            same &= bool(np.array_equal(got[0], got[1]))
            cells.append(f"{ms[0]:.1f} / {ms[1]:.2f} ({ms[0] / ms[1]:.0f}x)")
        os.environ.pop(kernels.MODE_VAR)
        print(f"| {Path(path).stem} | {prob.n} | {label} | " + " | ".join(cells) + f" | {same} | {load()} |", flush=True)


def kernel_load() -> None:
    """Whole processes: importing numba and compiling every kernel into an empty cache, then loading
    them from that cache (``python -m placement.kernels``, wall seconds of the process)."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for what in ("first call: compile", "cached: load"):
            t = time.monotonic()
            out = subprocess.run([sys.executable, "-m", "placement.kernels"], cwd=TREE, env=env, check=True,
                                 capture_output=True, text=True).stdout.strip()
            print(f"| {what} | {time.monotonic() - t:.2f} s whole process | {out} | {load()} |", flush=True)
    t = time.monotonic()
    subprocess.run([sys.executable, "-c", "import placement.evaluator"], cwd=TREE, check=True)
    print(f"| no kernels: python -c 'import placement.evaluator' | {time.monotonic() - t:.2f} s whole process | | {load()} |")


def ab(paths: list[str], time_limit: float, memory_model: str, variants: list[str]) -> None:
    """``auto`` in this process with each variant "big_exact[+big_refine][+key=value...]" (e.g. lns,
    coarse, lns+ordered, lns+refine_share=0.5: opts.extra of solvers/pipeline.py), same limit."""
    from solvers.run import run

    print("| graph | n | K | model | limit s | exact phase | warm start | after exact phase | final | bound | gap | phase note | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        prob = load_problem(path)
        for variant in variants:
            exact, *more = variant.split("+")
            extra: dict = {"big_exact": exact}
            for item in more:  # "ordered" (big_refine) or key=value (a number when it parses)
                key, eq, val = item.partition("=")
                if not eq:
                    extra["big_refine"] = key
                else:
                    try:
                        extra[key] = float(val)
                    except ValueError:
                        extra[key] = val
            opts = SolveOptions(memory_model=memory_model, time_limit=time_limit, extra=extra)
            res = run(prob, "auto", opts)
            ph = {h["name"]: h for h in res.history}
            warm = ph.get("warm-start", {})
            ex = ph.get("exact-lns") or ph.get("exact-coarse") or {}
            if "search" in ph:  # big_search="alternate": LNS and refine in turns
                ex = {**ex, "note": f"{ex.get('note', '')}; {ph['search'].get('note', '')}"}
            mk = res.evaluation.makespan if res.evaluation is not None else float("nan")
            print(f"| {Path(path).stem} | {prob.n} | {prob.k} | {memory_model} | {time_limit:g} | {variant} | "
                  f"{warm.get('makespan', float('nan')):.6g} ({warm.get('note', '-')}) | {ex.get('makespan', float('nan')):.6g} | "
                  f"{mk:.6g} | {res.lower_bound:.6g} | {100 * (mk - res.lower_bound) / mk:.2f}% | {ex.get('note', '-')} | {load()} |",
                  flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("moves", "retime", "solve", "members", "ab", "kernels", "kernel-load"))
    ap.add_argument("--count", type=int, default=400)
    ap.add_argument("--variants", default="lns,coarse")
    ap.add_argument("graphs", nargs="+")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--evals", type=int, default=None, help="moves: stop after this many evaluations, not --seconds")
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--memory-model", default="static")
    ap.add_argument("--memory", default=None, help="solve: memory per device passed to the CLI (e.g. 4GB)")
    ap.add_argument("--only", default=None, help="members: these portfolio members only (comma-separated)")
    ap.add_argument("--keep", default=None, metavar="DIR", help="solve: keep each report in DIR")
    ap.add_argument("--kinds", action="store_true", help="moves: also time every move by kind (single, swap, block/run, "
                                                         "batch) and print a row of tried moves per CPU second per kind")
    ap.add_argument("--batch-patience", default=None, help="moves: refine's BATCH_PATIENCE for this tree's rows "
                                                            "(none, or a number; not the baseline's)")
    ap.add_argument("--modes", default="fifo,full,incremental", help="moves: which of " + ",".join(MOVES_MODES))
    ap.add_argument("--baseline", help="retime/moves/solve: also run the same rows with the project imported from this "
                                       "directory (e.g. main extracted by `git archive main | tar -x -C DIR`), "
                                       "graph by graph before this tree's rows")
    ap.add_argument("--label", default="this branch", help=argparse.SUPPRESS)
    ap.add_argument("--no-header", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.what in ("moves", "retime", "solve"):
        header = not args.no_header
        for graph in args.graphs:
            if args.baseline:
                sys.stdout.flush()
                cmd = [sys.executable, __file__, args.what, graph, "--count", str(args.count), "--seconds",
                       str(args.seconds), "--memory-model", args.memory_model, "--modes", args.modes,
                       "--time-limit", str(args.time_limit), "--label", "main"] + ([] if header else ["--no-header"])
                cmd += ["--memory", args.memory] if args.memory else []
                cmd += ["--kinds"] if args.kinds else []
                cmd += ["--evals", str(args.evals)] if args.evals else []
                cmd += ["--keep", str(Path(args.keep).resolve())] if args.keep else []  # main's reports too (labelled "main")
                subprocess.run(cmd, check=True, env=dict(os.environ, BENCH_TREE=str(Path(args.baseline).resolve())))
                header = False
            if args.what == "moves":
                moves([graph], args.seconds, args.memory_model, args.modes.split(","), args.label, header, args.kinds,
                      args.evals, args.batch_patience)
            elif args.what == "retime":
                retime([graph], args.count, args.memory_model, args.label, header)
            else:
                solve([graph], args.time_limit, args.memory_model, args.label, header, args.memory, args.keep)
            header = False
    elif args.what == "members":
        members(args.graphs, args.time_limit, args.memory_model, args.keep, args.only.split(",") if args.only else None)
    elif args.what == "kernels":
        kernel_times(args.graphs, args.count, args.label)
    elif args.what == "kernel-load":
        kernel_load()
    elif args.what == "ab":
        ab(args.graphs, args.time_limit, args.memory_model, args.variants.split(","))


if __name__ == "__main__":
    main()
