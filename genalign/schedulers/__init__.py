"""Samplers with the diffusers ``set_timesteps()`` / ``step()`` contract, their dynamics and step-selection rules.

Names are imported lazily so that ``genalign.schedulers.masked_diffusion`` users never import diffusers.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TreePlan": "genalign.schedulers.branching",
    "node_rewards": "genalign.schedulers.branching",
    "per_depth_advantages": "genalign.schedulers.branching",
    "leaf_step_advantages": "genalign.schedulers.branching",
    "FlowSDEScheduler": "genalign.schedulers.flow_sde",
    "FlowSDESchedulerOutput": "genalign.schedulers.flow_sde",
    "ODE_SOLVERS": "genalign.schedulers.ode_solvers",
    "SDE_DYNAMICS": "genalign.schedulers.sde_dynamics",
    "gaussian_log_prob": "genalign.schedulers.sde_dynamics",
    "squared_error_log_prob": "genalign.schedulers.sde_dynamics",
    "step_log_prob": "genalign.schedulers.sde_dynamics",
    "StepMasks": "genalign.schedulers.train_steps",
    "TrainStepsConfig": "genalign.schedulers.train_steps",
    "select_train_steps": "genalign.schedulers.train_steps",
    "sliding_window_start": "genalign.schedulers.train_steps",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'genalign.schedulers' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


__all__ = sorted(_EXPORTS)
