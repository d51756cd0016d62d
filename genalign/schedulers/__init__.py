"""Samplers with the diffusers ``set_timesteps()`` / ``step()`` contract, their dynamics and step-selection rules."""

from genalign.schedulers.flow_sde import FlowSDEScheduler, FlowSDESchedulerOutput
from genalign.schedulers.sde_dynamics import SDE_DYNAMICS, gaussian_log_prob
from genalign.schedulers.train_steps import StepMasks, TrainStepsConfig, select_train_steps, sliding_window_start

__all__ = [
    "SDE_DYNAMICS",
    "FlowSDEScheduler",
    "FlowSDESchedulerOutput",
    "StepMasks",
    "TrainStepsConfig",
    "gaussian_log_prob",
    "select_train_steps",
    "sliding_window_start",
]
