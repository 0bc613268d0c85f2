"""Real models for a sixth "realcheck" round (session 38): small training steps around PyTorch
features no earlier round had. Built from code, random weights and inputs, no downloads; each
factory returns ``(model, example_inputs, loss_fn)`` (loss_fn None: the importer's default loss),
as in bench/real_models.py to real_models5.py.

    python -m placement.importers.torch bench/real_models6.py:bigru_tagger -o /tmp/rm6/bigru_tagger.json --devices 4

- ``bigru_tagger``: an embedding, a 2-layer bidirectional GRU (batch-first) and a per-token linear
  tagger (sequence labelling).
- ``lstm_proj``: a 2-layer ``nn.LSTM`` with ``proj_size`` (LSTMP) and dropout between the layers.
- ``embedding_max_norm``: ``nn.Embedding(max_norm=1.0)``, which renormalises the looked-up rows of
  its weight in place during the forward, then mean pooling and a classifier.
- ``unused_head``: a model with a second head its forward never calls (parameters without a
  gradient, as in multi-task code run on one task).
- ``stop_gradient``: a two-branch model whose second branch reads the first's output through
  ``.detach()`` (target branches, BYOL/SimSiam-style stop-gradient).
- ``transformer_decoder``: ``nn.TransformerDecoder`` (2 layers, causal self-attention and
  cross-attention to an encoder memory given as an input).
- ``spatial_transformer``: a localisation net predicting an affine transform, ``F.affine_grid`` and
  ``F.grid_sample``, then a small CNN.
- ``upsample_decoder``: ``F.interpolate`` (bilinear, x2) between convolutions, as in segmentation
  decoders.
- ``item_branch``: a forward that branches on ``tensor.item()`` (data-dependent control flow): the
  importer must refuse it with one clear line.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _BiGruTagger(nn.Module):
    def __init__(self, vocab: int = 2000, d: int = 64, tags: int = 17) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.rnn = nn.GRU(d, d, 2, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * d, tags)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.embed(ids))
        return self.out(h)


def bigru_tagger():
    torch.manual_seed(0)
    ids = torch.randint(0, 2000, (8, 30))
    tags = torch.randint(0, 17, (8, 30))
    return _BiGruTagger(), (ids,), lambda logits: F.cross_entropy(logits.reshape(-1, 17), tags.reshape(-1))


class _LstmProj(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(32, 128, 2, batch_first=True, proj_size=48, dropout=0.1)
        self.head = nn.Linear(48, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(x)
        return self.head(h[:, -1])


def lstm_proj():
    torch.manual_seed(0)
    return _LstmProj(), (torch.randn(8, 25, 32),), None


class _MaxNormBag(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(5000, 64, max_norm=1.0)
        self.cls = nn.Linear(64, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.cls(self.embed(ids).mean(dim=1))


def embedding_max_norm():
    torch.manual_seed(0)
    return _MaxNormBag(), (torch.randint(0, 5000, (16, 40)),), None


class _UnusedHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU())
        self.task_a = nn.Linear(128, 10)
        self.task_b = nn.Linear(128, 1000)  # never called

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.task_a(self.body(x))


def unused_head():
    torch.manual_seed(0)
    return _UnusedHead(), (torch.randn(32, 64),), None


class _StopGradient(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.online = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64))
        self.predictor = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.online(x)
        p = self.predictor(z)
        return -F.cosine_similarity(p, z.detach(), dim=-1).mean()


def stop_gradient():
    torch.manual_seed(0)
    return _StopGradient(), (torch.randn(32, 64),), None


class _Decoder(nn.Module):
    def __init__(self, vocab: int = 1000, d: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerDecoderLayer(d, 4, 128, dropout=0.1, batch_first=True)
        self.dec = nn.TransformerDecoder(layer, 2)
        self.out = nn.Linear(d, vocab)

    def forward(self, ids: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        return self.out(self.dec(self.embed(ids), memory, tgt_mask=mask))


def transformer_decoder():
    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (4, 24))
    memory = torch.randn(4, 32, 64)
    return _Decoder(), (ids, memory), lambda logits: F.cross_entropy(logits.reshape(-1, 1000), ids.reshape(-1))


class _Stn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.loc = nn.Sequential(nn.Conv2d(1, 8, 5), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 12 * 12, 6))
        nn.init.zeros_(self.loc[-1].weight)
        with torch.no_grad():
            self.loc[-1].bias.copy_(torch.tensor([1.0, 0, 0, 0, 1.0, 0]))
        self.cnn = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        theta = self.loc(x).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return self.cnn(F.grid_sample(x, grid, align_corners=False))


def spatial_transformer():
    torch.manual_seed(0)
    return _Stn(), (torch.randn(8, 1, 28, 28),), None


class _Upsample(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.down = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU())
        self.up1 = nn.Conv2d(32, 16, 3, padding=1)
        self.up2 = nn.Conv2d(16, 5, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.down(x)
        h = F.relu(self.up1(F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=False)))
        return self.up2(F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=False))


def upsample_decoder():
    torch.manual_seed(0)
    x = torch.randn(4, 3, 64, 64)
    target = torch.randint(0, 5, (4, 64, 64))
    return _Upsample(), (x,), lambda logits: F.cross_entropy(logits, target)


class _ItemBranch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        if h.sum().item() > 0:
            return self.b(h)
        return h


def item_branch():
    torch.manual_seed(0)
    return _ItemBranch(), (torch.randn(4, 16),), None
