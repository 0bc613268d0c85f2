"""Real models for a fourth "realcheck" round: small training steps (500-5,000 ATen operators) of
model families the importer and ``solve`` had not been tried on, chosen for the unusual operators
real users write. Built from code, random weights and inputs, no downloads; same convention as
bench/real_models.py, real_models2.py and real_models3.py: each factory returns
``(model, example_inputs, loss_fn)``.

    python -m placement.importers.torch bench/real_models4.py:gnn -o /tmp/rm4/gnn.json --devices 4

- ``gnn``: a graph neural network for node classification on a random graph (4,000 nodes, 40,000
  directed edges given as an ``edge_index`` input tensor): input projection, then six
  message-passing layers of three kinds with residuals: GCN (Kipf & Welling 2017; symmetric
  degree normalisation, messages summed with ``scatter_add``), GraphSAGE-mean (Hamilton et al.
  2017; ``index_select`` of source features, ``index_add_`` into a zero buffer, divided by the
  in-degree) and GAT-style edge softmax (Velickovic et al. 2018; per-edge scores, per-destination
  max by ``scatter_reduce(amax)``, ``exp``, denominators by ``index_add_``); cross entropy on a
  fixed subset of "train" nodes picked by ``index_select``. Stresses: gather/scatter operators
  over an [E, d] edge tensor 10x larger than the node tensor, in-place scatters into fresh
  buffers, and their backward (``index_add`` / ``gather`` / ``scatter_reduce`` backward).
- ``dlrm``: a DLRM-style recommender (Naumov et al. 2019, Criteo layout): 13 dense features
  through a bottom MLP 512-256-128-64, 26 sparse features through 26 ``nn.EmbeddingBag`` tables
  (mode ``sum``, 1,000-100,000 rows x 64) fed with flat indices plus per-sample ``offsets``
  (variable-length bags), pairwise dot-product interaction (``torch.bmm`` of the 27 feature
  vectors with themselves, strictly upper triangle picked by ``triu_indices`` advanced indexing),
  top MLP 512-256-1, ``binary_cross_entropy_with_logits``; batch 512. Stresses: 26 independent
  embedding branches (wide fan-in into one ``cat``), parameters that dwarf activations (the
  tables with Adam's states are ~1 GB), ``_embedding_bag`` and its dense backward.
- ``swin``: a Swin Transformer stack (Liu et al. 2021): 4x4 patch embedding of 112x112 images,
  three stages (depths 2-2-2, dims 64-128-256, heads 2-4-8) with patch merging (strided slices
  ``x[:, 0::2, 1::2]`` + cat), windowed attention on 7x7 windows (window partition / reverse via
  ``view`` + ``permute``), every second block shifted by ``torch.roll``, its attention mask built
  in the forward from region ids with ``masked_fill``, learned relative position bias gathered
  from a table by an index buffer; batch 8, 100 classes. Stresses: ``roll`` (and its backward,
  a roll the other way), many reshapes that are not pure views (contiguous copies after
  permute), a bias-table gather shared by every window.
- ``convnext``: ConvNeXt (Liu et al. 2022) at a small scale: 4x4 stride-4 stem, stages of depths
  2-2-4-2 and dims 48-96-192-384 with channels-first LayerNorm + 2x2 stride-2 downsampling, each
  block a depthwise 7x7 conv, permute to channels-last, LayerNorm, Linear 4x, GELU, Linear, layer
  scale (a learned per-channel gamma), permute back, residual (no drop-path); batch 16 of 64x64
  images. Stresses: depthwise convolution (groups = channels) whose roofline is memory-bound, and
  permutes between conv and linear layouts.
- ``mamba``: a selective state-space language model: two Mamba-1 blocks (Gu & Dao 2023; in_proj,
  causal depthwise conv1d, SiLU, input-dependent delta/B/C, ``softplus``, discretisation with
  ``exp`` of an ``einsum``, then the reference selective scan as a Python loop over the 64 time
  steps: h = dA_t * h + dBu_t, y_t = einsum(h, C_t)), then one Mamba-2 SSD block (Dao & Gu 2024;
  the minimal chunked algorithm: ``cumsum`` of the log decays, segment sums masked with
  ``masked_fill(-inf)``, ``exp``, four-operand ``einsum`` within chunks, and a Python loop over
  the 8 chunks carrying the state); RMSNorm pre-norm residuals, vocab 1,000, batch 8 x 64 tokens.
  Stresses: a very long, thin chain (every time step depends on the last) with tiny ops, and
  ``einsum`` decompositions into ``bmm`` + copies.
- ``conformer``: a Conformer speech encoder (Gulati et al. 2020) trained with CTC: two stride-2
  conv2d subsampling of 80-bin filterbanks (400 frames -> 99), six blocks of d_model 144 (macaron
  half-step FFNs with SiLU, ``nn.MultiheadAttention`` with a key-padding mask from the utterance
  lengths, conv module: pointwise conv to 2d, ``GLU``, depthwise conv1d k=15, ``BatchNorm1d``,
  SiLU, pointwise conv), final LayerNorm, output projection over 128 tokens, ``log_softmax`` and
  ``F.ctc_loss`` with variable input and target lengths; batch 8. Stresses: the CTC loss (a
  dynamic-programming kernel with its own backward), GLU, batch norm buffers, attention masks.
  Does not import on torch 2.13: fake tensors have no size rule for ``aten._ctc_loss`` (its
  ``log_alpha`` output is sized by the target lengths), so ``make_fx`` raises
  ``DynamicOutputShapeException`` whether the lengths are tensors or Python lists; the importer
  stops with ``cannot trace Conformer: aten._ctc_loss.Tensor has an output whose size depends on
  the data, ...`` (exit 2; before session 34 the bare exception's name).
- ``conformer_ce``: the same encoder with per-frame cross entropy (``nll_loss`` over the
  log-probabilities) instead of CTC: the Conformer that does import.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


# ----- graph neural network ----------------------------------------------------------------------

class GCNLayer(nn.Module):
    """Kipf & Welling: h' = D^-1/2 (A + I) D^-1/2 h W, messages summed with scatter_add."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, h: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        n, d = h.shape
        deg = h.new_zeros(n).index_add_(0, dst, h.new_ones(dst.shape[0])) + 1.0   # + self loop
        dinv = deg.rsqrt()
        hw = self.lin(h)
        w = (dinv.index_select(0, src) * dinv.index_select(0, dst)).unsqueeze(1)   # [E, 1]
        msg = hw.index_select(0, src) * w                                             # [E, d]
        out = torch.zeros_like(hw).scatter_add(0, dst.unsqueeze(1).expand(-1, d), msg)
        return out + hw * (dinv * dinv).unsqueeze(1)


class SAGELayer(nn.Module):
    """GraphSAGE-mean: h' = W_self h + W_neigh mean_{j->i} h_j, with index_add_."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.lin_self = nn.Linear(d, d)
        self.lin_neigh = nn.Linear(d, d, bias=False)

    def forward(self, h: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        n = h.shape[0]
        deg = h.new_zeros(n).index_add_(0, dst, h.new_ones(dst.shape[0])).clamp_(min=1.0)
        agg = torch.zeros_like(h).index_add_(0, dst, h.index_select(0, src)) / deg.unsqueeze(1)
        return self.lin_self(h) + self.lin_neigh(agg)


class GATLayer(nn.Module):
    """GAT-style multi-head edge softmax: per-destination max by scatter_reduce(amax)."""

    def __init__(self, d: int, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.lin = nn.Linear(d, d, bias=False)
        self.att_src = nn.Parameter(torch.randn(heads, d // heads) * 0.1)
        self.att_dst = nn.Parameter(torch.randn(heads, d // heads) * 0.1)

    def forward(self, h: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        n, d = h.shape
        hh = self.lin(h).view(n, self.heads, d // self.heads)
        a_src = (hh * self.att_src).sum(-1)                                           # [N, H]
        a_dst = (hh * self.att_dst).sum(-1)
        e = F.leaky_relu(a_src.index_select(0, src) + a_dst.index_select(0, dst), 0.2)  # [E, H]
        idx = dst.unsqueeze(1).expand(-1, self.heads)
        emax = e.new_full((n, self.heads), -1e9).scatter_reduce(0, idx, e, reduce="amax", include_self=True)
        p = torch.exp(e - emax.index_select(0, dst))
        denom = e.new_zeros(n, self.heads).index_add_(0, dst, p) + 1e-16
        alpha = p / denom.index_select(0, dst)                                         # [E, H]
        msg = hh.index_select(0, src) * alpha.unsqueeze(-1)                            # [E, H, d/H]
        out = torch.zeros_like(hh).index_add_(0, dst, msg)
        return out.reshape(n, d)


class GNN(nn.Module):
    def __init__(self, din: int, d: int, classes: int) -> None:
        super().__init__()
        self.inp = nn.Linear(din, d)
        self.layers = nn.ModuleList([GCNLayer(d), SAGELayer(d), GATLayer(d), SAGELayer(d), GCNLayer(d), GATLayer(d)])
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in self.layers)
        self.out = nn.Linear(d, classes)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, train_idx: torch.Tensor) -> torch.Tensor:
        src, dst = edge_index[0], edge_index[1]
        h = F.relu(self.inp(x))
        for layer, norm in zip(self.layers, self.norms):
            h = h + self.drop(F.relu(norm(layer(h, src, dst))))
        return self.out(h).index_select(0, train_idx)


def gnn(nodes: int = 4000, edges: int = 40000, din: int = 96, d: int = 128, classes: int = 16, train: int = 1000):
    """Six GCN / GraphSAGE / GAT layers over a random 4,000-node, 40,000-edge graph."""
    torch.manual_seed(0)
    model = GNN(din, d, classes)
    x = torch.randn(nodes, din)
    edge_index = torch.randint(0, nodes, (2, edges))
    train_idx = torch.randperm(nodes)[:train]
    labels = torch.randint(0, classes, (train,))
    return model, (x, edge_index, train_idx), lambda logits: F.cross_entropy(logits, labels)


# ----- DLRM ----------------------------------------------------------------------------------------

def mlp(sizes, last_act: bool = True) -> nn.Sequential:
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if last_act or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, dense_in: int, table_rows, dim: int, bottom, top) -> None:
        super().__init__()
        self.bottom = mlp([dense_in, *bottom, dim])
        self.tables = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for rows in table_rows)
        f = len(table_rows) + 1
        li, lj = torch.triu_indices(f, f, offset=1)
        self.register_buffer("li", li, persistent=False)
        self.register_buffer("lj", lj, persistent=False)
        self.top = mlp([dim + f * (f - 1) // 2, *top, 1], last_act=False)

    def forward(self, dense: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)                                                          # [B, dim]
        embs = [table(indices[t], offsets[t]) for t, table in enumerate(self.tables)]    # [B, dim] each
        z = torch.stack([x, *embs], dim=1)                                              # [B, F, dim]
        inter = torch.bmm(z, z.transpose(1, 2))                                         # [B, F, F]
        flat = inter[:, self.li, self.lj]                                               # [B, F(F-1)/2]
        return self.top(torch.cat([x, flat], dim=1)).squeeze(1)


def dlrm(batch: int = 512, dim: int = 64, tables: int = 26, bag: int = 4):
    """DLRM with 26 EmbeddingBag tables (offsets, variable bags), bmm + triu interaction, batch 512."""
    torch.manual_seed(0)
    rows = [int(r) for r in torch.logspace(3, 5, tables).round()]     # 1,000 .. 100,000 rows
    model = DLRM(13, rows, dim, (512, 256, 128), (512, 256))
    dense = torch.randn(batch, 13)
    total = batch * bag
    indices = torch.stack([torch.randint(0, r, (total,)) for r in rows])                       # [T, total]
    # variable-length bags: sorted random cut points, first bag starts at 0
    cuts = torch.sort(torch.randint(0, total, (tables, batch - 1)), dim=1).values
    offsets = torch.cat([torch.zeros(tables, 1, dtype=torch.long), cuts], dim=1)                # [T, B]
    clicks = torch.randint(0, 2, (batch,)).float()
    return model, (dense, indices, offsets), lambda logit: F.binary_cross_entropy_with_logits(logit, clicks)


# ----- Swin Transformer ----------------------------------------------------------------------------

def window_partition(x: torch.Tensor, ws: int) -> torch.Tensor:
    b, h, w, c = x.shape
    x = x.view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, ws * ws, c)                                                   # [B*nW, ws*ws, C]


def window_reverse(windows: torch.Tensor, ws: int, h: int, w: int) -> torch.Tensor:
    c = windows.shape[-1]
    b = windows.shape[0] // ((h // ws) * (w // ws))
    x = windows.view(b, h // ws, w // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(b, h, w, c)


class WindowAttention(nn.Module):
    def __init__(self, dim: int, ws: int, heads: int) -> None:
        super().__init__()
        self.heads, self.ws = heads, ws
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.bias_table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, heads) * 0.02)
        coords = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (ws - 1)
        self.register_buffer("rel_index", (rel[..., 0] * (2 * ws - 1) + rel[..., 1]).flatten(), persistent=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        bw, n, c = x.shape
        h = self.heads
        q, k, v = self.qkv(x).view(bw, n, 3, h, c // h).permute(2, 0, 3, 1, 4).unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)                                   # [Bw, h, N, N]
        bias = self.bias_table[self.rel_index].view(n, n, h).permute(2, 0, 1)
        attn = attn + bias.unsqueeze(0)
        if mask is not None:
            nw = mask.shape[0]
            attn = attn.view(bw // nw, nw, h, n, n) + mask[None, :, None]
            attn = attn.view(bw, h, n, n)
        attn = attn.softmax(-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(bw, n, c))


class SwinBlock(nn.Module):
    def __init__(self, dim: int, res: int, heads: int, ws: int, shift: int) -> None:
        super().__init__()
        if res <= ws:
            ws, shift = res, 0
        self.res, self.ws, self.shift = res, ws, shift
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, ws, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        if shift:
            region = torch.zeros(1, res, res, 1)
            cnt = 0
            for hs in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
                for wsl in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
                    region[:, hs, wsl, :] = cnt
                    cnt += 1
            self.register_buffer("region", window_partition(region, ws).squeeze(-1), persistent=False)
        else:
            self.region = None

    def attn_mask(self) -> torch.Tensor | None:
        if self.region is None:
            return None
        diff = self.region.unsqueeze(1) - self.region.unsqueeze(2)                       # [nW, N, N]
        return torch.zeros_like(diff).masked_fill(diff != 0, -100.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, l, c = x.shape
        r = self.res
        y = self.norm1(x).view(b, r, r, c)
        if self.shift:
            y = torch.roll(y, shifts=(-self.shift, -self.shift), dims=(1, 2))
        y = self.attn(window_partition(y, self.ws), self.attn_mask())
        y = window_reverse(y, self.ws, r, r)
        if self.shift:
            y = torch.roll(y, shifts=(self.shift, self.shift), dims=(1, 2))
        x = x + y.reshape(b, l, c)
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    def __init__(self, dim: int, res: int) -> None:
        super().__init__()
        self.res = res
        self.norm = nn.LayerNorm(4 * dim)
        self.red = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, l, c = x.shape
        x = x.view(b, self.res, self.res, c)
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)
        return self.red(self.norm(x.view(b, -1, 4 * c)))


class Swin(nn.Module):
    def __init__(self, img: int, patch: int, dim: int, depths, heads, ws: int, classes: int) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.pnorm = nn.LayerNorm(dim)
        res = img // patch
        layers = []
        for i, (depth, h) in enumerate(zip(depths, heads)):
            for j in range(depth):
                layers.append(SwinBlock(dim, res, h, ws, 0 if j % 2 == 0 else ws // 2))
            if i < len(depths) - 1:
                layers.append(PatchMerging(dim, res))
                dim, res = 2 * dim, res // 2
        self.layers = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = self.pnorm(self.patch(img).flatten(2).transpose(1, 2))
        x = self.norm(self.layers(x))
        return self.head(x.mean(1))


def swin(batch: int = 8, img: int = 112, classes: int = 100):
    """Swin: 3 stages (2-2-2 blocks, dims 64-128-256), 7x7 windows, shifted by roll, 112x112."""
    torch.manual_seed(0)
    model = Swin(img, 4, 64, (2, 2, 2), (2, 4, 8), 7, classes)
    x = torch.randn(batch, 3, img, img)
    labels = torch.randint(0, classes, (batch,))
    return model, (x,), lambda logits: F.cross_entropy(logits, labels)


# ----- ConvNeXt ------------------------------------------------------------------------------------

class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor (permute, normalise, permute back)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int, scale: float = 1e-6) -> None:
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pw1 = nn.Linear(dim, 4 * dim)
        self.pw2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(x).permute(0, 2, 3, 1)                                              # NHWC
        y = self.pw2(F.gelu(self.pw1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(self, depths, dims, classes: int) -> None:
        super().__init__()
        self.stages = nn.ModuleList()
        for i, (depth, dim) in enumerate(zip(depths, dims)):
            if i == 0:
                down = nn.Sequential(nn.Conv2d(3, dim, 4, 4), LayerNorm2d(dim, eps=1e-6))
            else:
                down = nn.Sequential(LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], dim, 2, 2))
            self.stages.append(nn.Sequential(down, *(ConvNeXtBlock(dim) for _ in range(depth))))
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for stage in self.stages:
            x = stage(x)
        return self.head(self.norm(x.mean((2, 3))))


def convnext(batch: int = 16, img: int = 64, classes: int = 100):
    """ConvNeXt, depths 2-2-4-2, dims 48-96-192-384, batch 16 of 64x64 images."""
    torch.manual_seed(0)
    model = ConvNeXt((2, 2, 4, 2), (48, 96, 192, 384), classes)
    x = torch.randn(batch, 3, img, img)
    labels = torch.randint(0, classes, (batch,))
    return model, (x,), lambda logits: F.cross_entropy(logits, labels)


# ----- Mamba (selective scan) ----------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Mamba1(nn.Module):
    """Mamba-1 mixer with the reference selective scan (a Python loop over time steps)."""

    def __init__(self, d: int, state: int = 16, expand: int = 2, conv: int = 4) -> None:
        super().__init__()
        di = expand * d
        self.di, self.n, self.rank = di, state, math.ceil(d / 16)
        self.in_proj = nn.Linear(d, 2 * di, bias=False)
        self.conv = nn.Conv1d(di, di, conv, groups=di, padding=conv - 1)
        self.x_proj = nn.Linear(di, self.rank + 2 * state, bias=False)
        self.dt_proj = nn.Linear(self.rank, di)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, state + 1).float()).repeat(di, 1))
        self.D = nn.Parameter(torch.ones(di))
        self.out_proj = nn.Linear(di, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, l, _ = x.shape
        u, z = self.in_proj(x).chunk(2, dim=-1)
        u = F.silu(self.conv(u.transpose(1, 2))[..., :l].transpose(1, 2))              # causal conv
        dt, B, C = self.x_proj(u).split([self.rank, self.n, self.n], dim=-1)
        delta = F.softplus(self.dt_proj(dt))                                            # [b, l, di]
        A = -torch.exp(self.A_log)                                                      # [di, n]
        dA = torch.exp(torch.einsum("bld,dn->bldn", delta, A))
        dBu = torch.einsum("bld,bln,bld->bldn", delta, B, u)
        h = x.new_zeros(b, self.di, self.n)
        ys = []
        for t in range(l):
            h = dA[:, t] * h + dBu[:, t]
            ys.append(torch.einsum("bdn,bn->bd", h, C[:, t]))
        y = torch.stack(ys, dim=1) + u * self.D
        return self.out_proj(y * F.silu(z))


def segsum(x: torch.Tensor) -> torch.Tensor:
    """Stable segment sums exp-ready: out[..., i, j] = sum x[..., j+1..i] for j <= i, else -inf."""
    t = x.shape[-1]
    cs = torch.cumsum(x, dim=-1)
    seg = cs[..., :, None] - cs[..., None, :]
    keep = torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device))
    return seg.masked_fill(~keep, -torch.inf)


class Mamba2SSD(nn.Module):
    """Mamba-2 mixer with the minimal chunked SSD algorithm; the inter-chunk recurrence is a loop."""

    def __init__(self, d: int, heads: int = 4, head_dim: int = 32, state: int = 16, chunk: int = 8) -> None:
        super().__init__()
        self.h, self.p, self.n, self.chunk = heads, head_dim, state, chunk
        di = heads * head_dim
        self.in_proj = nn.Linear(d, 2 * di + 2 * state + heads, bias=False)
        self.A_log = nn.Parameter(torch.zeros(heads))
        self.dt_bias = nn.Parameter(torch.zeros(heads))
        self.D = nn.Parameter(torch.ones(heads))
        self.norm = RMSNorm(di)
        self.out_proj = nn.Linear(di, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, l, _ = x.shape
        h, p, n, q = self.h, self.p, self.n, self.chunk
        c = l // q
        z, xs, B, C, dt = self.in_proj(x).split([h * p, h * p, n, n, h], dim=-1)
        dt = F.softplus(dt + self.dt_bias)                                               # [b, l, h]
        A = -torch.exp(self.A_log) * dt                                                  # [b, l, h]
        X = (xs.view(b, l, h, p) * dt.unsqueeze(-1)).view(b, c, q, h, p)
        Bc = B.view(b, c, q, 1, n).expand(b, c, q, h, n)
        Cc = C.view(b, c, q, 1, n).expand(b, c, q, h, n)
        Ac = A.view(b, c, q, h).permute(0, 3, 1, 2)                                      # [b, h, c, q]
        A_cs = torch.cumsum(Ac, dim=-1)
        L = torch.exp(segsum(Ac))                                                        # [b, h, c, q, q]
        y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", Cc, Bc, L, X)
        decay = torch.exp(A_cs[..., -1:] - A_cs)                                         # [b, h, c, q]
        states = torch.einsum("bclhn,bhcl,bclhp->bchpn", Bc, decay, X)                   # [b, c, h, p, n]
        chunk_decay = torch.exp(A_cs[..., -1])                                           # [b, h, c]
        s = x.new_zeros(b, h, p, n)
        prev = []
        for k in range(c):                                                               # state passing
            prev.append(s)
            s = chunk_decay[:, :, k, None, None] * s + states[:, k]
        prev = torch.stack(prev, dim=1)                                                  # [b, c, h, p, n]
        y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", Cc, prev, torch.exp(A_cs))
        y = (y_diag + y_off).reshape(b, l, h, p) + xs.view(b, l, h, p) * self.D[:, None]
        return self.out_proj(self.norm(y.reshape(b, l, h * p) * F.silu(z)))


class MambaLM(nn.Module):
    def __init__(self, vocab: int, d: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.mixers = nn.ModuleList([Mamba1(d), Mamba1(d), Mamba2SSD(d)])
        self.norms = nn.ModuleList(RMSNorm(d) for _ in self.mixers)
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for mixer, norm in zip(self.mixers, self.norms):
            x = x + mixer(norm(x))
        return self.head(self.norm(x))


def mamba(batch: int = 8, seq: int = 64, vocab: int = 1000, d: int = 64):
    """Two Mamba-1 blocks (Python-loop selective scan, 64 steps) + one Mamba-2 SSD block."""
    torch.manual_seed(0)
    model = MambaLM(vocab, d)
    ids = torch.randint(0, vocab, (batch, seq))
    labels = torch.randint(0, vocab, (batch, seq))
    return model, (ids,), lambda logits: F.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1))


# ----- Conformer (CTC) -----------------------------------------------------------------------------

class FeedForward(nn.Module):
    def __init__(self, d: int, mult: int = 4, drop: float = 0.1) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, mult * d), nn.SiLU(), nn.Dropout(drop),
                                 nn.Linear(mult * d, d), nn.Dropout(drop))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ConvModule(nn.Module):
    def __init__(self, d: int, kernel: int = 15, drop: float = 0.1) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.pw1 = nn.Conv1d(d, 2 * d, 1)
        self.dw = nn.Conv1d(d, d, kernel, padding=kernel // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Conv1d(d, d, 1)
        self.drop = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pw1(self.norm(x).transpose(1, 2))                                      # [B, 2d, T]
        y = F.silu(self.bn(self.dw(F.glu(y, dim=1))))
        return self.drop(self.pw2(y)).transpose(1, 2)


class ConformerBlock(nn.Module):
    def __init__(self, d: int, heads: int, kernel: int) -> None:
        super().__init__()
        self.ff1 = FeedForward(d)
        self.attn_norm = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, dropout=0.1, batch_first=True)
        self.drop = nn.Dropout(0.1)
        self.conv = ConvModule(d, kernel)
        self.ff2 = FeedForward(d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        x = x + 0.5 * self.ff1(x)
        y = self.attn_norm(x)
        x = x + self.drop(self.attn(y, y, y, key_padding_mask=pad, need_weights=False)[0])
        x = x + self.conv(x)
        return self.norm(x + 0.5 * self.ff2(x))


class Conformer(nn.Module):
    def __init__(self, mels: int, d: int, layers: int, heads: int, kernel: int, vocab: int) -> None:
        super().__init__()
        self.sub = nn.Sequential(nn.Conv2d(1, d, 3, 2), nn.ReLU(), nn.Conv2d(d, d, 3, 2), nn.ReLU())
        f = ((mels - 1) // 2 - 1) // 2
        self.sub_proj = nn.Linear(d * f, d)
        self.blocks = nn.ModuleList(ConformerBlock(d, heads, kernel) for _ in range(layers))
        self.out = nn.Linear(d, vocab)

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = self.sub(feats.unsqueeze(1))                                                 # [B, d, T', F']
        b, d, t, f = x.shape
        x = self.sub_proj(x.permute(0, 2, 1, 3).reshape(b, t, d * f))
        sub_len = ((lengths - 1) // 2 - 1) // 2
        pad = torch.arange(t, device=x.device)[None, :] >= sub_len[:, None]             # [B, T'] True = pad
        for block in self.blocks:
            x = block(x, pad)
        return self.out(x).log_softmax(-1)                                              # [B, T', V]


def _conformer(batch: int, frames: int, mels: int, d: int, layers: int, heads: int, kernel: int, vocab: int):
    torch.manual_seed(0)
    model = Conformer(mels, d, layers, heads, kernel, vocab)
    feats = torch.randn(batch, frames, mels)
    lengths = torch.randint(frames * 3 // 4, frames + 1, (batch,))
    lengths[0] = frames
    return model, feats, lengths


def conformer(batch: int = 8, frames: int = 400, mels: int = 80, d: int = 144, layers: int = 6, heads: int = 4,
              kernel: int = 15, vocab: int = 128, max_target: int = 40):
    """Conformer-S-like encoder (6 blocks, d 144) on 400 filterbank frames, CTC loss, batch 8."""
    model, feats, lengths = _conformer(batch, frames, mels, d, layers, heads, kernel, vocab)
    out_len = ((lengths - 1) // 2 - 1) // 2
    target_len = torch.randint(max_target // 2, max_target + 1, (batch,))
    targets = torch.randint(1, vocab, (batch, max_target))                               # 0 = blank

    def loss_fn(log_probs: torch.Tensor) -> torch.Tensor:
        return F.ctc_loss(log_probs.transpose(0, 1), targets, out_len, target_len, blank=0, zero_infinity=True)

    return model, (feats, lengths), loss_fn


def conformer_ce(batch: int = 8, frames: int = 400, mels: int = 80, d: int = 144, layers: int = 6, heads: int = 4,
                 kernel: int = 15, vocab: int = 128):
    """The same Conformer with per-frame cross entropy (NLL over log-probabilities) instead of CTC."""
    model, feats, lengths = _conformer(batch, frames, mels, d, layers, heads, kernel, vocab)
    t = ((frames - 1) // 2 - 1) // 2
    labels = torch.randint(0, vocab, (batch, t))
    return model, (feats, lengths), lambda log_probs: F.nll_loss(log_probs.reshape(-1, vocab), labels.reshape(-1))
