"""Repeated blocks (placement/repeats.py) and the echo sweep (solvers/echo_sweep.py): a fix found in
one block, tried in its copies, kept only when the evaluator finds the schedule shorter."""
from __future__ import annotations

import math

import numpy as np

from placement.evaluator import check, evaluate
from placement.generate import generate
from placement.problem import make_problem
from placement.repeats import class_members, images, repeat_classes, repeats
from placement.solution import SolveOptions
from solvers.echo_sweep import EchoStats, EchoSweep, changed_nodes, device_map, patterns
from solvers.pipeline import Incumbent, _echo_phase, searched
from solvers.run import run, verify

BLOCKS = 12


def chain_of_blocks(blocks: int = BLOCKS, devices: int = 2, pinned: tuple[str, ...] = ()):
    """Blocks f -> (m, s) -> j in a chain, every edge 0.5 of transfer. On one device a block takes
    1 + 2 + 2 + 1 = 6; with s alone on another device 1 + max(2, 0.5 + 2 + 0.5) + 1 = 5. No block
    takes less than 4.5: f, a branch and j run one after another, and unless both branches share
    a device (6), one of them is not on f's device or not on j's (0.5). ``pinned``: nodes allowed
    on device 0 only."""
    nodes, edges = [], []
    for i in range(blocks):
        nodes += [{"id": f"f{i}", "time": 1.0, "out_bytes": 8, "param_bytes": 0},
                  {"id": f"m{i}", "time": 2.0, "out_bytes": 4, "param_bytes": 0},
                  {"id": f"s{i}", "time": 2.0, "out_bytes": 2, "param_bytes": 0},
                  {"id": f"j{i}", "time": 1.0, "out_bytes": 8, "param_bytes": 0}]
        edges += [{"src": f"f{i}", "dst": f"m{i}", "comm": 0.5}, {"src": f"f{i}", "dst": f"s{i}", "comm": 0.5},
                  {"src": f"m{i}", "dst": f"j{i}", "comm": 0.5}, {"src": f"s{i}", "dst": f"j{i}", "comm": 0.5}]
        if i:
            edges.append({"src": f"j{i - 1}", "dst": f"f{i}", "comm": 0.5})
    for rec in nodes:
        if rec["id"] in pinned:
            rec["devices"] = [0]
    return make_problem(nodes, edges, devices=devices, memory=math.inf, name="blocks")


def _ordered(prob, placement):
    """The evaluator's schedule of ``placement`` running each device's nodes in id-list order
    (f, m, s, j block by block)."""
    order = [[v for v in range(prob.n) if placement[v] == d] for d in range(prob.k)]
    return evaluate(prob, placement, order=order)


def _one_fix(prob):
    """Schedules of the chain before and after a fix in block 5: all on device 0, then s5 on device 1."""
    pl = np.zeros(prob.n, dtype=np.int64)
    fixed = pl.copy()
    fixed[prob.index["s5"]] = 1
    return _ordered(prob, pl), _ordered(prob, fixed)


def _side_moved(prob, placement) -> int:
    """Blocks whose s runs on another device than its m."""
    idx = prob.index
    return sum(int(placement[idx[f"s{i}"]] != placement[idx[f"m{i}"]]) for i in range(prob.n // 4))


def test_copies_of_a_block_share_colours_and_distinct_parts_do_not():
    prob = chain_of_blocks()
    col = repeat_classes(prob)
    idx = prob.index
    middle = range(3, BLOCKS - 3)  # the colours of blocks near the ends split off, a node per round
    for part in "fmsj":
        assert len({int(col[idx[f"{part}{i}"]]) for i in middle}) == 1
    assert len({int(col[idx[f"{part}5"]]) for part in "fmsj"}) == 4
    ptr, members = class_members(col, prob.topo_rank)
    c = int(col[idx["s5"]])
    got = members[ptr[c]:ptr[c + 1]].tolist()
    assert got == sorted(got, key=lambda v: prob.topo_rank[v]) and idx["s5"] in got


def test_images_map_a_region_onto_its_copy_edge_by_edge():
    prob = chain_of_blocks()
    col = repeat_classes(prob)
    idx = prob.index
    region = {idx[n] for n in ("f4", "m4", "s4", "j4")}
    img = images(prob, col, region, idx["s4"], idx["s7"])
    assert img is not None
    assert {prob.ids[a]: prob.ids[b] for a, b in img.items()} == {"f4": "f7", "m4": "m7", "s4": "s7", "j4": "j7"}
    assert images(prob, col, region, idx["s4"], idx["m7"]) is None  # another colour
    assert images(prob, col, region | {idx["f5"]}, idx["s4"], idx[f"s{BLOCKS - 1}"]) is None  # no next block there


def test_device_map_agrees_with_the_most_pairs_and_is_one_to_one():
    assert device_map(3, [(0, 2), (0, 2), (0, 1), (1, 0)]).tolist() == [2, 0, 1]
    assert device_map(2, []).tolist() == [0, 1]
    assert sorted(device_map(4, [(0, 3), (1, 3), (2, 3)]).tolist()) == [0, 1, 2, 3]


def test_a_fix_in_one_block_is_one_pattern():
    prob = chain_of_blocks()
    before, after = _one_fix(prob)
    assert after.makespan == before.makespan - 1.0
    changed = {prob.ids[v] for v in changed_nodes(prob, before, after, prob.topo_rank)}
    assert changed == {"s5", "j5"}  # s5 left device 0, and j5 now follows m5 there
    pats = patterns(prob, before, after, prob.topo_rank)
    assert len(pats) == 1
    assert {prob.ids[v] for v in pats[0].region} == {"f5", "m5", "s5", "j5", "f6"}


def test_the_echo_puts_the_fix_into_the_copies_and_the_evaluator_agrees():
    prob = chain_of_blocks()
    before, after = _one_fix(prob)
    sweep = EchoSweep(prob, after.placement, after.start, SolveOptions())
    assert sweep.learn(before, after) == 1
    got = sweep.run(math.inf)
    moved = _side_moved(prob, got.placement)
    assert moved >= BLOCKS // 2  # every middle copy at least
    assert got.makespan == 6.0 * BLOCKS - moved  # each block with s away takes 5 instead of 6
    again = check(prob, got.placement, got.start, "static")
    assert again.makespan == got.makespan
    assert sweep.stats.kept >= 1 and sweep.stats.copies == moved - 1


def _echoed(prob):
    before, after = _one_fix(prob)
    sweep = EchoSweep(prob, after.placement, after.start, SolveOptions())
    sweep.learn(before, after)
    return sweep.run(math.inf), sweep.stats


def test_a_copy_whose_node_may_not_move_keeps_its_block_and_the_others_move():
    free, _ = _echoed(chain_of_blocks())
    prob = chain_of_blocks(pinned=("s7",))
    got, stats = _echoed(prob)
    assert got.placement[prob.index["s7"]] == 0  # its allowed device
    moved = _side_moved(prob, got.placement)
    assert moved == _side_moved(prob, free.placement) - 1  # every other copy still moved
    assert stats.kept == 1  # in the first try: the pinned copy left out, not the whole group failed
    assert got.makespan == 6.0 * BLOCKS - moved
    assert check(prob, got.placement, got.start, "static").makespan == got.makespan


def test_an_echo_that_does_not_pay_is_not_kept():
    prob = chain_of_blocks()
    idx = prob.index
    good = np.zeros(prob.n, dtype=np.int64)
    good[[idx[f"s{i}"] for i in range(BLOCKS)]] = 1  # s away in every block: 5 a block
    before = _ordered(prob, good)
    worse = good.copy()
    worse[idx["s5"]] = 0  # a "fix" that costs 1: echoing it everywhere would cost 1 a block
    after = _ordered(prob, worse)
    sweep = EchoSweep(prob, after.placement, after.start, SolveOptions())
    sweep.learn(before, after)
    got = sweep.run(math.inf)
    assert got.makespan == after.makespan and sweep.stats.kept == 0 and sweep.stats.tried >= 1
    assert all(got.placement[idx[f"s{i}"]] == 1 for i in range(BLOCKS) if i != 5)  # reached no other block


def test_generated_graphs_have_no_repeats_and_the_chain_has():
    prob = generate("cnn", 300, seed=2, devices=2).with_devices(2, math.inf)  # random times: no two blocks alike
    assert not repeats(repeat_classes(prob))
    assert repeats(repeat_classes(chain_of_blocks()))


def test_the_pipeline_hands_the_echo_to_the_incumbent():
    """The glue in solvers/pipeline.py: after a slice's fix, ``_echo_phase`` makes the sweep (the
    graph repeats), echoes the fix, and the incumbent takes the result, checked by its verifier."""
    prob = chain_of_blocks()
    before, after = _one_fix(prob)
    inc = Incumbent(prob, "static", verify)
    inc.offer(searched("refine", prob, after.placement, after, None))
    stats = EchoStats()
    sweep, (seconds, gain) = _echo_phase(prob, SolveOptions(), inc, None, stats, before, None, math.inf)
    assert sweep is not None and stats.kept >= 1
    moved = _side_moved(prob, inc.best[1].placement)
    assert inc.makespan == 6.0 * BLOCKS - moved < after.makespan
    assert gain == (after.makespan - inc.makespan) / after.makespan
    plain = generate("cnn", 200, seed=1, devices=2).with_devices(2, math.inf)
    inc = Incumbent(plain, "static", verify)
    ev = evaluate(plain, np.zeros(plain.n, dtype=np.int64))
    inc.offer(searched("refine", plain, ev.placement, ev, None))
    assert _echo_phase(plain, SolveOptions(), inc, None, EchoStats(), ev, None, math.inf)[0] is None  # no repeats


def test_auto_on_repeated_blocks_answers_what_the_evaluator_measures():
    prob = chain_of_blocks(blocks=40, devices=2)
    for echo in (True, False):
        res = run(prob, "auto", SolveOptions(time_limit=6, workers=2, extra={"exact_max_nodes": 20, "echo": echo}))
        ev = check(prob, res.evaluation.placement, res.evaluation.start, "static")
        assert ev.makespan == res.evaluation.makespan
        assert ev.makespan >= 4.5 * 40 - 1e-9  # chain_of_blocks' docstring
        if not echo:
            assert all(p.get("name") != "echo" for p in res.history)
