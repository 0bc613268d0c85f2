"""Real models for a fifth "realcheck" round (session 37): small training steps built around PyTorch
features real training code uses and no earlier round had. Built from code, random weights and
inputs, no downloads; each factory returns ``(model, example_inputs, loss_fn)`` (loss_fn None: the
importer's default loss), as in bench/real_models.py to real_models4.py.

    python -m placement.importers.torch bench/real_models5.py:checkpointed -o /tmp/rm5/checkpointed.json --devices 4

- ``checkpointed``: six pre-norm MLP blocks (d 128, GELU, 4x expansion), each under
  ``torch.utils.checkpoint(..., use_reentrant=False)``: the backward recomputes each block.
- ``torch_encoder``: ``nn.TransformerEncoder`` (4 layers of ``nn.TransformerEncoderLayer``, d 128,
  4 heads, FFN 256, dropout 0.1, batch-first), PyTorch's own module with its fused paths off
  (``enable_nested_tensor=False``), mean-pooled into a 10-way head.
- ``sdpa_dropout``: three causal attention layers on ``F.scaled_dot_product_attention`` with
  ``dropout_p=0.1`` (random masks in the captured step).
- ``fnet``: two FNet-style mixing blocks (Lee-Thorp et al. 2022): ``torch.fft.fft2`` of the
  activations cast to complex64, its real part added back, LayerNorm, a linear layer.
- ``tied_gru``: a 2-layer GRU language model whose output projection is the embedding matrix
  transposed (weight tying through a matmul, not a tied ``nn.Linear``).
- ``bf16_autocast``: a two-layer MLP under ``torch.autocast("cpu", dtype=torch.bfloat16)``, its
  output cast back to float32 (casts in the graph, bfloat16 tensors of half the bytes).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


class _MlpBlock(nn.Module):
    def __init__(self, d: int = 128, checkpointed: bool = False) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.checkpointed = checkpointed

    def inner(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.norm(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + (checkpoint(self.inner, x, use_reentrant=False) if self.checkpointed else self.inner(x))


class _Stack(nn.Module):
    def __init__(self, blocks: list[nn.Module], d: int, classes: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Linear(d, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(1))


def checkpointed():
    torch.manual_seed(0)
    model = _Stack([_MlpBlock(checkpointed=True) for _ in range(6)], 128, 10)
    return model, (torch.randn(8, 64, 128),), lambda out: out.logsumexp(-1).mean()


def torch_encoder():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(128, 4, 256, dropout=0.1, batch_first=True)
    model = _Stack([nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)], 128, 10)
    return model, (torch.randn(8, 32, 128),), None


class _Attention(nn.Module):
    def __init__(self, d: int = 128, heads: int = 4) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.1)
        return x + self.out(y.transpose(1, 2).reshape(b, t, d))


def sdpa_dropout():
    torch.manual_seed(0)
    return _Stack([_Attention() for _ in range(3)], 128, 10), (torch.randn(4, 32, 128),), None


class _FourierMix(nn.Module):
    def __init__(self, d: int = 64) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.norm(x + torch.fft.fft2(x.to(torch.complex64)).real))


def fnet():
    torch.manual_seed(0)
    return _Stack([_FourierMix(), _FourierMix()], 64, 5), (torch.randn(4, 32, 64),), None


class _TiedGru(nn.Module):
    def __init__(self, vocab: int = 1000, d: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.rnn = nn.GRU(d, d, 2, batch_first=True)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.embed(ids))
        return h @ self.embed.weight.t()


def tied_gru():
    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (4, 20))
    return _TiedGru(), (ids,), lambda logits: F.cross_entropy(logits.reshape(-1, 1000), ids.reshape(-1))


class _Bf16Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(64, 256)
        self.b = nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.b(F.relu(self.a(x))).float()


def bf16_autocast():
    torch.manual_seed(0)
    return _Bf16Mlp(), (torch.randn(16, 64),), None
