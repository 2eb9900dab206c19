"""A chunk-wise actor-critic policy for stable-baselines3's PPO.

Every chunk is scored by the same small network from its own features (its access counts
in the last windows, whether it is in the fast tier, the global capacity features) plus
the mean embedding of all chunks (a Deep Sets context, so a chunk can tell it is hotter
than the others). The weights are shared across chunks, so what the agent learns about
"a hot chunk" holds wherever the hot set moves, which a plain MLP over the flattened
observation has to learn separately for every chunk position.

The observation layout is the environment's (``env.py``): H×C counts, C placement bits,
3 global scalars.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import torch
from gymnasium import spaces
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn


class ChunkwiseExtractor(BaseFeaturesExtractor):
    def __init__(self, observation_space: spaces.Box, n_chunks: int, history: int, hidden: int = 32):
        super().__init__(observation_space, features_dim=n_chunks * hidden)
        if observation_space.shape != (history * n_chunks + n_chunks + 3,):
            raise ValueError(
                f"observation shape {observation_space.shape} does not match {n_chunks} chunks × {history} windows"
            )
        self.n_chunks, self.history, self.hidden = n_chunks, history, hidden
        self.phi = nn.Sequential(nn.Linear(history + 4, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.rho = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        B, C, H = obs.shape[0], self.n_chunks, self.history
        hist = obs[:, : H * C].reshape(B, H, C).transpose(1, 2)
        placed = obs[:, H * C : H * C + C].unsqueeze(-1)
        glob = obs[:, -3:].unsqueeze(1).expand(B, C, 3)
        e = self.phi(torch.cat([hist, placed, glob], dim=-1))
        ctx = e.mean(dim=1, keepdim=True).expand_as(e)
        return self.rho(torch.cat([e, ctx], dim=-1)).reshape(B, C * self.hidden)


class PerChunkHead(nn.Module):
    """Logits of each chunk from its own embedding, chunk-major (what SB3's Bernoulli and
    MultiCategorical distributions expect)."""

    def __init__(self, hidden: int, n_chunks: int, per_chunk: int):
        super().__init__()
        self.hidden, self.n_chunks, self.per_chunk = hidden, n_chunks, per_chunk
        self.linear = nn.Linear(hidden, per_chunk)

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        B = latent.shape[0]
        return self.linear(latent.reshape(B, self.n_chunks, self.hidden)).reshape(B, self.n_chunks * self.per_chunk)


class ChunkwisePolicy(ActorCriticPolicy):
    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Any,
        *args: Any,
        request_prob: float | None = None,
        **kwargs: Any,
    ):
        # set before the parent's __init__, which calls _build
        object.__setattr__(self, "_request_prob", request_prob)
        kwargs.setdefault("features_extractor_class", ChunkwiseExtractor)
        kwargs.setdefault("net_arch", {"pi": [], "vf": [64]})
        kwargs.setdefault("share_features_extractor", True)
        super().__init__(observation_space, action_space, lr_schedule, *args, **kwargs)

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        fx = self.features_extractor_kwargs
        if isinstance(self.action_space, spaces.MultiBinary):
            per_chunk = 1
        elif isinstance(self.action_space, spaces.MultiDiscrete):
            per_chunk = int(self.action_space.nvec[0])
        else:
            raise ValueError(f"chunk-wise policy cannot drive {self.action_space}")
        self.action_net = PerChunkHead(fx.get("hidden", 32), fx["n_chunks"], per_chunk)
        if self.ortho_init:  # small initial logits, as SB3 does for its own action head
            self.action_net.apply(partial(self.init_weights, gain=0.01))
        p = self._request_prob
        if per_chunk == 1 and p is not None and 0.0 < p < 1.0:
            # start by asking for about as many chunks as fit: requests beyond the capacity
            # are dropped by the env, and their gradient is noise
            with torch.no_grad():
                self.action_net.linear.bias.fill_(float(math.log(p / (1.0 - p))))
        # the optimizer built by the parent holds the replaced head's parameters: rebuild it
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)
