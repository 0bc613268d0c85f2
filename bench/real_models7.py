"""Real models for a seventh "realcheck" round (session 40): small training steps around PyTorch
features today's training code uses and no earlier round had. Built from code, random weights and
inputs, no downloads; each factory returns ``(model, example_inputs, loss_fn)`` (loss_fn None: the
importer's default loss), as in bench/real_models.py to real_models6.py.

    python -m placement.importers.torch bench/real_models7.py:llama_gqa -o /tmp/rm7/llama_gqa.json --devices 4

- ``llama_gqa``: two LLaMA-style decoder blocks: PyTorch's own ``nn.RMSNorm``, rotary position
  embeddings through complex numbers (``torch.polar``, ``view_as_complex``, ``view_as_real``),
  grouped-query attention (8 query heads, 2 key/value heads, K and V widened by
  ``repeat_interleave``), causal ``scaled_dot_product_attention``, a SwiGLU MLP, an untied LM head.
- ``lora``: LoRA fine-tuning: a 2-layer pre-norm transformer (embedding, attention, MLP) whose every
  base weight is frozen (``requires_grad_(False)``), with rank-8 adapters (A, B) on the query and
  value projections: only the adapters get gradients and Adam states.
- ``grad_reversal``: domain-adversarial training (DANN): a shared feature extractor, a label head,
  and a domain head behind a gradient-reversal layer (a custom ``torch.autograd.Function`` taking
  a Python float, returning ``None`` as its gradient); the loss is the sum of both heads'.
- ``vq_vae``: a VQ-VAE quantiser: nearest codebook entry by ``cdist`` + ``argmin``, the
  straight-through estimator ``z + (zq - z).detach()``, codebook and commitment losses.
- ``sn_discriminator``: a GAN discriminator with ``torch.nn.utils.parametrizations.spectral_norm``
  on its convolutions (power iteration updating its ``_u``/``_v`` vectors in the forward) and
  ``weight_norm`` on its last linear layer.
- ``diffusion_unet``: a small diffusion UNet block: ``GroupNorm``, SiLU, a sinusoidal timestep
  embedding projected and added to the feature maps, a downsample/upsample with a skip, and a
  self-attention over the 16 x 16 pixels; the loss is the MSE to the noise.
- ``multitask_dict``: a model returning a dict of two heads' outputs (10-way classification and
  4-value box regression); the loss is ``CE + 0.5 * smooth L1`` on the dict.
- ``packed_gru``: ``nn.utils.rnn.pack_padded_sequence`` through an ``nn.GRU`` (per-sequence
  lengths: data-dependent sizes), then ``pad_packed_sequence``.
- ``sparse_embedding``: ``nn.Embedding(sparse=True)`` (sparse gradients) with a linear head, for
  ``--optimizer sgd`` (Adam refuses sparse gradients).
- ``channels_last_cnn``: a small CNN and its batch in ``torch.channels_last`` memory format.
- ``vae_distributions``: a convolutional VAE written with ``torch.distributions``: the posterior a
  ``Normal`` sampled by ``rsample`` (reparameterisation), ``kl_divergence`` to a standard normal
  prior, a ``Bernoulli(logits=...)`` likelihood of binarised images (the negative ELBO).
- ``frozen_bn_finetune``: fine-tuning on a frozen convolutional backbone (conv + batch norm blocks,
  ``requires_grad_(False)``, put in eval mode after ``model.train()`` so its batch norm uses its
  running statistics) with a trainable head that has its own batch norm.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Bernoulli, Normal, kl_divergence
from torch.nn.utils import parametrizations
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


# ----- llama_gqa --------------------------------------------------------------------------------

def _rotary(t: int, head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """The rotary frequencies as unit complex numbers, [t, head_dim / 2] (LLaMA's freqs_cis)."""
    inv = 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(t).float(), inv)
    return torch.polar(torch.ones_like(angles), angles)


def _apply_rotary(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """x: [b, t, h, hd] rotated pairwise by freqs [t, hd / 2], through complex multiplication."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs[None, :, None, :]).flatten(3).type_as(x)


class _LlamaBlock(nn.Module):
    def __init__(self, d: int, heads: int, kv_heads: int, hidden: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.attn_norm = nn.RMSNorm(d, eps=1e-6)
        self.wq = nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.wv = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.mlp_norm = nn.RMSNorm(d, eps=1e-6)
        self.w1 = nn.Linear(d, hidden, bias=False)
        self.w3 = nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.attn_norm(x)
        q = _apply_rotary(self.wq(h).view(b, t, self.heads, self.hd), freqs)
        k = _apply_rotary(self.wk(h).view(b, t, self.kv_heads, self.hd), freqs)
        v = self.wv(h).view(b, t, self.kv_heads, self.hd)
        rep = self.heads // self.kv_heads
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.wo(y.transpose(1, 2).reshape(b, t, d))
        h = self.mlp_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class _Llama(nn.Module):
    def __init__(self, vocab: int = 1000, d: int = 128, heads: int = 8, kv_heads: int = 2, layers: int = 2, t: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(_LlamaBlock(d, heads, kv_heads, 344) for _ in range(layers))
        self.norm = nn.RMSNorm(d, eps=1e-6)
        self.head = nn.Linear(d, vocab, bias=False)
        self.register_buffer("freqs", _rotary(t, d // heads), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        freqs = self.freqs[: ids.shape[1]]
        for block in self.blocks:
            x = block(x, freqs)
        return self.head(self.norm(x))


def llama_gqa():
    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (4, 65))
    inputs, targets = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    return _Llama(), (inputs,), lambda logits: F.cross_entropy(logits.reshape(-1, 1000), targets.reshape(-1))


# ----- lora -------------------------------------------------------------------------------------

class _LoRALinear(nn.Module):
    """A frozen linear layer plus a trainable low-rank update B @ A, scaled by alpha / r."""

    def __init__(self, base: nn.Linear, r: int = 8, alpha: float = 16.0) -> None:
        super().__init__()
        self.base = base
        self.lora_a = nn.Parameter(torch.randn(r, base.in_features) / math.sqrt(base.in_features))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, r))
        self.scale = alpha / r

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_a.t() @ self.lora_b.t()) * self.scale


class _LoRABlock(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.norm2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.norm1(x)
        q, k, v = (m(h).view(b, t, self.heads, -1).transpose(1, 2) for m in (self.q, self.k, self.v))
        x = x + self.o(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class _LoRAModel(nn.Module):
    def __init__(self, vocab: int = 2000, d: int = 256, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(_LoRABlock(d, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def lora():
    torch.manual_seed(0)
    model = _LoRAModel()
    model.requires_grad_(False)  # the pretrained base is frozen
    for block in model.blocks:
        block.q = _LoRALinear(block.q)
        block.v = _LoRALinear(block.v)
    ids = torch.randint(0, 2000, (4, 65))
    inputs, targets = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    return model, (inputs,), lambda logits: F.cross_entropy(logits.reshape(-1, 2000), targets.reshape(-1))


# ----- grad_reversal ----------------------------------------------------------------------------

class _GradReverse(torch.autograd.Function):
    """Identity forward; the backward multiplies the gradient by -alpha (Ganin & Lempitsky 2015)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, alpha: float) -> torch.Tensor:
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad.neg() * ctx.alpha, None


class _Dann(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 32, 5), nn.MaxPool2d(2), nn.ReLU(), nn.Conv2d(32, 48, 5), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten())
        self.label = nn.Sequential(nn.Linear(48 * 4 * 4, 100), nn.ReLU(), nn.Linear(100, 10))
        self.domain = nn.Sequential(nn.Linear(48 * 4 * 4, 100), nn.ReLU(), nn.Linear(100, 2))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.features(x)
        return self.label(f), self.domain(_GradReverse.apply(f, 0.5))


def grad_reversal():
    torch.manual_seed(0)
    x = torch.randn(32, 3, 28, 28)
    labels, domains = torch.randint(0, 10, (32,)), torch.randint(0, 2, (32,))
    return _Dann(), (x,), lambda out: F.cross_entropy(out[0], labels) + F.cross_entropy(out[1], domains)


# ----- vq_vae -----------------------------------------------------------------------------------

class _VqVae(nn.Module):
    def __init__(self, codes: int = 256, d: int = 64) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 64, 4, 2, 1), nn.ReLU(), nn.Conv2d(64, d, 4, 2, 1))
        self.codebook = nn.Embedding(codes, d)
        self.dec = nn.Sequential(nn.ConvTranspose2d(d, 64, 4, 2, 1), nn.ReLU(), nn.ConvTranspose2d(64, 3, 4, 2, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.enc(x)
        b, d, h, w = z.shape
        flat = z.permute(0, 2, 3, 1).reshape(-1, d)
        idx = torch.cdist(flat, self.codebook.weight).argmin(dim=1)
        zq = self.codebook(idx).view(b, h, w, d).permute(0, 3, 1, 2)
        codebook_loss = F.mse_loss(zq, z.detach())
        commitment = F.mse_loss(z, zq.detach())
        zq = z + (zq - z).detach()  # straight-through estimator
        return F.mse_loss(self.dec(zq), x) + codebook_loss + 0.25 * commitment


def vq_vae():
    torch.manual_seed(0)
    return _VqVae(), (torch.randn(8, 3, 32, 32),), lambda loss: loss


# ----- sn_discriminator -------------------------------------------------------------------------

class _SnDiscriminator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        sn = parametrizations.spectral_norm
        self.convs = nn.Sequential(sn(nn.Conv2d(3, 32, 4, 2, 1)), nn.LeakyReLU(0.2), sn(nn.Conv2d(32, 64, 4, 2, 1)), nn.LeakyReLU(0.2),
                                   sn(nn.Conv2d(64, 128, 4, 2, 1)), nn.LeakyReLU(0.2), nn.Flatten())
        self.out = parametrizations.weight_norm(nn.Linear(128 * 4 * 4, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.convs(x))


def sn_discriminator():
    torch.manual_seed(0)
    real = torch.randn(16, 3, 32, 32)
    return _SnDiscriminator(), (real,), lambda logits: F.softplus(-logits).mean()  # non-saturating loss on real images


# ----- diffusion_unet ---------------------------------------------------------------------------

def _timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """The sinusoidal embedding of integer timesteps (DDPM / Transformer positions), [b, dim]."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class _ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, tdim: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(8, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(tdim, cout)
        self.norm2 = nn.GroupNorm(8, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class _PixelAttention(nn.Module):
    def __init__(self, c: int, heads: int = 4) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(8, c)
        self.qkv = nn.Conv2d(c, 3 * c, 1)
        self.proj = nn.Conv2d(c, c, 1)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, self.heads, c // self.heads, h * w).transpose(-1, -2).unbind(1)
        y = F.scaled_dot_product_attention(q, k, v)
        return x + self.proj(y.transpose(-1, -2).reshape(b, c, h, w))


class _TinyUNet(nn.Module):
    def __init__(self, c: int = 64, tdim: int = 128) -> None:
        super().__init__()
        self.tdim = tdim
        self.time = nn.Sequential(nn.Linear(tdim, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.inp = nn.Conv2d(3, c, 3, padding=1)
        self.down = _ResBlock(c, c, tdim)
        self.pool = nn.Conv2d(c, c, 3, stride=2, padding=1)
        self.mid = _ResBlock(c, 2 * c, tdim)
        self.attn = _PixelAttention(2 * c)
        self.up = _ResBlock(3 * c, c, tdim)
        self.out = nn.Sequential(nn.GroupNorm(8, c), nn.SiLU(), nn.Conv2d(c, 3, 3, padding=1))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        temb = self.time(_timestep_embedding(t, self.tdim))
        h0 = self.down(self.inp(x), temb)
        h = self.attn(self.mid(self.pool(h0), temb))
        h = F.interpolate(h, scale_factor=2, mode="nearest")
        return self.out(self.up(torch.cat([h, h0], dim=1), temb))


def diffusion_unet():
    torch.manual_seed(0)
    x0 = torch.randn(4, 3, 32, 32)
    noise = torch.randn_like(x0)
    t = torch.randint(0, 1000, (4,))
    alpha_bar = torch.cos(t.float() / 1000 * math.pi / 2)[:, None, None, None] ** 2
    noisy = alpha_bar.sqrt() * x0 + (1 - alpha_bar).sqrt() * noise
    return _TinyUNet(), (noisy, t), lambda pred: F.mse_loss(pred, noise)


# ----- multitask_dict ---------------------------------------------------------------------------

class _MultiTask(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.cls = nn.Linear(64, 10)
        self.box = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        f = self.backbone(x)
        return {"logits": self.cls(f), "boxes": self.box(f).sigmoid()}


def multitask_dict():
    torch.manual_seed(0)
    labels, boxes = torch.randint(0, 10, (16,)), torch.rand(16, 4)
    return _MultiTask(), (torch.randn(16, 3, 32, 32),), lambda out: F.cross_entropy(out["logits"], labels) + 0.5 * F.smooth_l1_loss(out["boxes"], boxes)


# ----- packed_gru -------------------------------------------------------------------------------

class _PackedGru(nn.Module):
    def __init__(self, vocab: int = 1000, d: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d, padding_idx=0)
        self.rnn = nn.GRU(d, d, batch_first=True)
        self.cls = nn.Linear(d, 5)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = pack_padded_sequence(self.embed(ids), lengths, batch_first=True, enforce_sorted=False)
        out, h = self.rnn(packed)
        padded, _ = pad_packed_sequence(out, batch_first=True, total_length=ids.shape[1])
        return self.cls(h[-1]) + 0 * padded.sum()


def packed_gru():
    torch.manual_seed(0)
    lengths = torch.tensor([20, 17, 12, 9, 20, 5, 3, 14])
    ids = torch.randint(1, 1000, (8, 20)) * (torch.arange(20)[None] < lengths[:, None])
    return _PackedGru(), (ids, lengths), None


# ----- sparse_embedding -------------------------------------------------------------------------

class _SparseBag(nn.Module):
    def __init__(self, vocab: int = 50000, d: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d, sparse=True)
        self.cls = nn.Linear(d, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.cls(self.embed(ids).mean(dim=1))


def sparse_embedding():
    torch.manual_seed(0)
    labels = torch.randint(0, 2, (32,))
    return _SparseBag(), (torch.randint(0, 50000, (32, 20)),), lambda logits: F.cross_entropy(logits, labels)


# ----- channels_last_cnn ------------------------------------------------------------------------

class _Cnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                                 nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                                 nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def channels_last_cnn():
    torch.manual_seed(0)
    model = _Cnn().to(memory_format=torch.channels_last)
    x = torch.randn(16, 3, 32, 32).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 10, (16,))
    return model, (x,), lambda logits: F.cross_entropy(logits, labels)


# ----- vae_distributions ------------------------------------------------------------------------

class _Vae(nn.Module):
    def __init__(self, z: int = 32) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(1, 32, 4, 2, 1), nn.ReLU(), nn.Conv2d(32, 64, 4, 2, 1), nn.ReLU(), nn.Flatten(),
                                 nn.Linear(64 * 7 * 7, 2 * z))
        self.dec = nn.Sequential(nn.Linear(z, 64 * 7 * 7), nn.ReLU(), nn.Unflatten(1, (64, 7, 7)),
                                 nn.ConvTranspose2d(64, 32, 4, 2, 1), nn.ReLU(), nn.ConvTranspose2d(32, 1, 4, 2, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mu, log_std = self.enc(x).chunk(2, dim=-1)
        posterior = Normal(mu, log_std.exp())
        z = posterior.rsample()
        prior = Normal(torch.zeros_like(mu), torch.ones_like(mu))
        nll = -Bernoulli(logits=self.dec(z)).log_prob(x).sum(dim=(1, 2, 3))
        return (nll + kl_divergence(posterior, prior).sum(-1)).mean()  # the negative ELBO


def vae_distributions():
    torch.manual_seed(0)
    x = (torch.rand(16, 1, 28, 28) > 0.5).float()  # binarised images
    return _Vae(), (x,), lambda loss: loss


# ----- frozen_bn_finetune -----------------------------------------------------------------------

def _conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class _FineTune(nn.Module):
    def __init__(self, classes: int = 20) -> None:
        super().__init__()
        self.backbone = nn.Sequential(_conv_bn(3, 32, 2), _conv_bn(32, 32), _conv_bn(32, 64, 2), _conv_bn(64, 64), _conv_bn(64, 128, 2))
        self.head = nn.Sequential(_conv_bn(128, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(128, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def frozen_bn_finetune():
    torch.manual_seed(0)
    model = _FineTune()
    model.train()
    model.backbone.requires_grad_(False)
    model.backbone.eval()  # frozen batch norm: running statistics, no updates
    labels = torch.randint(0, 20, (16,))
    return model, (torch.randn(16, 3, 64, 64),), lambda logits: F.cross_entropy(logits, labels)
