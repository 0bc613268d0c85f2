"""Real models for the second "realcheck" round (bench/results_import.md, session 20): training
steps that stress the PyTorch importer and `solve` in ways GPT-2 / ResNet / LSTM / ViT did not.
Built from code, random weights, no downloads; same convention as bench/real_models.py: each
factory returns ``(model, example_inputs, loss_fn)``.

    python -m placement.importers.torch bench/real_models2.py:unet -o /tmp/realcheck2/unet.json

- ``unet``: U-Net (Ronneberger et al. 2015, padded convs, batch norm): 4 levels down and up, each
  up level concatenating the matching down level's output (skips across the whole net), one
  level upsampled by ``ConvTranspose2d`` and the others by bilinear ``F.interpolate``; in-place
  ReLU (``nn.ReLU(inplace=True)``); per-pixel cross-entropy over 3 classes. Batch 2, 128x128.
- ``efficientnet``: an EfficientNet-B0-style net (Tan & Le 2019): MBConv blocks (1x1 expand,
  depthwise 3x3/5x5, squeeze-excitation, 1x1 project), SiLU, batch norm with running statistics,
  residuals with stochastic depth (a per-sample ``bernoulli_`` mask); batch 8, 112x112.
- ``moe``: a 4-block pre-norm transformer whose MLPs are top-2 mixture-of-experts layers with a
  fixed expert capacity (Switch/GShard style): integer routing tensors (``topk`` indices,
  ``one_hot``, ``cumsum``), dispatch by ``scatter``-free index arithmetic + ``index_put_`` into an
  ``[E, C, d]`` buffer, batched expert matmuls, combine by ``gather`` + ``index_add_``; the
  auxiliary load-balancing loss is added to the LM loss (two losses summed).
- ``albert``: an ALBERT/BERT-style encoder (Lan et al. 2020): word + position + token-type
  embeddings, factorised embedding (128 -> 256), ONE encoder layer's parameters applied ``depth``
  times in a Python loop (cross-layer sharing: every weight read ``depth`` times), a custom
  ``torch.autograd.Function`` (a hand-written GELU with its own backward), MLM head whose decoder
  is tied to the word embedding (a parameter used twice), and a sentence-order head: MLM + SOP
  losses summed.
- ``densenet``: a DenseNet-BC-style net (Huang et al. 2017) with concatenation of every earlier
  feature map in a block, written with explicit in-place operators (``relu_``, ``add_``,
  ``mul_``), batch norm running statistics, and two outputs (the main and an auxiliary head, as in
  GoogLeNet) whose losses are summed.
"""
from __future__ import annotations

import math
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # loaded by path (runpy): its sibling
from real_models import image_step  # noqa: E402


# ----- U-Net ---------------------------------------------------------------------------------------

class DoubleConv(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class UNet(nn.Module):
    def __init__(self, cin: int = 3, classes: int = 3, width: int = 16, levels: int = 4) -> None:
        super().__init__()
        ch = [width * 2 ** i for i in range(levels + 1)]
        self.inc = DoubleConv(cin, ch[0])
        self.down = nn.ModuleList(DoubleConv(ch[i], ch[i + 1]) for i in range(levels))
        # the deepest up step by a transposed conv, the others by bilinear upsampling + 1x1 conv
        self.up_t = nn.ConvTranspose2d(ch[levels], ch[levels - 1], 2, stride=2)
        self.up_1x1 = nn.ModuleList(nn.Conv2d(ch[i + 1], ch[i], 1) for i in range(levels - 1))
        self.up = nn.ModuleList(DoubleConv(2 * ch[i], ch[i]) for i in range(levels))
        self.outc = nn.Conv2d(ch[0], classes, 1)
        self.levels = levels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = [self.inc(x)]
        for d in self.down:
            skips.append(d(F.max_pool2d(skips[-1], 2)))
        y = skips.pop()
        for i in reversed(range(self.levels)):
            if i == self.levels - 1:
                y = self.up_t(y)
            else:
                y = self.up_1x1[i](F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False))
            y = self.up[i](torch.cat([skips.pop(), y], dim=1))
        return self.outc(y)


def unet(batch: int = 2, size: int = 128, width: int = 16):
    torch.manual_seed(0)
    model = UNet(width=width)
    x = torch.randn(batch, 3, size, size)
    target = torch.randint(0, 3, (batch, size, size))
    return model, (x,), lambda logits: F.cross_entropy(logits, target)


# ----- EfficientNet-B0 style -------------------------------------------------------------------------

class SqueezeExcite(nn.Module):
    def __init__(self, ch: int, squeeze: int) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(ch, squeeze, 1)
        self.expand = nn.Conv2d(squeeze, ch, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.expand(F.silu(self.reduce(s))))


class MBConv(nn.Module):
    def __init__(self, cin: int, cout: int, expand: int, kernel: int, stride: int, drop: float) -> None:
        super().__init__()
        mid = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.SiLU()]
        layers += [nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid, bias=False), nn.BatchNorm2d(mid), nn.SiLU(),
                   SqueezeExcite(mid, max(1, cin // 4)),
                   nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout
        self.drop = drop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        if not self.residual:
            return y
        if self.training and self.drop > 0:  # stochastic depth, per sample
            keep = 1 - self.drop
            mask = torch.empty(x.shape[0], 1, 1, 1, dtype=x.dtype, device=x.device).bernoulli_(keep)
            y = y * mask.div_(keep)
        return y + x


class EfficientNet(nn.Module):
    # (expand, channels, repeats, stride, kernel) of B0
    STAGES = ((1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5), (6, 80, 3, 2, 3),
              (6, 112, 3, 1, 5), (6, 192, 4, 2, 5), (6, 320, 1, 1, 3))

    def __init__(self, classes: int = 1000, drop_connect: float = 0.2) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.SiLU())
        blocks: list[nn.Module] = []
        cin = 32
        total = sum(s[2] for s in self.STAGES)
        for e, c, n, s, k in self.STAGES:
            for j in range(n):
                blocks.append(MBConv(cin, c, e, k, s if j == 0 else 1, drop_connect * len(blocks) / total))
                cin = c
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.SiLU())
        self.drop = nn.Dropout(0.2)
        self.fc = nn.Linear(1280, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(self.blocks(self.stem(x)))
        return self.fc(self.drop(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)))


def efficientnet(batch: int = 8, size: int = 112):
    return image_step(EfficientNet, batch, size)


# ----- Mixture of experts ------------------------------------------------------------------------------

class MoE(nn.Module):
    """Top-k routing with a fixed capacity per expert: tokens past an expert's capacity are
    dropped (they pass through the residual only). Every shape is static, so the step traces."""

    def __init__(self, d: int, hidden: int, experts: int, k: int, capacity_factor: float, tokens: int) -> None:
        super().__init__()
        self.router = nn.Linear(d, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, d, hidden) / math.sqrt(d))
        self.w2 = nn.Parameter(torch.randn(experts, hidden, d) / math.sqrt(hidden))
        self.e, self.k = experts, k
        self.cap = int(math.ceil(capacity_factor * tokens * k / experts))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = x.shape
        x = x.reshape(-1, shape[-1])                                    # [T, d]
        t = x.shape[0]
        probs = self.router(x).softmax(-1)                              # [T, E]
        gate, idx = probs.topk(self.k, dim=-1)                          # [T, k] float, int64
        gate = gate / gate.sum(-1, keepdim=True)
        # position of each (token, choice) in its expert's queue: choice-major, as in GShard
        flat = idx.t().reshape(-1)                                      # [k*T]
        onehot = F.one_hot(flat, self.e)                                # [k*T, E] int64
        pos = (onehot.cumsum(0) - 1).gather(1, flat[:, None]).squeeze(1)   # [k*T] int64
        keep = pos < self.cap
        slot = torch.where(keep, flat * self.cap + pos, torch.full_like(pos, self.e * self.cap))  # dropped -> dump slot
        token = torch.arange(t, device=x.device).repeat(self.k)         # [k*T]
        buf = x.new_zeros(self.e * self.cap + 1, x.shape[1])
        buf = buf.index_put((slot,), x[token])                          # dispatch
        h = buf[:-1].view(self.e, self.cap, -1)
        h = torch.bmm(F.gelu(torch.bmm(h, self.w1)), self.w2)           # [E, C, d]
        h = torch.cat([h.reshape(self.e * self.cap, -1), h.new_zeros(1, h.shape[-1])])
        w = (gate.t().reshape(-1) * keep.to(x.dtype))[:, None]
        out = x.new_zeros(t, x.shape[1]).index_add(0, token, h.gather(0, slot[:, None].expand(-1, h.shape[1])) * w)
        # Switch's load-balancing loss: fraction routed (first choice) x mean router probability
        frac = onehot[:t].to(x.dtype).mean(0)
        aux = self.e * (frac * probs.mean(0)).sum()
        return out.view(shape), aux


class MoEBlock(nn.Module):
    def __init__(self, d: int, heads: int, moe: MoE) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, dropout=0.1, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.moe = moe

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        y, aux = self.moe(self.ln2(x))
        return x + y, aux


class MoELM(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, experts: int, k: int, seq: int, batch: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        self.blocks = nn.ModuleList(MoEBlock(d, heads, MoE(d, 4 * d, experts, k, 1.25, seq * batch)) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.out = nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1), persistent=False)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.embed(ids) + self.pos
        aux = x.new_zeros(())
        for b in self.blocks:
            x, a = b(x, self.mask)
            aux = aux + a
        return self.out(self.ln(x)), aux


def moe(batch: int = 4, seq: int = 128, vocab: int = 8000, d: int = 256, layers: int = 4, heads: int = 4, experts: int = 8, k: int = 2):
    torch.manual_seed(0)
    model = MoELM(vocab, d, layers, heads, experts, k, seq, batch)
    ids = torch.randint(0, vocab, (batch, seq))
    targets = torch.randint(0, vocab, (batch * seq,))

    def loss(out):
        logits, aux = out
        return F.cross_entropy(logits.reshape(-1, vocab), targets) + 0.01 * aux
    return model, (ids,), loss


# ----- ALBERT / BERT style -------------------------------------------------------------------------------

class HandGELU(torch.autograd.Function):
    """tanh-approximate GELU with a hand-written backward (a custom autograd.Function)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        c = math.sqrt(2 / math.pi)
        t = torch.tanh(c * (x + 0.044715 * x ** 3))
        ctx.save_for_backward(x, t)
        return 0.5 * x * (1 + t)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:
        x, t = ctx.saved_tensors
        c = math.sqrt(2 / math.pi)
        dt = (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)
        return g * (0.5 * (1 + t) + 0.5 * x * dt)


class AlbertLayer(nn.Module):
    def __init__(self, d: int, heads: int, ff: int, p: float) -> None:
        super().__init__()
        self.heads = heads
        self.attn_p = p
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, ff)
        self.ff2 = nn.Linear(ff, d)
        self.ln2 = nn.LayerNorm(d)
        self.drop = nn.Dropout(p)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=pad, dropout_p=self.attn_p if self.training else 0.0)
        x = self.ln1(x + self.drop(self.proj(a.transpose(1, 2).reshape(b, s, d))))
        return self.ln2(x + self.drop(self.ff2(HandGELU.apply(self.ff1(x)))))


class Albert(nn.Module):
    def __init__(self, vocab: int = 30000, e: int = 128, d: int = 256, heads: int = 4, ff: int = 1024, depth: int = 12, seq: int = 128) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, e)
        self.position = nn.Embedding(seq, e)
        self.token_type = nn.Embedding(2, e)
        self.emb_ln = nn.LayerNorm(e)
        self.emb_proj = nn.Linear(e, d)
        self.layer = AlbertLayer(d, heads, ff, 0.1)   # one layer, applied `depth` times
        self.depth = depth
        self.mlm_dense = nn.Linear(d, e)
        self.mlm_ln = nn.LayerNorm(e)
        self.mlm_bias = nn.Parameter(torch.zeros(vocab))
        self.pooler = nn.Linear(d, d)
        self.sop = nn.Linear(d, 2)

    def forward(self, ids: torch.Tensor, types: torch.Tensor, attn: torch.Tensor) -> dict[str, torch.Tensor]:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.emb_proj(self.emb_ln(self.word(ids) + self.position(pos) + self.token_type(types)))
        pad = (1.0 - attn[:, None, None, :].to(x.dtype)) * -10000.0
        for _ in range(self.depth):
            x = self.layer(x, pad)
        h = self.mlm_ln(HandGELU.apply(self.mlm_dense(x)))
        mlm = h @ self.word.weight.t() + self.mlm_bias          # decoder tied to the word embedding
        sop = self.sop(torch.tanh(self.pooler(x[:, 0])))
        return {"mlm": mlm, "sop": sop}


def albert(batch: int = 8, seq: int = 128, depth: int = 12, vocab: int = 30000):
    torch.manual_seed(0)
    model = Albert(vocab=vocab, depth=depth, seq=seq)
    ids = torch.randint(0, vocab, (batch, seq))
    types = (torch.arange(seq) >= seq // 2).long().expand(batch, -1).contiguous()
    attn = torch.ones(batch, seq, dtype=torch.long)
    attn[:, -seq // 8:] = 0
    mlm_labels = torch.full((batch, seq), -100, dtype=torch.long)
    mlm_labels[:, ::7] = torch.randint(0, vocab, (batch, len(range(0, seq, 7))))
    sop_labels = torch.randint(0, 2, (batch,))

    def loss(out):
        return (F.cross_entropy(out["mlm"].reshape(-1, vocab), mlm_labels.reshape(-1), ignore_index=-100)
                + F.cross_entropy(out["sop"], sop_labels))
    return model, (ids, types, attn), loss


# ----- DenseNet with in-place operators and two heads --------------------------------------------------

class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, 4 * growth, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(4 * growth)
        self.conv2 = nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False)

    def forward(self, feats: list[torch.Tensor]) -> torch.Tensor:
        x = torch.cat(feats, 1)
        x = self.conv1(self.bn1(x).relu_())
        return self.conv2(self.bn2(x).relu_())


class Transition(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(cin)
        self.conv = nn.Conv2d(cin, cout, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(self.conv(self.bn(x).relu_()), 2)


class DenseNet(nn.Module):
    def __init__(self, blocks: tuple[int, ...] = (6, 12, 24, 16), growth: int = 32, classes: int = 100) -> None:
        super().__init__()
        ch = 2 * growth
        self.stem = nn.Conv2d(3, ch, 3, padding=1, bias=False)
        self.stem_bn = nn.BatchNorm2d(ch)
        self.blocks = nn.ModuleList()
        self.trans = nn.ModuleList()
        for i, n in enumerate(blocks):
            self.blocks.append(nn.ModuleList(DenseLayer(ch + j * growth, growth) for j in range(n)))
            ch += n * growth
            if i < len(blocks) - 1:
                self.trans.append(Transition(ch, ch // 2))
                ch //= 2
            if i == 1:
                self.aux_ch = ch
        self.aux = nn.Linear(self.aux_ch, classes)
        self.bn = nn.BatchNorm2d(ch)
        self.fc = nn.Linear(ch, classes)
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.stem_bn(self.stem(x)).relu_()
        aux = None
        for i, block in enumerate(self.blocks):
            feats = [x]
            for layer in block:
                feats.append(layer(feats))
            x = torch.cat(feats, 1)
            if i < len(self.trans):
                x = self.trans[i](x)
            if i == 1:
                aux = self.aux(F.adaptive_avg_pool2d(x, 1).flatten(1))
        x = self.bn(x).relu_()
        pooled = F.adaptive_avg_pool2d(x, 1).flatten(1)
        logits = self.fc(pooled)
        logits.mul_(self.scale).add_(aux.detach(), alpha=0.1)   # in-place on a non-leaf, detached read
        return logits, aux


def densenet(batch: int = 16, size: int = 32):
    """DenseNet-121's block layout (6, 12, 24, 16) at CIFAR shapes (32x32), growth 32."""
    torch.manual_seed(0)
    model = DenseNet()
    x = torch.randn(batch, 3, size, size)
    labels = torch.randint(0, 100, (batch,))

    def loss(out):
        logits, aux = out
        return F.cross_entropy(logits, labels) + 0.3 * F.cross_entropy(aux, labels)
    return model, (x,), loss
