"""Real models for an eighth "realcheck" round (session 41): small training steps around features
real training code uses and no earlier round had. Built from code, random weights and inputs, no
downloads; each factory returns ``(model, example_inputs, loss_fn)`` (loss_fn None: the importer's
default loss), as in bench/real_models.py to real_models7.py.

    python -m placement.importers.torch bench/real_models8.py:distill_kd -o /tmp/rm8/distill_kd.json --devices 4

- ``distill_kd``: knowledge distillation: a frozen teacher CNN run under ``torch.no_grad()`` and a
  smaller student; loss = KL(student / T || teacher / T) * T^2 (``F.kl_div``, log-probabilities,
  temperature 4) + label-smoothing cross entropy (``label_smoothing=0.1``).
- ``simclr``: SimCLR: one encoder + projection head applied to two augmented views of the batch
  (weights shared across two passes), ``F.normalize``, the 2N x 2N cosine-similarity matrix, the
  diagonal masked out by ``masked_fill``, NT-Xent as a cross entropy over it.
- ``wgan_gp``: a WGAN-GP critic step: the critic on real and fake images and on random
  interpolates, whose input gradient comes from ``torch.autograd.grad(..., create_graph=True)``
  (a double backward in the step), penalty ``(||grad||_2 - 1)^2``.
- ``mean_teacher``: mean teacher (semi-supervised): the teacher's weights (frozen) are an EMA of
  the student's, updated in place under ``no_grad`` at the start of the step (``mul_``, ``add_``),
  then both run on the batch; loss = CE on the labelled half + MSE consistency of the softmaxes.
- ``mobilenet_ps``: MobileNetV2-style inverted residual blocks (1x1 expand, 3x3 depthwise
  ``groups=C``, ReLU6, 1x1 project, residual) with hardswish, then an ESPCN-style upsampler
  (``nn.PixelShuffle(2)``); L1 loss to a 2x target (super-resolution).
- ``gumbel_vae``: a categorical VAE: 8 latent variables of 16 classes sampled by
  ``F.gumbel_softmax(hard=True)`` (straight-through), KL to the uniform prior, BCE reconstruction.
- ``triplet``: metric learning: an embedding net on anchor, positive and negative batches (three
  passes, shared weights), ``nn.TripletMarginLoss(margin=0.2)``.
- ``convnext_droppath``: ConvNeXt blocks (7x7 depthwise conv, LayerNorm over channels through
  ``permute``, inverted MLP, layer scale), with stochastic depth (timm's ``drop_path``: a per-sample
  Bernoulli mask made by ``new_empty(...).bernoulli_(keep)`` and ``div_``). timm trains ConvNeXt with
  AdamW and an EMA of the weights: ``--optimizer adamw --ema 0.9999``.
- ``mixup``: mixup on a CNN: the batch mixed with a ``torch.randperm`` permutation of itself (a
  random permutation inside the step), the loss the same mix of the two targets' cross entropies.
- ``swin_window``: Swin-style shifted-window attention: ``torch.roll`` by half a window, window
  partition by ``view``/``permute``, relative position bias gathered from a table by a buffer index,
  an attention mask for the shifted windows, reverse roll.
- ``mlm_ignore_index``: a BERT-style masked-LM step whose labels are -100 except at the 15% masked
  positions (``F.cross_entropy(ignore_index=-100)``), for ``--optimizer adamw`` (real BERT training).
- ``mlm_accumulate``: the same MLM at batch 32 taking its labels as an input and returning its loss
  (Hugging Face style), for ``--accumulate 4 --optimizer adamw``: gradient accumulation over four
  micro-batches of 8, as Hugging Face's Trainer runs ``gradient_accumulation_steps``.
- ``amp_rnn``: fp16 ``torch.autocast`` over a GRU-style cell written with ``nn.Linear`` and
  unrolled over 32 steps: every step reads the same weights in half precision (autocast's cast
  cache).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)


def _conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


def _cnn(widths: tuple[int, ...], classes: int = 10) -> nn.Sequential:
    layers: list[nn.Module] = []
    cin = 3
    for i, w in enumerate(widths):
        layers += [_conv_bn(cin, w, 2 if i else 1), _conv_bn(w, w)]
        cin = w
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))


# ----- distill_kd -------------------------------------------------------------------------------

class _Distill(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.teacher = _cnn((64, 128, 256))
        self.student = _cnn((16, 32, 64))
        self.teacher.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            t = self.teacher(x)
        return self.student(x), t


def distill_kd():
    """Frozen teacher (no_grad) + student; KL at temperature 4 plus label-smoothing CE; batch 32 x 32^2."""
    model = _Distill()
    model.train()
    model.teacher.eval()  # a teacher runs in eval mode (batch norm on its running statistics)
    labels = torch.randint(0, 10, (32,))
    temp = 4.0

    def loss_fn(out):
        s, t = out
        kd = F.kl_div(F.log_softmax(s / temp, -1), F.log_softmax(t / temp, -1), reduction="batchmean", log_target=True)
        return kd * temp * temp + F.cross_entropy(s, labels, label_smoothing=0.1)

    return model, (torch.randn(32, 3, 32, 32),), loss_fn


# ----- simclr -----------------------------------------------------------------------------------

class _SimClr(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = _cnn((32, 64, 128), classes=128)
        self.proj = nn.Sequential(nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 64))

    def forward(self, v1: torch.Tensor, v2: torch.Tensor) -> torch.Tensor:
        z = torch.cat([self.proj(self.encoder(v1)), self.proj(self.encoder(v2))])
        z = F.normalize(z, dim=1)
        sim = z @ z.t() / 0.5  # temperature 0.5
        eye = torch.eye(z.shape[0], dtype=torch.bool, device=z.device)
        return sim.masked_fill(eye, float("-inf"))


def simclr():
    """SimCLR: two views of 16 images through one encoder, NT-Xent over the 32 x 32 similarities."""
    n = 16
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    return _SimClr(), (torch.randn(n, 3, 32, 32), torch.randn(n, 3, 32, 32)), lambda sim: F.cross_entropy(sim, targets)


# ----- wgan_gp ----------------------------------------------------------------------------------

class _Critic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 32, 4, 2, 1), nn.LeakyReLU(0.2), nn.Conv2d(32, 64, 4, 2, 1), nn.LeakyReLU(0.2),
            nn.Conv2d(64, 128, 4, 2, 1), nn.LeakyReLU(0.2), nn.Flatten(), nn.Linear(128 * 4 * 4, 1))

    def forward(self, real: torch.Tensor, fake: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
        grad, = torch.autograd.grad(self.net(mixed).sum(), mixed, create_graph=True)
        penalty = ((grad.flatten(1).norm(2, dim=1) - 1) ** 2).mean()
        return self.net(fake).mean() - self.net(real).mean() + 10.0 * penalty


def wgan_gp():
    """WGAN-GP critic step (batch 16 of 32^2): gradient penalty by a double backward."""
    b = 16
    return _Critic(), (torch.randn(b, 3, 32, 32), torch.randn(b, 3, 32, 32), torch.rand(b, 1, 1, 1)), lambda loss: loss


# ----- mean_teacher -----------------------------------------------------------------------------

class _MeanTeacher(nn.Module):
    def __init__(self, decay: float = 0.99) -> None:
        super().__init__()
        self.student = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Dropout(0.1), nn.Linear(512, 512), nn.ReLU(),
                                     nn.Linear(512, 10))
        self.teacher = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Dropout(0.1), nn.Linear(512, 512), nn.ReLU(),
                                     nn.Linear(512, 10))
        self.teacher.load_state_dict(self.student.state_dict())
        self.teacher.requires_grad_(False)
        self.decay = decay

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():  # the EMA of the previous step's weights, as the step's first act
            for t, s in zip(self.teacher.parameters(), self.student.parameters()):
                t.mul_(self.decay).add_(s, alpha=1 - self.decay)
            t_out = self.teacher(x)
        return self.student(x), t_out


def mean_teacher():
    """Mean teacher (EMA teacher updated in place), MLP 256-512-512-10, batch 128 (half labelled)."""
    labels = torch.randint(0, 10, (64,))

    def loss_fn(out):
        s, t = out
        return F.cross_entropy(s[:64], labels) + F.mse_loss(s.softmax(-1), t.softmax(-1))

    return _MeanTeacher(), (torch.randn(128, 256),), loss_fn


# ----- mobilenet_ps -----------------------------------------------------------------------------

class _InvertedResidual(nn.Module):
    def __init__(self, c: int, expand: int = 4) -> None:
        super().__init__()
        h = c * expand
        self.block = nn.Sequential(
            nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, h, 3, 1, 1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x)


class _MobileSr(nn.Module):
    def __init__(self, c: int = 32) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 1, 1), nn.Hardswish())
        self.body = nn.Sequential(*[_InvertedResidual(c) for _ in range(3)])
        self.up = nn.Sequential(nn.Conv2d(c, 3 * 4, 3, 1, 1), nn.PixelShuffle(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(self.body(self.stem(x)))


def mobilenet_ps():
    """Depthwise-separable inverted residuals + PixelShuffle(2) upsampler; batch 8 of 32^2 -> 64^2."""
    target = torch.rand(8, 3, 64, 64)
    return _MobileSr(), (torch.rand(8, 3, 32, 32),), lambda y: F.l1_loss(y, target)


# ----- gumbel_vae -------------------------------------------------------------------------------

class _GumbelVae(nn.Module):
    def __init__(self, latents: int = 8, classes: int = 16) -> None:
        super().__init__()
        self.latents, self.classes = latents, classes
        self.enc = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, latents * classes))
        self.dec = nn.Sequential(nn.Linear(latents * classes, 512), nn.ReLU(), nn.Linear(512, 784))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.enc(x).view(-1, self.latents, self.classes)
        z = F.gumbel_softmax(logits, tau=1.0, hard=True)
        recon = self.dec(z.flatten(1))
        q = logits.softmax(-1)
        kl = (q * (q.clamp_min(1e-10).log() + torch.log(torch.tensor(float(self.classes))))).sum((1, 2)).mean()
        return F.binary_cross_entropy_with_logits(recon, x, reduction="sum") / x.shape[0] + kl


def gumbel_vae():
    """Categorical VAE with hard Gumbel-softmax samples; batch 64 of binarised 28^2 images."""
    return _GumbelVae(), ((torch.rand(64, 784) > 0.5).float(),), lambda loss: loss


# ----- triplet ----------------------------------------------------------------------------------

class _Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = _cnn((32, 64), classes=64)

    def forward(self, a: torch.Tensor, p: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(F.normalize(self.net(x), dim=1) for x in (a, p, n))


def triplet():
    """Triplet margin loss over three passes of one embedding CNN; batch 16 x 3 of 32^2."""
    loss = nn.TripletMarginLoss(margin=0.2)
    return _Embed(), tuple(torch.randn(16, 3, 32, 32) for _ in range(3)), lambda out: loss(*out)


# ----- convnext_droppath ------------------------------------------------------------------------

def _drop_path(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """timm's drop_path: keep each sample's residual branch with probability 1 - p, rescaled."""
    if p == 0.0 or not training:
        return x
    keep = 1 - p
    mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
    mask.div_(keep)
    return x * mask


class _ConvNextBlock(nn.Module):
    def __init__(self, c: int, drop: float) -> None:
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c, eps=1e-6)
        self.pw1 = nn.Linear(c, 4 * c)
        self.pw2 = nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(1e-6 * torch.ones(c))
        self.drop = drop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.gamma * self.pw2(F.gelu(self.pw1(self.norm(y))))
        return x + _drop_path(y.permute(0, 3, 1, 2), self.drop, self.training)


class _ConvNext(nn.Module):
    def __init__(self, c: int = 64, depth: int = 4) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, c, 4, 4)
        self.blocks = nn.Sequential(*[_ConvNextBlock(c, 0.1 * i / depth) for i in range(depth)])
        self.head = nn.Linear(c, 100)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


def convnext_droppath():
    """4 ConvNeXt blocks (d 64) with stochastic depth; batch 16 of 64^2."""
    labels = torch.randint(0, 100, (16,))
    return _ConvNext(), (torch.randn(16, 3, 64, 64),), lambda logits: F.cross_entropy(logits, labels)


# ----- mixup ------------------------------------------------------------------------------------

class _Mixup(nn.Module):
    def __init__(self, lam: float = 0.7) -> None:
        super().__init__()
        self.net = _cnn((32, 64, 128))
        self.lam = lam

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        perm = torch.randperm(x.shape[0], device=x.device)
        mixed = self.lam * x + (1 - self.lam) * x[perm]
        return self.net(mixed), y, y[perm]


def mixup():
    """Mixup (lambda 0.7) with an in-step random permutation; CNN, batch 32 of 32^2."""
    lam = 0.7
    return (_Mixup(lam), (torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))),
            lambda out: lam * F.cross_entropy(out[0], out[1]) + (1 - lam) * F.cross_entropy(out[0], out[2]))


# ----- swin_window ------------------------------------------------------------------------------

class _SwinBlock(nn.Module):
    def __init__(self, d: int, heads: int, size: int, window: int, shift: int) -> None:
        super().__init__()
        self.d, self.heads, self.size, self.ws, self.shift = d, heads, size, window, shift
        self.norm1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.bias_table = nn.Parameter(0.02 * torch.randn((2 * window - 1) ** 2, heads))
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window - 1)
        self.register_buffer("rel_index", rel[..., 0] * (2 * window - 1) + rel[..., 1], persistent=False)
        if shift:
            img = torch.zeros(size, size)
            cnt = 0
            for hs in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
                for wsl in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
                    img[hs, wsl] = cnt
                    cnt += 1
            win = self._partition(img[None, :, :, None]).squeeze(-1)
            mask = (win[:, None, :] - win[:, :, None]) != 0
            self.register_buffer("attn_mask", torch.zeros(mask.shape).masked_fill(mask, -100.0), persistent=False)
        else:
            self.attn_mask = None

    def _partition(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        x = x.view(b, h // self.ws, self.ws, w // self.ws, self.ws, c).permute(0, 1, 3, 2, 4, 5)
        return x.reshape(-1, self.ws * self.ws, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [b, size, size, d]
        b = x.shape[0]
        y = self.norm1(x)
        if self.shift:
            y = torch.roll(y, (-self.shift, -self.shift), (1, 2))
        win = self._partition(y)  # [b * nw, ws^2, d]
        n = win.shape[1]
        q, k, v = self.qkv(win).view(-1, n, 3, self.heads, self.d // self.heads).permute(2, 0, 3, 1, 4)
        attn = (q * (self.d // self.heads) ** -0.5) @ k.transpose(-2, -1)
        attn = attn + self.bias_table[self.rel_index.view(-1)].view(n, n, -1).permute(2, 0, 1)[None]
        if self.attn_mask is not None:
            nw = self.attn_mask.shape[0]
            attn = attn.view(b, nw, self.heads, n, n) + self.attn_mask[None, :, None]
            attn = attn.view(-1, self.heads, n, n)
        out = (attn.softmax(-1) @ v).transpose(1, 2).reshape(-1, n, self.d)
        out = self.proj(out).view(b, self.size // self.ws, self.size // self.ws, self.ws, self.ws, self.d)
        out = out.permute(0, 1, 3, 2, 4, 5).reshape(b, self.size, self.size, self.d)
        if self.shift:
            out = torch.roll(out, (self.shift, self.shift), (1, 2))
        x = x + out
        return x + self.mlp(self.norm2(x))


class _Swin(nn.Module):
    def __init__(self, d: int = 64, size: int = 16, window: int = 4) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, d, 4, 4)
        self.blocks = nn.Sequential(_SwinBlock(d, 4, size, window, 0), _SwinBlock(d, 4, size, window, window // 2))
        self.head = nn.Linear(d, 100)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.blocks(self.embed(x).permute(0, 2, 3, 1))
        return self.head(y.mean((1, 2)))


def swin_window():
    """Two Swin blocks (regular and shifted windows, 4 x 4, d 64, 4 heads) on 16 x 16 patches; batch 8."""
    labels = torch.randint(0, 100, (8,))
    return _Swin(), (torch.randn(8, 3, 64, 64),), lambda logits: F.cross_entropy(logits, labels)


# ----- mlm_ignore_index -------------------------------------------------------------------------

class _Mlm(nn.Module):
    def __init__(self, vocab: int = 4000, d: int = 128, layers: int = 2, seq: int = 64) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(0.02 * torch.randn(seq, d))
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.1, batch_first=True, norm_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.encoder(self.tok(ids) + self.pos))
        return h @ self.tok.weight.t()  # tied decoder


def mlm_ignore_index():
    """BERT-style MLM (2 pre-norm layers, d 128, vocab 4000, tied decoder), labels -100 off the 15%
    masked positions; batch 8 x 64. Real BERT trains it with AdamW: --optimizer adamw."""
    ids = torch.randint(0, 4000, (8, 64))
    masked = torch.rand(8, 64) < 0.15
    labels = torch.where(masked, ids, torch.full_like(ids, -100))
    return _Mlm(), (ids,), lambda logits: F.cross_entropy(logits.reshape(-1, 4000), labels.reshape(-1), ignore_index=-100)


# ----- mlm_accumulate ---------------------------------------------------------------------------

class _MlmWithLoss(nn.Module):
    """The MLM above taking its labels as an input and returning its loss, as Hugging Face models do
    (so gradient accumulation can split labels with the batch)."""

    def __init__(self) -> None:
        super().__init__()
        self.mlm = _Mlm()

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.mlm(ids).reshape(-1, 4000), labels.reshape(-1), ignore_index=-100)


def mlm_accumulate():
    """``mlm_ignore_index`` at batch 32 x 64 with labels as an input, for ``--accumulate 4
    --optimizer adamw`` (Hugging Face's Trainer: gradient_accumulation_steps, AdamW)."""
    ids = torch.randint(0, 4000, (32, 64))
    labels = torch.where(torch.rand(32, 64) < 0.15, ids, torch.full_like(ids, -100))
    return _MlmWithLoss(), (ids, labels), lambda loss: loss


# ----- amp_rnn ----------------------------------------------------------------------------------

class _AmpRnn(nn.Module):
    """A GRU-style recurrent cell written with nn.Linear (gates z, r, candidate) unrolled over 32
    steps under fp16 autocast: every step reads the same weights in half precision."""

    def __init__(self, d_in: int = 128, d: int = 512, classes: int = 10) -> None:
        super().__init__()
        self.ih = nn.Linear(d_in, 3 * d)
        self.hh = nn.Linear(d, 3 * d)
        self.head = nn.Linear(d, classes)
        self.d = d

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [t, b, d_in]
        with torch.autocast("cpu", dtype=torch.float16):
            h = x.new_zeros(x.shape[1], self.d)
            for xt in x.unbind(0):
                zi, ri, ni = self.ih(xt).chunk(3, -1)
                zh, rh, nh = self.hh(h).chunk(3, -1)
                z, r = torch.sigmoid(zi + zh), torch.sigmoid(ri + rh)
                h = (1 - z) * torch.tanh(ni + r * nh) + z * h
            return self.head(h).float()


def amp_rnn():
    """fp16 autocast over an unrolled 32-step recurrent cell (d 512, batch 32)."""
    labels = torch.randint(0, 10, (32,))
    return _AmpRnn(), (torch.randn(32, 32, 128),), lambda logits: F.cross_entropy(logits, labels)
