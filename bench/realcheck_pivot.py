"""Session 17 finding: on imported training steps the loss is not a pivot (a node comparable with
every other), so the pivot-based peak methods (band-split, band-repair, the pivot live-cut bound)
refuse them. This lists the nodes incomparable with the loss, by op; ``--pivotize OUT`` writes a
copy with zero-byte ordering edges that make the loss a pivot (an experiment, not a fix: dead
outputs and saved-output holders before the loss, everything else after it).

    python bench/realcheck_pivot.py GRAPH.json [--pivotize OUT.json]
"""
from __future__ import annotations

import argparse
import collections
import json


def _reach(start: str, nbrs: dict[str, list[str]]) -> set[str]:
    """Every node reachable from ``start`` along ``nbrs`` (start included)."""
    seen, stack = {start}, [start]
    while stack:
        for v in nbrs[stack.pop()]:
            if v not in seen:
                seen.add(v)
                stack.append(v)
    return seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graph")
    ap.add_argument("--pivotize", metavar="OUT")
    a = ap.parse_args()
    g = json.load(open(a.graph))
    succ: dict[str, list[str]] = collections.defaultdict(list)
    pred: dict[str, list[str]] = collections.defaultdict(list)
    for e in g["edges"]:
        succ[e["src"]].append(e["dst"])
        pred[e["dst"]].append(e["src"])
    ops = {n["id"]: n.get("op") for n in g["nodes"]}
    loss = next(i for i, o in ops.items() if o == "aten.nll_loss_forward")
    before, after = _reach(loss, pred), _reach(loss, succ)
    loose = [i for i in ops if i not in before and i not in after]
    print(f"{a.graph}: loss {loss}; {len(loose)} of {len(ops)} nodes incomparable with it:",
          collections.Counter(ops[i] for i in loose).most_common(8))
    if a.pivotize:
        for i in loose:
            first = ops[i] == "saved" or not succ[i]
            g["edges"].append({"src": i, "dst": loss, "bytes": 0} if first else {"src": loss, "dst": i, "bytes": 0})
        json.dump(g, open(a.pivotize, "w"))


if __name__ == "__main__":
    main()
