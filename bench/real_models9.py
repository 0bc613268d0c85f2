"""Real models for a ninth "realcheck" round (session 42): gradients under PyTorch 2.x's default
``optimizer.zero_grad()`` (``set_to_none=True``) and fp16 AMP with ``torch.amp.GradScaler``. Built
from code, random weights and inputs, no downloads; each factory returns ``(model,
example_inputs, loss_fn)``, as in bench/real_models.py to real_models8.py.

    python -m placement.importers.torch bench/real_models9.py:gpt_weights -o /tmp/rm9/gpt_weights.json --devices 4
    python -m placement.importers.torch bench/real_models9.py:amp_gpt -o /tmp/rm9/amp_gpt.json --devices 4 --grad-scaler

- ``gpt_weights``: a weight-heavy GPT-style decoder (4 pre-norm blocks, d 512, 8 heads, GELU MLP
  4 x d, vocabulary 16,384, untied output head: 29.4 M parameters, 118 MB of fp32 weights) on a
  batch of 4 x 128: weights, gradients and Adam's two states (471 MB) are most of the step's memory
  (PyTorch's measured peak: 641 MB with ``zero_grad(set_to_none=False)``, 538 MB with the default).
- ``amp_gpt``: the same decoder, 2 blocks, vocabulary 8,192, under fp16 ``torch.autocast`` (the
  forward and the loss), for ``--grad-scaler``: the way fp16 mixed precision is trained
  (``scaler.scale(loss).backward(); scaler.step(opt); scaler.update()``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)


class _Block(nn.Module):
    """Pre-norm decoder block: causal multi-head self-attention (fused scaled-dot-product) and a GELU
    MLP, both residual."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, -1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class _Gpt(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq: int, amp: bool = False) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(_Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)  # untied: the output head is a weight of its own
        self.vocab, self.amp = vocab, amp

    def _logits(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if not self.amp:
            return F.cross_entropy(self._logits(ids).reshape(-1, self.vocab), targets.reshape(-1))
        with torch.autocast("cpu", dtype=torch.float16):  # the forward and the loss, as the AMP recipe writes it
            return F.cross_entropy(self._logits(ids).reshape(-1, self.vocab), targets.reshape(-1))


def gpt_weights():
    """Weight-heavy decoder: 4 blocks, d 512, vocabulary 16,384, batch 4 x 128; for Adam (default)."""
    ids = torch.randint(0, 16384, (4, 129))
    return _Gpt(16384, 512, 4, 8, 128), (ids[:, :-1], ids[:, 1:]), lambda loss: loss


def amp_gpt():
    """fp16 autocast decoder: 2 blocks, d 512, vocabulary 8,192, batch 4 x 128; for --grad-scaler."""
    ids = torch.randint(0, 8192, (4, 129))
    return _Gpt(8192, 512, 2, 8, 128, amp=True), (ids[:, :-1], ids[:, 1:]), lambda loss: loss
