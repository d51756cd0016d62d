"""End-to-end generation with per-step log-probabilities for concrete model classes, usable without training."""

from genalign.pipelines.flow import (
    FlowGenerationOutput,
    FlowLogProbPipeline,
    FlowTrajectory,
    NonFiniteLatentsError,
    TransitionScores,
    denoise,
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
    "architecture_for",
    "denoise",
    "score_transitions",
]
