"""End-to-end generation with per-step log-probabilities for concrete model classes, usable without training."""

from genalign.pipelines.flow import (
    FlowGenerationOutput,
    FlowLogProbPipeline,
    FlowTrajectory,
    NonFiniteLatentsError,
    TransitionScores,
    TreeTrajectory,
    denoise,
    denoise_tree,
    ode_complete,
    score_transitions,
)
from genalign.pipelines.flow_models import FLOW_ARCHITECTURES, FlowArchitecture, architecture_for

__all__ = [
    "FLOW_ARCHITECTURES",
    "FlowArchitecture",
    "FlowGenerationOutput",
    "FlowLogProbPipeline",
    "FlowTrajectory",
    "NonFiniteLatentsError",
    "TransitionScores",
    "TreeTrajectory",
    "architecture_for",
    "denoise",
    "denoise_tree",
    "ode_complete",
    "score_transitions",
]
