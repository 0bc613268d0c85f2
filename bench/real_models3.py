"""Real models for the third "realcheck" round (session 28): training steps of 10K-40K ATen
operators from families other than ResNet-1001 (the graph issue 16's 600 s promise was tuned on,
tests/torch_models.py:resnet1001). Built from code, random weights, no downloads; same convention
as bench/real_models.py and bench/real_models2.py: each factory returns
``(model, example_inputs, loss_fn)``.

    python -m placement.importers.torch bench/real_models3.py:gpt_deep -o /tmp/s28/big/gpt_deep.json --devices 4

- ``gpt_deep``: a deep LLaMA-style decoder (Touvron et al. 2023): 64 pre-norm blocks of d_model
  512, 8 heads, hand-written RMSNorm, rotary position embeddings applied to q and k (slices,
  negation, cat: many cheap elementwise ops), causal ``F.scaled_dot_product_attention``, SwiGLU
  MLP (1408), untied LM head over 32,000 tokens; batch 4 x 512 tokens. Built on the meta device
  (no weights allocated), so its attention is PyTorch's decomposed math path, not the fused CPU
  kernel (docs/importers.md). Stresses: one very long chain of ~200 ops per block with little
  parallelism at batch 4 (placement is mostly about where to cut the chain and what the
  transfers of [4, 512, 512] activations cost), plus 64 x 9 weight updates hanging off it.
- ``gru_seq2seq``: an unrolled recurrent encoder-decoder (Bahdanau/Luong-style NMT): embedding,
  a bidirectional ``nn.GRU`` encoder (1 layer, hidden 256) over 120 source steps (nn.GRU unrolls
  into per-step ATen ops on the CPU), a ``nn.GRUCell`` decoder over 100 target steps with teacher
  forcing and Luong "general" attention over all encoder states at every step (bmm, softmax, bmm,
  concat, tanh projection), one output projection over 8,000 tokens for all steps; batch 32.
  Stresses: two long sequential recurrences (the forward and backward directions of the encoder
  run side by side, then the decoder chain), a fan-out from the encoder states to every decoder
  step, and weight-gradient accumulation chains that span the whole unrolled graph.
- ``inception_resnet_v2``: Inception-ResNet-v2 (Szegedy et al. 2017; timm's layout): stem,
  Mixed_5b, 10 x Block35, Mixed_6a, 20 x Block17, Mixed_7a, 10 x Block8, every conv followed by
  batch norm (running statistics) and ReLU, scaled residuals; batch 32 of 299x299 images.
  Stresses: 40 three- and four-branch fork-joins of unequal branch lengths (1x7 / 7x1
  factorised convs) on a residual trunk, at a batch where the convs are long and the activations
  big (transfers cost).
- ``t5_encdec``: a T5 v1.1-style encoder-decoder (Raffel et al. 2020): 16 encoder and 16 decoder
  blocks, d_model 512, 8 heads, T5 RMSNorm, bucketed relative position bias computed once per
  stack (integer ``log``/``where``/``min`` arithmetic on position differences) and added to every
  layer's scores, decoder self-attention (causal) + cross-attention to the encoder output,
  gated-GELU FFN 1024, no biases, tied input embedding; batch 8, 256 source / 128 target tokens.
  Stresses: two chains joined by cross-attention (the encoder's output read by all 16 decoder
  blocks: a wide fan-out of one tensor), and position-bias parameters shared by every layer.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


# ----- deep GPT (LLaMA-style) ----------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.o = nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.heads
        q, k, v = (m(x).view(b, s, h, d // h).transpose(1, 2) for m in (self.q, self.k, self.v))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, d))


class LlamaBlock(nn.Module):
    def __init__(self, d: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(d)
        self.attn = LlamaAttention(d, heads)
        self.mlp_norm = RMSNorm(d)
        self.gate = nn.Linear(d, ffn, bias=False)
        self.up = nn.Linear(d, ffn, bias=False)
        self.down = nn.Linear(ffn, d, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        y = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class DeepGPT(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, ffn: int, ctx: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(LlamaBlock(d, heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        hd = d // heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(ctx).float(), inv)
        ang = torch.cat([ang, ang], dim=-1)
        self.register_buffer("cos", ang.cos()[None, None], persistent=False)
        self.register_buffer("sin", ang.sin()[None, None], persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        s = ids.shape[1]
        cos, sin = self.cos[:, :, :s], self.sin[:, :, :s]
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))


def gpt_deep(layers: int = 64, d: int = 512, heads: int = 8, ffn: int = 1408, batch: int = 4, seq: int = 512, vocab: int = 32000):
    """64-block LLaMA-style decoder on the meta device (no weights allocated), batch 4 x 512."""
    torch.manual_seed(0)
    with torch.device("meta"):
        model = DeepGPT(vocab, d, layers, heads, ffn, seq)
        ids = torch.randint(0, vocab, (batch, seq))
        labels = torch.randint(0, vocab, (batch, seq))
    return model, (ids,), lambda logits: F.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1))


# ----- GRU seq2seq with attention --------------------------------------------------------------------

class GRUSeq2Seq(nn.Module):
    def __init__(self, src_vocab: int, tgt_vocab: int, emb: int, hidden: int) -> None:
        super().__init__()
        self.src_emb = nn.Embedding(src_vocab, emb)
        self.tgt_emb = nn.Embedding(tgt_vocab, emb)
        self.encoder = nn.GRU(emb, hidden, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(2 * hidden, hidden)
        self.enc_proj = nn.Linear(2 * hidden, hidden, bias=False)   # Luong "general" score
        self.decoder = nn.GRUCell(emb + hidden, hidden)
        self.combine = nn.Linear(2 * hidden + hidden, hidden)
        self.out = nn.Linear(hidden, tgt_vocab)
        self.drop = nn.Dropout(0.2)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        enc, h_n = self.encoder(self.drop(self.src_emb(src)))         # [B, S, 2H], [2, B, H]
        h = torch.tanh(self.bridge(torch.cat([h_n[0], h_n[1]], dim=-1)))
        keys = self.enc_proj(enc)                                      # [B, S, H]
        emb = self.drop(self.tgt_emb(tgt_in))                          # [B, T, E]
        att = torch.zeros_like(h)                                      # input feeding
        outs = []
        for t in range(tgt_in.shape[1]):
            h = self.decoder(torch.cat([emb[:, t], att], dim=-1), h)
            scores = torch.bmm(keys, h.unsqueeze(2)).squeeze(2)        # [B, S]
            alpha = scores.softmax(-1)
            ctx = torch.bmm(alpha.unsqueeze(1), enc).squeeze(1)        # [B, 2H]
            att = torch.tanh(self.combine(torch.cat([ctx, h], dim=-1)))
            outs.append(att)
        return self.out(self.drop(torch.stack(outs, dim=1)))           # [B, T, V]


def gru_seq2seq(batch: int = 32, src_len: int = 120, tgt_len: int = 100, vocab: int = 8000, emb: int = 256, hidden: int = 256):
    """Bidirectional GRU encoder (120 steps) + attentional GRUCell decoder (100 steps), batch 32."""
    torch.manual_seed(0)
    model = GRUSeq2Seq(vocab, vocab, emb, hidden)
    src = torch.randint(0, vocab, (batch, src_len))
    tgt = torch.randint(0, vocab, (batch, tgt_len + 1))
    tgt_in, tgt_out = tgt[:, :-1].contiguous(), tgt[:, 1:].contiguous()
    return model, (src, tgt_in), lambda logits: F.cross_entropy(logits.reshape(-1, vocab), tgt_out.reshape(-1))


# ----- Inception-ResNet-v2 ---------------------------------------------------------------------------

class BasicConv(nn.Module):
    def __init__(self, cin: int, cout: int, k, stride: int = 1, padding=0) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, padding, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class Mixed5b(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.b0 = BasicConv(192, 96, 1)
        self.b1 = nn.Sequential(BasicConv(192, 48, 1), BasicConv(48, 64, 5, padding=2))
        self.b2 = nn.Sequential(BasicConv(192, 64, 1), BasicConv(64, 96, 3, padding=1), BasicConv(96, 96, 3, padding=1))
        self.b3 = BasicConv(192, 64, 1)

    def forward(self, x):
        p = F.avg_pool2d(x, 3, 1, 1, count_include_pad=False)
        return torch.cat([self.b0(x), self.b1(x), self.b2(x), self.b3(p)], 1)


class Block35(nn.Module):
    def __init__(self, scale: float = 0.17) -> None:
        super().__init__()
        self.scale = scale
        self.b0 = BasicConv(320, 32, 1)
        self.b1 = nn.Sequential(BasicConv(320, 32, 1), BasicConv(32, 32, 3, padding=1))
        self.b2 = nn.Sequential(BasicConv(320, 32, 1), BasicConv(32, 48, 3, padding=1), BasicConv(48, 64, 3, padding=1))
        self.conv = nn.Conv2d(128, 320, 1)

    def forward(self, x):
        y = self.conv(torch.cat([self.b0(x), self.b1(x), self.b2(x)], 1))
        return F.relu(y * self.scale + x)


class Mixed6a(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.b0 = BasicConv(320, 384, 3, stride=2)
        self.b1 = nn.Sequential(BasicConv(320, 256, 1), BasicConv(256, 256, 3, padding=1), BasicConv(256, 384, 3, stride=2))

    def forward(self, x):
        return torch.cat([self.b0(x), self.b1(x), F.max_pool2d(x, 3, 2)], 1)


class Block17(nn.Module):
    def __init__(self, scale: float = 0.10) -> None:
        super().__init__()
        self.scale = scale
        self.b0 = BasicConv(1088, 192, 1)
        self.b1 = nn.Sequential(BasicConv(1088, 128, 1), BasicConv(128, 160, (1, 7), padding=(0, 3)),
                                BasicConv(160, 192, (7, 1), padding=(3, 0)))
        self.conv = nn.Conv2d(384, 1088, 1)

    def forward(self, x):
        y = self.conv(torch.cat([self.b0(x), self.b1(x)], 1))
        return F.relu(y * self.scale + x)


class Mixed7a(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.b0 = nn.Sequential(BasicConv(1088, 256, 1), BasicConv(256, 384, 3, stride=2))
        self.b1 = nn.Sequential(BasicConv(1088, 256, 1), BasicConv(256, 288, 3, stride=2))
        self.b2 = nn.Sequential(BasicConv(1088, 256, 1), BasicConv(256, 288, 3, padding=1), BasicConv(288, 320, 3, stride=2))

    def forward(self, x):
        return torch.cat([self.b0(x), self.b1(x), self.b2(x), F.max_pool2d(x, 3, 2)], 1)


class Block8(nn.Module):
    def __init__(self, scale: float = 0.20, relu: bool = True) -> None:
        super().__init__()
        self.scale, self.relu = scale, relu
        self.b0 = BasicConv(2080, 192, 1)
        self.b1 = nn.Sequential(BasicConv(2080, 192, 1), BasicConv(192, 224, (1, 3), padding=(0, 1)),
                                BasicConv(224, 256, (3, 1), padding=(1, 0)))
        self.conv = nn.Conv2d(448, 2080, 1)

    def forward(self, x):
        y = self.conv(torch.cat([self.b0(x), self.b1(x)], 1)) * self.scale + x
        return F.relu(y) if self.relu else y


class InceptionResNetV2(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            BasicConv(3, 32, 3, stride=2), BasicConv(32, 32, 3), BasicConv(32, 64, 3, padding=1), nn.MaxPool2d(3, 2),
            BasicConv(64, 80, 1), BasicConv(80, 192, 3), nn.MaxPool2d(3, 2))
        self.body = nn.Sequential(
            Mixed5b(), *[Block35() for _ in range(10)], Mixed6a(), *[Block17() for _ in range(20)], Mixed7a(),
            *[Block8() for _ in range(9)], Block8(relu=False), BasicConv(2080, 1536, 1))
        self.fc = nn.Linear(1536, classes)

    def forward(self, x):
        x = self.body(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def inception_resnet_v2(batch: int = 32, size: int = 299):
    """Inception-ResNet-v2, batch 32 of 299x299 images, 1000 classes."""
    torch.manual_seed(0)
    model = InceptionResNetV2()
    x = torch.randn(batch, 3, size, size)
    labels = torch.randint(0, 1000, (batch,))
    return model, (x,), lambda logits: F.cross_entropy(logits, labels)


# ----- T5 v1.1-style encoder-decoder ---------------------------------------------------------------

class T5Norm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def relative_bucket(rel: torch.Tensor, bidirectional: bool, buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
    """T5's bucketing of key - query position differences (HF's _relative_position_bucket)."""
    out = torch.zeros_like(rel)
    if bidirectional:
        buckets //= 2
        out = out + (rel > 0).long() * buckets
        rel = rel.abs()
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    exact = buckets // 2
    small = rel < exact
    large = exact + (torch.log(rel.float() / exact) / math.log(max_distance / exact) * (buckets - exact)).long()
    large = torch.min(large, torch.full_like(large, buckets - 1))
    return out + torch.where(small, rel, large)


class T5Attention(nn.Module):
    def __init__(self, d: int, heads: int, bias_table: bool, bidirectional: bool) -> None:
        super().__init__()
        self.heads, self.bidirectional = heads, bidirectional
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.rel = nn.Embedding(32, heads) if bias_table else None
        self.drop = nn.Dropout(0.1)

    def position_bias(self, q_len: int, k_len: int, device) -> torch.Tensor:
        ctx = torch.arange(q_len, device=device)[:, None]
        mem = torch.arange(k_len, device=device)[None, :]
        buckets = relative_bucket(mem - ctx, self.bidirectional)
        return self.rel(buckets).permute(2, 0, 1).unsqueeze(0)    # [1, H, q, k]

    def forward(self, x, kv, bias):
        b, s, d = x.shape
        t = kv.shape[1]
        h = self.heads
        q = self.q(x).view(b, s, h, d // h).transpose(1, 2)
        k = self.k(kv).view(b, t, h, d // h).transpose(1, 2)
        v = self.v(kv).view(b, t, h, d // h).transpose(1, 2)
        w = q @ k.transpose(-1, -2) + bias                         # T5: no 1/sqrt(d) scaling
        y = self.drop(w.float().softmax(-1).type_as(w)) @ v
        return self.o(y.transpose(1, 2).reshape(b, s, d))


class T5FF(nn.Module):
    def __init__(self, d: int, ff: int) -> None:
        super().__init__()
        self.norm = T5Norm(d)
        self.wi0 = nn.Linear(d, ff, bias=False)
        self.wi1 = nn.Linear(d, ff, bias=False)
        self.wo = nn.Linear(ff, d, bias=False)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        y = self.norm(x)
        return x + self.drop(self.wo(self.drop(F.gelu(self.wi0(y), approximate="tanh") * self.wi1(y))))


class T5EncBlock(nn.Module):
    def __init__(self, d, heads, ff, first):
        super().__init__()
        self.norm = T5Norm(d)
        self.attn = T5Attention(d, heads, first, True)
        self.ff = T5FF(d, ff)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, bias):
        y = self.norm(x)
        x = x + self.drop(self.attn(y, y, bias))
        return self.ff(x)


class T5DecBlock(nn.Module):
    def __init__(self, d, heads, ff, first):
        super().__init__()
        self.norm1 = T5Norm(d)
        self.self_attn = T5Attention(d, heads, first, False)
        self.norm2 = T5Norm(d)
        self.cross = T5Attention(d, heads, False, True)
        self.ff = T5FF(d, ff)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, enc, self_bias, cross_bias):
        y = self.norm1(x)
        x = x + self.drop(self.self_attn(y, y, self_bias))
        x = x + self.drop(self.cross(self.norm2(x), enc, cross_bias))
        return self.ff(x)


class T5(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, ff: int) -> None:
        super().__init__()
        self.shared = nn.Embedding(vocab, d)
        self.enc = nn.ModuleList(T5EncBlock(d, heads, ff, i == 0) for i in range(layers))
        self.enc_norm = T5Norm(d)
        self.dec = nn.ModuleList(T5DecBlock(d, heads, ff, i == 0) for i in range(layers))
        self.dec_norm = T5Norm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.drop = nn.Dropout(0.1)

    def forward(self, src, tgt_in):
        s, t = src.shape[1], tgt_in.shape[1]
        x = self.drop(self.shared(src))
        enc_bias = self.enc[0].attn.position_bias(s, s, src.device)
        for blk in self.enc:
            x = blk(x, enc_bias)
        enc = self.drop(self.enc_norm(x))
        causal = torch.triu(torch.full((t, t), -1e9, device=src.device), diagonal=1)
        self_bias = self.dec[0].self_attn.position_bias(t, t, src.device) + causal
        cross_bias = torch.zeros(1, 1, t, s, device=src.device)
        y = self.drop(self.shared(tgt_in))
        for blk in self.dec:
            y = blk(y, enc, self_bias, cross_bias)
        return self.lm_head(self.drop(self.dec_norm(y)))


def t5_encdec(layers: int = 16, d: int = 512, heads: int = 8, ff: int = 1024, batch: int = 8, src_len: int = 256, tgt_len: int = 128, vocab: int = 32128):
    """T5 v1.1-style, 16 + 16 blocks, d 512, batch 8, 256 source / 128 target tokens."""
    torch.manual_seed(0)
    model = T5(vocab, d, layers, heads, ff)
    src = torch.randint(0, vocab, (batch, src_len))
    tgt = torch.randint(0, vocab, (batch, tgt_len + 1))
    tgt_in, tgt_out = tgt[:, :-1].contiguous(), tgt[:, 1:].contiguous()
    return model, (src, tgt_in), lambda logits: F.cross_entropy(logits.reshape(-1, vocab), tgt_out.reshape(-1))


# ----- the issue-16 size (30K-40K operators) ---------------------------------------------------------

def gpt_deep_160():
    """``gpt_deep`` with 160 blocks (a 52-layer-per-stage pipeline of a deep LLaMA): ~32K operators."""
    return gpt_deep(layers=160)


def gru_seq2seq_long():
    """``gru_seq2seq`` over 240 source and 200 target steps (document-level NMT): ~30K operators."""
    return gru_seq2seq(src_len=240, tgt_len=200)


def inception_resnet_v2_deep(batch: int = 32, size: int = 299):
    """Inception-ResNet-v2 with three times the repeated blocks (30 x Block35, 60 x Block17,
    30 x Block8): the same fork-joins, ~25K operators."""
    torch.manual_seed(0)
    model = InceptionResNetV2()
    body = list(model.body)
    model.body = nn.Sequential(
        body[0], *[Block35() for _ in range(30)], body[11], *[Block17() for _ in range(60)], body[32],
        *[Block8() for _ in range(29)], Block8(relu=False), body[-1])
    x = torch.randn(batch, 3, size, size)
    labels = torch.randint(0, 1000, (batch,))
    return model, (x,), lambda logits: F.cross_entropy(logits, labels)
