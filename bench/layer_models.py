"""Public CNN, LSTM and transformer architectures as plain nn.Module code, for layer graphs.

    python bench/layer_models.py OUTDIR [NAME ...]

writes OUTDIR/NAME.txt, a PipeDream-style layer profile (placement/importers/layers.py: one node
per layer, roofline times on an H100 spec, float32 sizes) of each model. The architectures follow
the published papers (ResNet, ResNeXt, SqueezeNet 1.0, VGG-16, MobileNet-v2, Inception-v3, a
NASNet-style cell network, BERT, a GNMT-style LSTM); torchvision is not a dependency, so they are
written out here. Only shapes matter (the profile runs on meta tensors).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import torch
from torch import nn


def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, relu: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if relu:
        layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class Basic(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int, groups: int = 1, base: int = 64) -> None:
        super().__init__()
        self.a = conv_bn(cin, width, 3, stride)
        self.b = conv_bn(width, width, 3, relu=False)
        self.down = conv_bn(cin, width, 1, stride, relu=False) if stride != 1 or cin != width else None
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = self.down(x) if self.down is not None else x
        return self.relu(self.b(self.a(x)) + idt)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int, groups: int = 1, base: int = 64) -> None:
        super().__init__()
        mid = int(width * base / 64) * groups
        out = width * 4
        self.a = conv_bn(cin, mid, 1)
        self.b = conv_bn(mid, mid, 3, stride, groups=groups)
        self.c = conv_bn(mid, out, 1, relu=False)
        self.down = conv_bn(cin, out, 1, stride, relu=False) if stride != 1 or cin != out else None
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = self.down(x) if self.down is not None else x
        return self.relu(self.c(self.b(self.a(x))) + idt)


class ResNet(nn.Module):
    def __init__(self, block: type, depths: list[int], groups: int = 1, base: int = 64, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1))
        blocks: list[nn.Module] = []
        cin = 64
        for i, n in enumerate(depths):
            width = 64 * 2 ** i
            for j in range(n):
                blocks.append(block(cin, width, 2 if (j == 0 and i > 0) else 1, groups, base))
                cin = width * block.expansion
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


class Fire(nn.Module):
    def __init__(self, cin: int, s: int, e: int) -> None:
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(cin, s, 1), nn.ReLU(inplace=True))
        self.e1 = nn.Sequential(nn.Conv2d(s, e, 1), nn.ReLU(inplace=True))
        self.e3 = nn.Sequential(nn.Conv2d(s, e, 3, padding=1), nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.squeeze(x)
        return torch.cat([self.e1(x), self.e3(x)], 1)


class SqueezeNet(nn.Module):
    """SqueezeNet 1.0 (Iandola et al. 2016)."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 96, 7, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(96, 16, 64), Fire(128, 16, 64), Fire(128, 32, 128), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(256, 32, 128), Fire(256, 48, 192), Fire(384, 48, 192), Fire(384, 64, 256), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(512, 64, 256))
        self.head = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(512, classes, 1), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.head(self.features(x)), 1)


class VGG16(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"):
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(cin, int(v), 3, padding=1), nn.ReLU(inplace=True)]
                cin = int(v)
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(512 * 49, 4096), nn.ReLU(True), nn.Dropout(), nn.Linear(4096, 4096),
                                        nn.ReLU(True), nn.Dropout(), nn.Linear(4096, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hid = cin * expand
        layers: list[nn.Module] = [conv_bn(cin, hid, 1)] if expand != 1 else []
        layers += [conv_bn(hid, hid, 3, stride, groups=hid), conv_bn(hid, cout, 1, relu=False)]
        self.body = nn.Sequential(*layers)
        self.res = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.res else self.body(x)


class MobileNetV2(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [conv_bn(3, 32, 3, 2)]
        cin = 32
        for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += [conv_bn(cin, 1280, 1), nn.AdaptiveAvgPool2d(1)]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(1280, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.features(x), 1))


class InceptionA(nn.Module):
    def __init__(self, cin: int, pool: int) -> None:
        super().__init__()
        self.b1 = conv_bn(cin, 64, 1)
        self.b5 = nn.Sequential(conv_bn(cin, 48, 1), conv_bn(48, 64, 5))
        self.b3 = nn.Sequential(conv_bn(cin, 64, 1), conv_bn(64, 96, 3), conv_bn(96, 96, 3))
        self.pool = nn.AvgPool2d(3, 1, 1)
        self.bp = conv_bn(cin, pool, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b5(x), self.b3(x), self.bp(self.pool(x))], 1)


class InceptionB(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.b3 = conv_bn(cin, 384, 3, 2)
        self.bd = nn.Sequential(conv_bn(cin, 64, 1), conv_bn(64, 96, 3), conv_bn(96, 96, 3, 2))
        self.pool = nn.MaxPool2d(3, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b3(x), self.bd(x), self.pool(x)], 1)


class InceptionC(nn.Module):
    """The 17x17 block with factorised 7x7 convolutions (here as 3x3 pairs, same shapes)."""

    def __init__(self, cin: int, c7: int) -> None:
        super().__init__()
        self.b1 = conv_bn(cin, 192, 1)
        self.b7 = nn.Sequential(conv_bn(cin, c7, 1), conv_bn(c7, c7, 3), conv_bn(c7, 192, 3))
        self.bd = nn.Sequential(conv_bn(cin, c7, 1), conv_bn(c7, c7, 3), conv_bn(c7, c7, 3), conv_bn(c7, c7, 3), conv_bn(c7, 192, 3))
        self.pool = nn.AvgPool2d(3, 1, 1)
        self.bp = conv_bn(cin, 192, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b7(x), self.bd(x), self.bp(self.pool(x))], 1)


class InceptionV3(nn.Module):
    """Inception-v3's layout (Szegedy et al. 2016), 299x299 input, without the auxiliary head;
    the reduction-to-8x8 and 8x8 blocks are condensed into one reduction and two A-style blocks."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 32, 3, 2), conv_bn(32, 32, 3), conv_bn(32, 64, 3), nn.MaxPool2d(3, 2),
                                  conv_bn(64, 80, 1), conv_bn(80, 192, 3), nn.MaxPool2d(3, 2))
        self.mixed = nn.Sequential(InceptionA(192, 32), InceptionA(256, 64), InceptionA(288, 64), InceptionB(288),
                                   InceptionC(768, 128), InceptionC(768, 160), InceptionC(768, 160), InceptionC(768, 192),
                                   InceptionB(768), InceptionA(1248, 128), InceptionA(352, 128))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(352, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.mixed(self.stem(x))), 1))


class SepConv(nn.Module):
    def __init__(self, c: int, k: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.ReLU(), nn.Conv2d(c, c, k, 1, k // 2, groups=c, bias=False), nn.Conv2d(c, c, 1, bias=False),
                                  nn.BatchNorm2d(c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class NASCell(nn.Module):
    """A NASNet-A normal cell (Zoph et al. 2018): five pairwise combinations of separable
    convolutions, pooling and identities of the two previous cells' outputs, concatenated."""

    def __init__(self, c_prev: int, c_prev2: int, c: int) -> None:
        super().__init__()
        self.p0 = conv_bn(c_prev2, c, 1)
        self.p1 = conv_bn(c_prev, c, 1)
        self.s5a, self.s3a = SepConv(c, 5), SepConv(c, 3)
        self.s5b, self.s3b = SepConv(c, 5), SepConv(c, 3)
        self.avg1, self.avg2, self.avg3 = nn.AvgPool2d(3, 1, 1), nn.AvgPool2d(3, 1, 1), nn.AvgPool2d(3, 1, 1)
        self.s3c = SepConv(c, 3)

    def forward(self, x: torch.Tensor, prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h0, h1 = self.p0(prev), self.p1(x)
        y0 = self.s5a(h1) + self.s3a(h0)
        y1 = self.s5b(h0) + self.s3b(h0)
        y2 = self.avg1(h1) + h0
        y3 = self.avg2(h0) + self.avg3(h0)
        y4 = self.s3c(h1) + h1
        return torch.cat([h0, y0, y1, y2, y3, y4], 1), x


class NASNetSmall(nn.Module):
    """A NASNet-mobile-like network: stem, then cells at three resolutions (strided 1x1 convs in
    place of the reduction cells)."""

    def __init__(self, cells: int = 2, c: int = 44, classes: int = 1000) -> None:
        super().__init__()
        self.stem = conv_bn(3, 32, 3, 2)
        self.stem2 = conv_bn(32, 6 * c, 3, 2)
        stages: list[nn.Module] = []
        reduce: list[nn.Module] = []
        ch = 6 * c
        for s in range(3):
            w = c * 2 ** s
            stages.append(nn.ModuleList([NASCell(6 * w if i else ch, 6 * w if i else ch, w) for i in range(cells)]))
            reduce.append(conv_bn(6 * w, 6 * 2 * w, 1, 2))
            ch = 12 * w
        self.stages = nn.ModuleList(stages)
        self.reduce = nn.ModuleList(reduce)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(ch, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem2(self.stem(x))
        for cells, red in zip(self.stages, self.reduce):
            prev = x
            for cell in cells:
                x, prev = cell(x, prev)
            x = red(x)
        return self.fc(torch.flatten(self.pool(x), 1))


class EncoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, ff: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff1, self.act, self.ff2 = nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d)
        self.softmax = nn.Softmax(-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        att = self.softmax(torch.matmul(q, k.transpose(-1, -2)))
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, d)
        x = self.ln1(x + self.proj(y))
        return self.ln2(x + self.ff2(self.act(self.ff1(x))))


class Bert(nn.Module):
    def __init__(self, layers: int = 12, d: int = 768, heads: int = 12, vocab: int = 30522, seq: int = 128) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.ln = nn.LayerNorm(d)
        self.layers = nn.Sequential(*[EncoderLayer(d, heads, 4 * d) for _ in range(layers)])
        self.head = nn.Linear(d, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers(self.ln(self.tok(ids))))


class GNMT(nn.Module):
    """GNMT-style encoder-decoder (Wu et al. 2016): stacked LSTMs with residual connections from
    the third layer, additive attention, one layer per node."""

    def __init__(self, layers: int = 4, d: int = 1024, vocab: int = 32000) -> None:
        super().__init__()
        self.emb_src, self.emb_tgt = nn.Embedding(vocab, d), nn.Embedding(vocab, d)
        self.enc = nn.ModuleList([nn.LSTM(d, d, batch_first=True) for _ in range(layers)])
        self.dec = nn.ModuleList([nn.LSTM(2 * d if i else d, d, batch_first=True) for i in range(layers)])
        self.att = nn.Linear(d, d)
        self.softmax = nn.Softmax(-1)
        self.cls = nn.Linear(d, vocab)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        x = self.emb_src(src)
        for i, lstm in enumerate(self.enc):
            y = lstm(x)[0]
            x = x + y if i >= 2 else y
        h = self.emb_tgt(tgt)
        h = self.dec[0](h)[0]
        ctx = torch.matmul(self.softmax(torch.matmul(self.att(h), x.transpose(1, 2))), x)
        for i, lstm in enumerate(self.dec[1:], 1):
            y = lstm(torch.cat([h, ctx], -1))[0]
            h = h + y if i >= 2 else y
        return self.cls(h)


def _img(batch: int, size: int = 224) -> torch.Tensor:
    return torch.zeros(batch, 3, size, size)


MODELS: dict[str, Callable[[], tuple[nn.Module, object]]] = {
    "resnet18": lambda: (ResNet(Basic, [2, 2, 2, 2]), _img(32)),
    "resnet50": lambda: (ResNet(Bottleneck, [3, 4, 6, 3]), _img(32)),
    "resnext50": lambda: (ResNet(Bottleneck, [3, 4, 6, 3], groups=32, base=4), _img(32)),
    "squeezenet": lambda: (SqueezeNet(), _img(64)),
    "vgg16": lambda: (VGG16(), _img(32)),
    "mobilenetv2": lambda: (MobileNetV2(), _img(64)),
    "inception3": lambda: (InceptionV3(), _img(32, 299)),
    "nasnet": lambda: (NASNetSmall(), _img(32)),
    "bert6": lambda: (Bert(layers=6), torch.zeros(16, 128, dtype=torch.long)),
    "gnmt4": lambda: (GNMT(), (torch.zeros(64, 50, dtype=torch.long), torch.zeros(64, 50, dtype=torch.long))),
}


def main(argv: list[str]) -> int:
    from placement.importers.layers import layer_profile

    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name in argv[1:] or list(MODELS):
        model, inputs = MODELS[name]()
        text = layer_profile(model, inputs)
        (out / f"{name}.txt").write_text(text)
        print(f"{name}: {text.count('forward_compute_time')} layers", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
