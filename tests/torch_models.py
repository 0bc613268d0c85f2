"""Real architectures built from configs, for the importer tests and benchmarks (no downloads).

Written here from the published designs: a BERT encoder (Devlin et al.; HF's eager attention), a
GPT-2 block stack (Radford et al.; causal scaled-dot-product attention, tied embeddings), a small
ResNet-style CNN (He et al.; batch norm, residual blocks), and the 3-layer MLP the tests check by
hand. Each ``*_factory`` returns ``(model, example_inputs, loss_fn)`` as the importer's CLI expects
(``python -m placement.importers.torch tests/torch_models.py:bert_tiny``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


@dataclass
class BertConfig:
    vocab: int = 128
    hidden: int = 32
    layers: int = 2
    heads: int = 4
    intermediate: int = 64
    max_pos: int = 64
    batch: int = 2
    seq: int = 16


class BertLayer(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.heads = c.heads
        self.query = nn.Linear(c.hidden, c.hidden)
        self.key = nn.Linear(c.hidden, c.hidden)
        self.value = nn.Linear(c.hidden, c.hidden)
        self.attn_out = nn.Linear(c.hidden, c.hidden)
        self.attn_norm = nn.LayerNorm(c.hidden)
        self.intermediate = nn.Linear(c.hidden, c.intermediate)
        self.output = nn.Linear(c.intermediate, c.hidden)
        self.out_norm = nn.LayerNorm(c.hidden)
        self.dropout = nn.Dropout(0.1)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        return x.view(b, s, self.heads, h // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + mask
        ctx = self.dropout(scores.softmax(-1)) @ v
        ctx = ctx.transpose(1, 2).reshape(x.shape)
        x = self.attn_norm(x + self.dropout(self.attn_out(ctx)))
        return self.out_norm(x + self.dropout(self.output(F.gelu(self.intermediate(x)))))


class Bert(nn.Module):
    """BERT encoder with a masked-language-model head (decoder tied to the word embeddings)."""

    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.word = nn.Embedding(c.vocab, c.hidden)
        self.position = nn.Embedding(c.max_pos, c.hidden)
        self.token_type = nn.Embedding(2, c.hidden)
        self.emb_norm = nn.LayerNorm(c.hidden)
        self.layers = nn.ModuleList(BertLayer(c) for _ in range(c.layers))
        self.head = nn.Linear(c.hidden, c.hidden)
        self.head_norm = nn.LayerNorm(c.hidden)
        self.decoder_bias = nn.Parameter(torch.zeros(c.vocab))

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.emb_norm(self.word(ids) + self.position(pos) + self.token_type(torch.zeros_like(ids)))
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask)
        h = self.head_norm(F.gelu(self.head(x)))
        return h @ self.word.weight.t() + self.decoder_bias


def bert_factory(c: BertConfig = BertConfig()):
    torch.manual_seed(0)
    model = Bert(c)
    ids = torch.randint(0, c.vocab, (c.batch, c.seq))
    mask = torch.ones(c.batch, c.seq, dtype=torch.int64)
    labels = torch.randint(0, c.vocab, (c.batch, c.seq))
    return model, (ids, mask), lambda logits: F.cross_entropy(logits.reshape(-1, c.vocab), labels.reshape(-1))


def bert_tiny():
    return bert_factory(BertConfig())


def bert_base_12():
    """BERT-base shape (12 layers, hidden 768) at a short sequence, for the import-time benchmark."""
    return bert_factory(BertConfig(vocab=30522, hidden=768, layers=12, heads=12, intermediate=3072, max_pos=512, batch=2, seq=128))


@dataclass
class GPT2Config:
    vocab: int = 128
    n_embd: int = 32
    n_layer: int = 2
    n_head: int = 4
    n_positions: int = 64
    batch: int = 2
    seq: int = 16
    checkpoint: bool = False  # each block under torch.utils.checkpoint (recomputed in the backward)


class GPT2Block(nn.Module):
    def __init__(self, c: GPT2Config) -> None:
        super().__init__()
        self.n_head = c.n_head
        self.ln_1 = nn.LayerNorm(c.n_embd)
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd)
        self.ln_2 = nn.LayerNorm(c.n_embd)
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd)
        self.mlp_proj = nn.Linear(4 * c.n_embd, c.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, e = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(e, dim=2)
        q, k, v = (t.view(b, s, self.n_head, e // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, s, e))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    """GPT-2: token and position embeddings, a stack of pre-norm blocks, a tied LM head."""

    def __init__(self, c: GPT2Config) -> None:
        super().__init__()
        self.wte = nn.Embedding(c.vocab, c.n_embd)
        self.wpe = nn.Embedding(c.n_positions, c.n_embd)
        self.h = nn.ModuleList(GPT2Block(c) for _ in range(c.n_layer))
        self.ln_f = nn.LayerNorm(c.n_embd)
        self.checkpoint = c.checkpoint

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for block in self.h:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpoint else block(x)
        return self.ln_f(x) @ self.wte.weight.t()


def gpt2_factory(c: GPT2Config = GPT2Config()):
    torch.manual_seed(0)
    model = GPT2(c)
    ids = torch.randint(0, c.vocab, (c.batch, c.seq))

    def loss_fn(logits: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits[:, :-1].reshape(-1, c.vocab), ids[:, 1:].reshape(-1))

    return model, (ids,), loss_fn


def gpt2_tiny():
    return gpt2_factory(GPT2Config())


def gpt2_48():
    """48 GPT-2 blocks (GPT-2 XL's depth) at a small width, for the import-time benchmark."""
    return gpt2_factory(GPT2Config(vocab=1024, n_embd=128, n_layer=48, n_head=4, n_positions=128, batch=2, seq=64))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    """A small ResNet: stem, residual stages of basic blocks, global average pool, classifier."""

    def __init__(self, widths: tuple[int, ...] = (8, 16), blocks: int = 1, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU())
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            for b in range(blocks):
                layers.append(BasicBlock(cin, w, 2 if (b == 0 and i > 0) else 1))
                cin = w
        self.stages = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.stages(self.stem(x)).mean(dim=(2, 3)))


def cnn_factory(widths: tuple[int, ...] = (8, 16), blocks: int = 1, batch: int = 2, size: int = 16):
    torch.manual_seed(0)
    model = ResNet(widths, blocks)
    x = torch.randn(batch, 3, size, size)
    labels = torch.randint(0, 10, (batch,))
    return model, (x,), lambda logits: F.cross_entropy(logits, labels)


def cnn_tiny():
    return cnn_factory()


class MLP(nn.Module):
    """The hand-checked 3-layer MLP: 8 -> 16 -> 16 -> 4 with ReLU, no bias on the last layer."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 4, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def mlp_factory():
    torch.manual_seed(0)
    return MLP(), (torch.randn(2, 8),)


def bert_base_layers(layers: int):
    return bert_factory(BertConfig(vocab=30522, hidden=768, layers=layers, heads=12, intermediate=3072, max_pos=512, batch=2, seq=128))


def bert_base_2():
    return bert_base_layers(2)


def bert_base_4():
    return bert_base_layers(4)


def gpt2_12():
    return gpt2_factory(GPT2Config(vocab=1024, n_embd=128, n_layer=12, n_head=4, n_positions=128, batch=2, seq=64))


def gpt2_24():
    return gpt2_factory(GPT2Config(vocab=1024, n_embd=128, n_layer=24, n_head=4, n_positions=128, batch=2, seq=64))


def cnn_bench():
    """A ResNet-18-like stack (3 stages of 2 blocks) on 32x32 images, batch 16."""
    return cnn_factory(widths=(32, 64, 128), blocks=2, batch=16, size=32)


class PreActBottleneck(nn.Module):
    """He et al. 2016 ("Identity Mappings in Deep Residual Networks"): BN-ReLU-conv 1x1, 3x3, 1x1
    (4x expansion), identity shortcut, or a 1x1 projection when the shape changes."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = 4 * width
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Conv2d(cin, cout, 1, stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(x))
        shortcut = x if self.short is None else self.short(y)
        y = self.conv1(y)
        y = self.conv2(F.relu(self.bn2(y)))
        y = self.conv3(F.relu(self.bn3(y)))
        return y + shortcut


class PreActResNet(nn.Module):
    """The CIFAR pre-activation ResNet with bottleneck blocks: a 3x3 stem of 16 channels, three
    stages of ``blocks`` blocks (widths 16, 32, 64; outputs 64, 128, 256), BN-ReLU, global pool, FC.
    Depth 9 * blocks + 2: ResNet-164 at 18 blocks per stage, ResNet-1001 at 111."""

    def __init__(self, blocks: int, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        layers, cin = [], 16
        for i, width in enumerate((16, 32, 64)):
            for b in range(blocks):
                layers.append(PreActBottleneck(cin, width, 2 if (b == 0 and i > 0) else 1))
                cin = 4 * width
        self.stages = nn.Sequential(*layers)
        self.bn = nn.BatchNorm2d(cin)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.relu(self.bn(self.stages(self.stem(x)))).mean(dim=(2, 3)))


def preact_resnet_factory(blocks: int, batch: int = 64, size: int = 32):
    torch.manual_seed(0)
    model = PreActResNet(blocks)
    x = torch.randn(batch, 3, size, size)
    labels = torch.randint(0, 10, (batch,))
    return model, (x,), lambda logits: F.cross_entropy(logits, labels)


def resnet164():
    """ResNet-164 (pre-activation, CIFAR-10, batch 64): about 5.5K ATen operators per training step."""
    return preact_resnet_factory(18)


def resnet1001():
    """ResNet-1001 (pre-activation, CIFAR-10, batch 64, He et al. 2016): the training step with Adam
    is about 34K ATen operators, the size of the issue-16 real-graph goal (bench/results_scale.md)."""
    return preact_resnet_factory(111)
