"""End-to-end generation with per-step log-probabilities for concrete model classes, usable without training."""

from genalign.pipelines.architectures import FLOW_ARCHITECTURES, FlowArchitecture, architecture_for
from genalign.pipelines.flow import (
    FlowGenerationOutput,
    FlowLogProbPipeline,
    FlowTrajectory,
    NonFiniteLatentsError,
    denoise,
    ode_complete,
)
from genalign.pipelines.flow_tree import TreeTrajectory, denoise_tree

__all__ = [
    "FLOW_ARCHITECTURES",
    "FlowArchitecture",
    "FlowGenerationOutput",
    "FlowLogProbPipeline",
    "FlowTrajectory",
    "NonFiniteLatentsError",
    "TreeTrajectory",
    "architecture_for",
    "denoise",
    "denoise_tree",
    "ode_complete",
]
