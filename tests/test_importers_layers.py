"""The layer-level PyTorch importer (placement/importers/layers.py): a hand-checked MLP (layers,
edges, sizes, roofline times worked out from the formulas) and the training graph the PipeDream
reader builds from it; the shipped layer graphs parse. Needs the torch extra."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from placement.importers.devicespec import SPECS  # noqa: E402
from placement.importers.layers import graph_from_layers, layer_profile  # noqa: E402
from placement.importers.pipedream import parse_profile, read_pipedream  # noqa: E402

B, I, H, O = 512, 1024, 2048, 4  # batch, input, hidden, output: fc1 is compute-bound


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(I, H)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(H, O)

    def forward(self, x):
        h = self.fc1(x)
        return self.fc2(self.act(h)) + h.sum()


def test_mlp_layers_sizes_and_roofline_times():
    layers, edges = parse_profile(layer_profile(MLP(), torch.zeros(B, I)))
    descs = [rec["desc"] for rec in layers.values()]
    assert descs == ["Input", "Linear(fc1)", "ReLU(act)", "Linear(fc2)", "sum", "add"]  # the trace's order
    ids = list(layers)
    assert sorted(edges) == sorted([(ids[0], ids[1]), (ids[1], ids[2]), (ids[2], ids[3]), (ids[1], ids[4]),
                                    (ids[3], ids[5]), (ids[4], ids[5])])
    fc1 = layers[ids[1]]
    assert fc1["activation_size"] == B * H * 4 and fc1["parameter_size"] == (I * H + H) * 4
    assert layers[ids[4]]["activation_size"] == 4  # a float32 scalar
    spec = SPECS["h100"]
    flops = 2 * B * I * H  # one multiply-add per weight per row
    moved = (B * I + B * H + I * H + H) * 4
    want = 1e3 * (max(flops / spec.matmul_flops["float32"], moved / spec.mem_bandwidth) + spec.op_overhead)
    assert fc1["forward_compute_time"] == pytest.approx(want, abs=5e-7)  # written to the nanosecond
    # backward: the input gradient and the weight gradient, twice the forward matmul work
    want_b = 1e3 * (max(2 * flops / spec.matmul_flops["float32"], 2 * moved / spec.mem_bandwidth) + spec.op_overhead)
    assert fc1["backward_compute_time"] == pytest.approx(want_b, abs=5e-7)
    relu = layers[ids[2]]
    want_r = 1e3 * (max(B * H / spec.vector_flops, 2 * B * H * 4 / spec.mem_bandwidth) + spec.op_overhead)
    assert relu["forward_compute_time"] == pytest.approx(want_r, abs=5e-7) and relu["parameter_size"] == 0


def test_mlp_training_graph():
    p = graph_from_layers(MLP(), torch.zeros(B, I))
    names = [n.split(" ")[0] for n in p.names]
    assert p.n == 6 + 5  # every layer but the input has a backward node
    fc1 = names.index("node2")
    back = [i for i, n in enumerate(p.names) if n == "node2 backward"][0]
    assert p.colocate[fc1] == p.colocate[back]
    assert p.param_bytes[fc1] == 4 * (I * H + H) * 4  # weights, gradients, Adam's two states
    assert p.param_bytes[back] == 0
    assert np.all(p.time >= 0)


def test_shipped_layer_graphs_parse():
    folder = Path(__file__).resolve().parent.parent / "data" / "layer_graphs"
    found = {f.stem: read_pipedream(f).n for f in sorted(folder.glob("*.txt"))}
    assert found["resnet18"] == 139 and found["vgg16"] == 79
    assert all(40 <= n <= 600 for n in found.values())


FACTORY_MODULE = """
from __future__ import annotations
from dataclasses import dataclass
import torch

@dataclass
class Config:
    width: int = 8

def make():
    c = Config()
    model = torch.nn.Sequential(torch.nn.Linear(c.width, c.width), torch.nn.ReLU(), torch.nn.Linear(c.width, 2))
    return model, (torch.randn(4, c.width),)
"""


def test_command_writes_the_profile_or_one_line_and_nothing(tmp_path, capsys, monkeypatch):
    """`python -m placement.importers.layers MODULE:FACTORY`: a missing output directory is refused
    before any work (one line, exit 2); otherwise the graph.txt is written whole and parses as
    PipeDream's. The factory's module defines a dataclass with postponed annotations, which needs
    the module registered while it runs."""
    from placement.importers.layers import main

    src = tmp_path / "src"
    src.mkdir()
    (src / "layers_cli_factory.py").write_text(FACTORY_MODULE)
    monkeypatch.syspath_prepend(str(src))
    assert main(["layers_cli_factory:make", "-o", str(tmp_path / "missing" / "g.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"placement.importers.layers: error: -o: directory {str(tmp_path / 'missing')!r} does not exist"]
    out = tmp_path / "out" / "g.txt"
    out.parent.mkdir()
    assert main(["layers_cli_factory:make", "-o", str(out)]) == 0
    assert [p.name for p in out.parent.iterdir()] == ["g.txt"]  # no temporary file left beside it
    assert read_pipedream(out).n > 0
