"""The learned predictors: an LSTM delta classifier and a small causal Transformer.

Both read a sequence of (pair class, region slot, ip bucket) tokens and emit, per
position, two heads over the pair classes: ``next`` (softmax: the next event's pair, the
Hashemi et al. classifier) and ``horizon`` (independent sigmoids: is the pair among the
next H events). Both are a few hundred kilobytes, so one step costs tens of microseconds
on a CPU.

Context rule shared by training, batched and per-fault inference: the prediction at
event i sees the events from ``context_start(i) = max(0, (i // C − 1) · C)`` to i, where
C = seq_len / 2; so every prediction has between C and 2C events of context (fewer only
at the start of a stream), which is what training windows of seq_len events show.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn

MODEL_KINDS = ("lstm", "transformer")


@dataclass
class ModelConfig:
    kind: str = "lstm"
    n_classes: int = 2  # pair classes incl. class 0 "other"
    n_slots: int = 1  # known region slots; slot n_slots = unknown region
    n_ip: int = 0  # ip hash buckets; 0 = ip not used
    embed: int = 32
    hidden: int = 48
    layers: int = 1
    heads: int = 2  # transformer only
    seq_len: int = 32
    horizon: int = 10
    dropout: float = 0.0

    @property
    def chunk(self) -> int:
        return max(1, self.seq_len // 2)

    def to_dict(self) -> dict:
        return asdict(self)


class _Embed(nn.Module):
    def __init__(self, cfg: ModelConfig, width: int):
        super().__init__()
        self.tok = nn.Embedding(cfg.n_classes, width)
        self.slot = nn.Embedding(cfg.n_slots + 1, width)
        self.ip = nn.Embedding(cfg.n_ip, width) if cfg.n_ip > 0 else None

    def forward(self, tokens: torch.Tensor, slots: torch.Tensor, ips: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.slot(slots)
        if self.ip is not None:
            x = x + self.ip(ips)
        return x


class DeltaLSTM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = _Embed(cfg, cfg.embed)
        self.lstm = nn.LSTM(
            cfg.embed,
            cfg.hidden,
            num_layers=cfg.layers,
            batch_first=True,
            dropout=cfg.dropout if cfg.layers > 1 else 0.0,
        )
        self.next_head = nn.Linear(cfg.hidden, cfg.n_classes)
        self.horizon_head = nn.Linear(cfg.hidden, cfg.n_classes)

    def features(self, tokens, slots, ips, state=None):
        out, state = self.lstm(self.embed(tokens, slots, ips), state)
        return out, state

    def forward(self, tokens, slots, ips):
        out, _ = self.features(tokens, slots, ips)
        return self.next_head(out), self.horizon_head(out)


class _Block(nn.Module):
    """Pre-norm causal self-attention block, written out so ONNX export stays plain ops."""

    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.n1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.n2 = nn.LayerNorm(width)
        self.ff = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, w = x.shape
        q, k, v = self.qkv(self.n1(x)).reshape(b, t, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(w // self.heads)) + mask
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, w)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.ff(self.n2(x)))


class DeltaTransformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.hidden % cfg.heads:
            raise ValueError("hidden must be a multiple of heads")
        self.cfg = cfg
        self.embed = _Embed(cfg, cfg.hidden)
        self.pos = nn.Embedding(cfg.seq_len, cfg.hidden)
        self.blocks = nn.ModuleList(_Block(cfg.hidden, cfg.heads, cfg.dropout) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.hidden)
        self.next_head = nn.Linear(cfg.hidden, cfg.n_classes)
        self.horizon_head = nn.Linear(cfg.hidden, cfg.n_classes)

    def features(self, tokens, slots, ips):
        t = tokens.shape[1]
        pos = torch.arange(t, device=tokens.device)
        x = self.embed(tokens, slots, ips) + self.pos(pos)[None]
        mask = torch.full((t, t), float("-inf"), device=tokens.device).triu(1)
        for blk in self.blocks:
            x = blk(x, mask)
        return self.norm(x)

    def forward(self, tokens, slots, ips):
        h = self.features(tokens, slots, ips)
        return self.next_head(h), self.horizon_head(h)


def build_model(cfg: ModelConfig) -> nn.Module:
    if cfg.kind == "lstm":
        return DeltaLSTM(cfg)
    if cfg.kind == "transformer":
        return DeltaTransformer(cfg)
    raise ValueError(f"unknown model kind {cfg.kind!r} (valid: {', '.join(MODEL_KINDS)})")


def _head(model: nn.Module, head: str) -> nn.Linear:
    return model.horizon_head if head == "horizon" else model.next_head


def _ranked(logits: torch.Tensor, head: str, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k classes by probability, without ever ranking class 0 ("other", names no page).

    The sigmoid is monotonic, so top-k runs on logits and only k values are squashed; the
    softmax needs its normaliser over all classes (logsumexp), but no full exp.
    """
    logits = torch.cat([torch.full_like(logits[..., :1], -1e9), logits[..., 1:]], -1)
    top, idx = torch.topk(logits, k, dim=-1)
    if head == "horizon":
        return torch.sigmoid(top), idx
    return torch.exp(top - torch.logsumexp(logits, -1, keepdim=True)), idx


class SeqScorer(nn.Module):
    """(tokens, slots, ips) of shape (B, T) → top-K (scores, classes) of positions skip … T−1.

    The export unit for batched inference (ONNX / TorchScript / eager alike). Leading
    positions that only warm the context up get no head, which is most of the cost.
    """

    def __init__(self, model: nn.Module, head: str, k: int, skip: int = 0):
        super().__init__()
        self.model, self.head, self.k, self.skip = model, head, k, skip

    def forward(self, tokens, slots, ips):
        m = self.model
        feat = m.features(tokens, slots, ips)
        if isinstance(feat, tuple):
            feat = feat[0]
        return _ranked(_head(m, self.head)(feat[:, self.skip :]), self.head, self.k)


class LSTMStep(nn.Module):
    """One fault for the live loop: advance S staggered LSTM states, score state ``sel``.

    Inputs token/slot/ip (S,), h/c (layers, S, hidden), sel (1,) → scores (K,),
    classes (K,), h', c'. Two staggered states (S=2) reproduce the context rule exactly.
    """

    def __init__(self, model: DeltaLSTM, head: str, k: int):
        super().__init__()
        self.model, self.head, self.k = model, head, k

    def forward(self, token, slot, ip, h, c, sel):
        x = self.model.embed(token[:, None], slot[:, None], ip[:, None])
        out, (h2, c2) = self.model.lstm(x, (h, c))
        feat = out[:, 0].index_select(0, sel)[0]
        s, i = _ranked(_head(self.model, self.head)(feat), self.head, self.k)
        return s, i, h2, c2


class LastScorer(nn.Module):
    """Transformer per fault: the window (1, T) → top-K of its last position."""

    def __init__(self, model: DeltaTransformer, head: str, k: int):
        super().__init__()
        self.model, self.head, self.k = model, head, k

    def forward(self, tokens, slots, ips):
        feat = self.model.features(tokens, slots, ips)[0, -1]
        return _ranked(_head(self.model, self.head)(feat), self.head, self.k)
