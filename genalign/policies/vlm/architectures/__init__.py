"""The image-text-to-text architectures the VLM family runs, chosen by the model config's ``model_type``.

Each architecture is one module declaring a :class:`~genalign.policies.vlm.architectures.base.VLMArchitecture`: which
processor outputs carry a sample's images and videos, how they are split per sample and joined per micro-batch, the
token types the model reads, the placeholder tokens never sampled and how positions are given when scoring.

========================  =======================================  =====================================
``model_type``            module                                   native video
========================  =======================================  =====================================
qwen2_vl, qwen2_5_vl,     :mod:`~.qwen` (flat patches + grids)     yes (``pixel_values_videos``,
qwen3_vl                                                           ``video_grid_thw``)
gemma3                    :mod:`~.gemma3` (fixed-size images)      no
idefics3, smolvlm         :mod:`~.idefics3` (padded sub-images)    no
llava_onevision           :mod:`~.llava_onevision` (anyres tiles)  no
========================  =======================================  =====================================

Adding an architecture: a module with its :class:`VLMArchitecture` instance, listed in :data:`ARCHITECTURES`.
"""

from __future__ import annotations

from typing import Any

from genalign.policies.vlm.architectures.base import SampleMedia, VLMArchitecture
from genalign.policies.vlm.architectures.gemma3 import GEMMA3
from genalign.policies.vlm.architectures.idefics3 import IDEFICS3
from genalign.policies.vlm.architectures.llava_onevision import LLAVA_ONEVISION
from genalign.policies.vlm.architectures.qwen import QWEN_VL

#: ``model_type`` -> architecture
ARCHITECTURES: dict[str, VLMArchitecture] = {
    model_type: architecture
    for architecture in (QWEN_VL, GEMMA3, IDEFICS3, LLAVA_ONEVISION)
    for model_type in architecture.model_types
}


def architecture_of(model_config: Any) -> VLMArchitecture:
    """The architecture of a model config (its ``model_type``).

    Raises:
        ValueError: the ``model_type`` is not supported; the message lists the supported ones.
    """
    model_type = getattr(model_config, "model_type", None)
    if model_type not in ARCHITECTURES:
        raise ValueError(
            f"policy.model has model_type={model_type!r}, which the VLM family does not support; supported: "
            f"{', '.join(sorted(ARCHITECTURES))} (fix: one of those models, or add a module to "
            "genalign/policies/vlm/architectures/ and list it in ARCHITECTURES)"
        )
    return ARCHITECTURES[model_type]


__all__ = ["ARCHITECTURES", "SampleMedia", "VLMArchitecture", "architecture_of"]
