"""Tiered-memory placement: differential-tracing estimator and a Gymnasium environment.

Importing this package registers ``pagecast/TieredPlacement-v0`` with Gymnasium, so
``gymnasium.make("pagecast.gym:pagecast/TieredPlacement-v0", traces=[...])`` works without an
explicit import (Gymnasium imports the module named before the colon). Gymnasium 1.x has no
entry-point plugin discovery any more, so a pyproject entry point would not be read.
"""

from __future__ import annotations

import gymnasium

from pagecast.gym.env import EnvConfig, TieredPlacementEnv
from pagecast.gym.estimator import CostModel, WindowConfig, Windows, load_demand

ENV_ID = "pagecast/TieredPlacement-v0"

if ENV_ID not in gymnasium.registry:
    gymnasium.register(id=ENV_ID, entry_point="pagecast.gym.env:TieredPlacementEnv")

__all__ = ["ENV_ID", "CostModel", "EnvConfig", "TieredPlacementEnv", "WindowConfig", "Windows", "load_demand"]
