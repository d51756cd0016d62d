"""A causal-LM config on the builtin arith-lm demo model, for tests that check the config loader accepts an option."""

from __future__ import annotations

from typing import Any

from genalign.config import from_dict
from genalign.config.schema import TrainConfig


def arith_lm_config(**algorithm: Any) -> TrainConfig:
    """``TrainConfig`` of the arith-lm demo (``policy.family: causal_lm``) with ``algorithm`` keys set; raises
    ``ConfigError`` when the loader rejects them (unknown option, bad keyword, capability the family lacks)."""
    return from_dict(
        TrainConfig,
        {
            "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "use_chat_template": False},
            "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 8}}},
            "rewards": [{"fn": "exact_match"}],
            "algorithm": {"group_size": 4, "prompts_per_step": 2, **algorithm},
        },
    )
