"""Trainable decoding policies of masked diffusion LMs (:data:`DECODING_POLICIES`): Co-GRPO's schedule [179]
(``count_schedule``) and SAS's order head [118] (``order_head``); see :mod:`genalign.policies.dlm.base`."""

from genalign.policies.dlm.base import DECODING_POLICIES, DecodingPolicy, StepChoice, StepView
from genalign.policies.dlm.trained import TrainedDecoding

__all__ = ["DECODING_POLICIES", "DecodingPolicy", "StepChoice", "StepView", "TrainedDecoding"]
