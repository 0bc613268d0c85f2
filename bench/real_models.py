"""Real models at the sizes users bring, built from code (no downloads, random weights), for the
"realcheck" runs of bench/results_import.md (session 17).

Each ``*()`` factory returns ``(model, example_inputs, loss_fn)`` as the PyTorch importer expects:

    python -m placement.importers.torch bench/real_models.py:gpt2_small -o /tmp/realcheck/gpt2.json

- ``gpt2_small``: GPT-2 small (Radford et al. 2019): 12 pre-norm blocks, d_model 768, 12 heads,
  vocab 50257, context 1024, HF-style eager attention (explicit causal mask, softmax, dropout 0.1
  on attention, residuals and embeddings), tied LM head; batch 2 x 512 tokens.
- ``resnet50``: ResNet-50 v1.5 (He et al. 2016; torchvision's layout: bottlenecks [3, 4, 6, 3],
  stride on the 3x3 conv, batch norm, 1000 classes), batch 16 of 224x224 images.
- ``lstm_lm``: a 2-layer LSTM language model (Zaremba et al. 2014 "medium": hidden 650, vocab
  10000, dropout 0.5) over 35 time steps, batch 20, through ``nn.LSTM`` (the cuDNN-style fused
  module users write; at ATen level on CPU it unrolls into per-step operators).
- ``vit_b16``: ViT-B/16 (Dosovitskiy et al. 2021): 16x16 patches of 224x224 images, 12 pre-norm
  blocks, d_model 768, 12 heads, MLP 3072, class token, 1000 classes; batch 8, PyTorch's own
  ``nn.TransformerEncoderLayer`` (norm_first, GELU), as users build it.
- ``googlenet``: GoogLeNet / Inception v1 (Szegedy et al. 2015; torchvision's layout without the
  auxiliary heads), batch 16 of 224x224 images: nine four-branch fork-joins (session 23).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class GPT2Attention(nn.Module):
    """HF GPT-2's eager attention: fused QKV projection, explicit causal mask, attention dropout."""

    def __init__(self, d: int, heads: int, ctx: int, p: float) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.attn_drop = nn.Dropout(p)
        self.resid_drop = nn.Dropout(p)
        self.register_buffer("bias", torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)).view(1, 1, ctx, ctx), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        w = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads)
        w = w.masked_fill(~self.bias[:, :, :s, :s], torch.finfo(w.dtype).min)
        y = self.attn_drop(w.softmax(-1)) @ v
        return self.resid_drop(self.c_proj(y.transpose(1, 2).reshape(b, s, d)))


class GPT2Block(nn.Module):
    def __init__(self, d: int, heads: int, ctx: int, p: float) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = GPT2Attention(d, heads, ctx, p)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.drop(self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")))


class GPT2(nn.Module):
    def __init__(self, vocab: int = 50257, d: int = 768, layers: int = 12, heads: int = 12, ctx: int = 1024, p: float = 0.1) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)
        self.drop = nn.Dropout(p)
        self.h = nn.ModuleList(GPT2Block(d, heads, ctx, p) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.drop(self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device)))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


def gpt2_factory(layers: int = 12, d: int = 768, heads: int = 12, batch: int = 2, seq: int = 512, vocab: int = 50257):
    """A GPT-2 training step (next-token cross-entropy) at the given size."""
    torch.manual_seed(0)
    model = GPT2(vocab, d, layers, heads)
    ids = torch.randint(0, vocab, (batch, seq))

    def loss_fn(logits: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1))

    return model, (ids,), loss_fn


def gpt2_small():
    """GPT-2 small, batch 2 x 512."""
    return gpt2_factory()


def gpt2_medium():
    """GPT-2 medium (24 layers, d_model 1024, 16 heads), batch 1 x 512."""
    return gpt2_factory(layers=24, d=1024, heads=16, batch=1)


class Bottleneck(nn.Module):
    """torchvision's ResNet v1.5 bottleneck: 1x1, 3x3 (stride here), 1x1 x4, projection shortcut."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, 4 * width, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(4 * width)
        self.down = None
        if stride != 1 or cin != 4 * width:
            self.down = nn.Sequential(nn.Conv2d(cin, 4 * width, 1, stride, bias=False), nn.BatchNorm2d(4 * width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)), inplace=True)
        y = F.relu(self.bn2(self.conv2(y)), inplace=True)
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.down is None else self.down(x)), inplace=True)


class ResNet50(nn.Module):
    def __init__(self, blocks: tuple[int, ...] = (3, 4, 6, 3), classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.pool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for i, (n, width) in enumerate(zip(blocks, (64, 128, 256, 512))):
            for b in range(n):
                layers.append(Bottleneck(cin, width, 2 if (b == 0 and i > 0) else 1))
                cin = 4 * width
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.bn1(self.conv1(x)), inplace=True))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.layers(x), 1), 1))


def image_step(build, batch: int, size: int):
    """An ImageNet classifier's training step on random images: (model, (images,), cross-entropy
    over 1000 classes); the seed is set before ``build()`` makes the model, so every call gives the
    same weights, images and labels."""
    torch.manual_seed(0)
    model = build()
    x = torch.randn(batch, 3, size, size)
    labels = torch.randint(0, 1000, (batch,))
    return model, (x,), lambda logits: F.cross_entropy(logits, labels)


def resnet50(batch: int = 16, size: int = 224):
    """ResNet-50 on ImageNet shapes, batch 16."""
    return image_step(ResNet50, batch, size)


def conv_bn(cin: int, cout: int, k: int, stride: int = 1) -> nn.Sequential:
    """Conv (no bias), batch norm, ReLU: GoogLeNet's BasicConv2d."""
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout, eps=0.001),
                         nn.ReLU(inplace=True))


class Inception(nn.Module):
    """An Inception (v1) module: four branches from one input, concatenated: 1x1; 1x1 then 3x3;
    1x1 then 3x3 (torchvision's variant of the 5x5); 3x3 max pool then 1x1."""

    def __init__(self, cin: int, c1: int, r3: int, c3: int, r5: int, c5: int, pool: int) -> None:
        super().__init__()
        self.b1 = conv_bn(cin, c1, 1)
        self.b2 = nn.Sequential(conv_bn(cin, r3, 1), conv_bn(r3, c3, 3))
        self.b3 = nn.Sequential(conv_bn(cin, r5, 1), conv_bn(r5, c5, 3))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), conv_bn(cin, pool, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)


class GoogLeNet(nn.Module):
    """GoogLeNet / Inception v1 (Szegedy et al. 2015) in torchvision's layout without the auxiliary
    heads: the stem, inception 3a-3b, 4a-4e, 5a-5b (torchvision's channel table), average pool,
    dropout, 1000 classes."""

    TABLE = ((192, 64, 96, 128, 16, 32, 32), (256, 128, 128, 192, 32, 96, 64), "pool",
             (480, 192, 96, 208, 16, 48, 64), (512, 160, 112, 224, 24, 64, 64), (512, 128, 128, 256, 24, 64, 64),
             (512, 112, 144, 288, 32, 64, 64), (528, 256, 160, 320, 32, 128, 128), "pool",
             (832, 256, 160, 320, 32, 128, 128), (832, 384, 192, 384, 48, 128, 128))

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, ceil_mode=True), conv_bn(64, 64, 1),
                                  conv_bn(64, 192, 3), nn.MaxPool2d(3, 2, ceil_mode=True))
        blocks = [nn.MaxPool2d(3, 2, ceil_mode=True) if row == "pool" else Inception(*row) for row in self.TABLE]
        self.blocks = nn.Sequential(*blocks)
        self.drop = nn.Dropout(0.2)
        self.fc = nn.Linear(1024, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(self.drop(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)))


def googlenet(batch: int = 16, size: int = 224):
    """GoogLeNet (Inception v1) on ImageNet shapes, batch 16: nine four-branch fork-joins."""
    return image_step(GoogLeNet, batch, size)


class LSTMLM(nn.Module):
    """Embedding, dropout, a stacked nn.LSTM, dropout, a linear decoder over the vocabulary."""

    def __init__(self, vocab: int, hidden: int, layers: int, p: float) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.drop = nn.Dropout(p)
        self.lstm = nn.LSTM(hidden, hidden, layers, dropout=p, batch_first=False)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.drop(self.embed(ids)))
        return self.decoder(self.drop(out))


def lstm_lm(vocab: int = 10000, hidden: int = 650, layers: int = 2, steps: int = 35, batch: int = 20):
    """Zaremba et al.'s medium LSTM LM: 2 x 650, 35 steps, batch 20."""
    torch.manual_seed(0)
    model = LSTMLM(vocab, hidden, layers, 0.5)
    ids = torch.randint(0, vocab, (steps, batch))
    targets = torch.randint(0, vocab, (steps * batch,))
    return model, (ids,), lambda logits: F.cross_entropy(logits.reshape(-1, vocab), targets)


class ViT(nn.Module):
    """ViT-B/16 with torch's own nn.TransformerEncoderLayer (pre-norm, GELU)."""

    def __init__(self, size: int = 224, patch: int = 16, d: int = 768, layers: int = 12, heads: int = 12, mlp: int = 3072, classes: int = 1000) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, d, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, (size // patch) ** 2 + 1, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, mlp, dropout=0.1, activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.encoder(x))[:, 0])


def vit_b16(batch: int = 8):
    """ViT-B/16 on 224x224 images, batch 8."""
    return image_step(ViT, batch, 224)


def lstm_lm_unrolled():
    """The same LSTM LM with oneDNN off, so nn.LSTM unrolls into per-step ATen operators (what
    placement across time steps needs; the fused op keeps a layer's 35 steps in one node)."""
    torch.backends.mkldnn.enabled = False
    return lstm_lm()


def gpt2_large():
    """GPT-2 large (36 layers, d_model 1280, 20 heads), batch 1 x 512: about 6K operators."""
    return gpt2_factory(layers=36, d=1280, heads=20, batch=1)


def resnet152():
    """ResNet-152 (bottlenecks [3, 8, 36, 3]) on ImageNet shapes, batch 16: about 5.5K operators."""
    return image_step(lambda: ResNet50(blocks=(3, 8, 36, 3)), 16, 224)


def lstm_lm_unrolled_100():
    """The unrolled LSTM LM over 100 time steps (truncated BPTT of 100): about 6.5K operators."""
    torch.backends.mkldnn.enabled = False
    return lstm_lm(steps=100)
