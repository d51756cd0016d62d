"""Trainable decoding policies of masked diffusion LMs (:data:`DECODING_POLICIES`): Co-GRPO's schedule [179]
(``count_schedule``) and SAS's order head [118] (``order_head``); see :mod:`genalign.policies.dlm.base`. The family's
config (:mod:`genalign.policies.dlm.config`) is read without torch, so the names here are imported on first use."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    **dict.fromkeys(("DECODING_POLICIES", "DecodingPolicy", "StepChoice", "StepView"), "genalign.policies.dlm.base"),
    "TrainedDecoding": "genalign.policies.dlm.trained",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'genalign.policies.dlm' has no attribute {name!r}")


__all__ = ["DECODING_POLICIES", "DecodingPolicy", "StepChoice", "StepView", "TrainedDecoding"]
