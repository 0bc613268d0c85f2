"""The pre-activation ResNets of tests/torch_models.py have the published depth and size (He et al.
2016, Table 2: ResNet-164 1.7M parameters, ResNet-1001 10.2M), so the real-graph benchmark is the
network it names."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.torch_models import PreActResNet  # noqa: E402


def depth_and_params(blocks: int) -> tuple[int, float]:
    model = PreActResNet(blocks)
    # weighted layers as the paper counts them: convolutions on the main path and the classifier
    layers = sum(1 for name, mod in model.named_modules()
                 if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)) and not name.endswith("short"))
    return layers, sum(p.numel() for p in model.parameters()) / 1e6


def test_resnet164():
    layers, millions = depth_and_params(18)
    assert layers == 164
    assert millions == pytest.approx(1.7, rel=0.02)


@pytest.mark.slow
def test_resnet1001():
    layers, millions = depth_and_params(111)
    assert layers == 1001
    assert millions == pytest.approx(10.2, rel=0.02)
