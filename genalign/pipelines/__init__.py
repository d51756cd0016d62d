"""End-to-end generation with per-step log-probabilities for concrete model classes, usable without training.

The names below are imported when first used, so that reading an architecture's shapes (config checks, the planner)
does not import diffusers.
"""

import importlib
from typing import Any

#: public name -> the module that defines it
_EXPORTS = {
    "FLOW_ARCHITECTURES": "genalign.pipelines.architectures",
    "FlowArchitecture": "genalign.pipelines.architectures",
    "architecture_for": "genalign.pipelines.architectures",
    "FlowGenerationOutput": "genalign.pipelines.flow",
    "FlowLogProbPipeline": "genalign.pipelines.flow",
    "FlowTrajectory": "genalign.pipelines.flow",
    "NonFiniteLatentsError": "genalign.pipelines.flow",
    "denoise": "genalign.pipelines.flow",
    "ode_complete": "genalign.pipelines.flow",
    "TreeTrajectory": "genalign.pipelines.flow_tree",
    "denoise_tree": "genalign.pipelines.flow_tree",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'genalign.pipelines' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
