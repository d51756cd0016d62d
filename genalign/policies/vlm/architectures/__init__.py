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
llava_onevision           :mod:`~.llava_onevision` (anyres tiles)  yes (``pixel_values_videos``)
========================  =======================================  =====================================

Adding an architecture: a module with its :class:`VLMArchitecture` instance, listed in :data:`ARCHITECTURES`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from genalign.policies.vlm.architectures import gemma3, idefics3, llava_onevision, qwen
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


def native_video_model_types() -> list[str]:
    """The ``model_type``\\ s whose architecture takes native video (sorted)."""
    return sorted(name for name, architecture in ARCHITECTURES.items() if architecture.video_keys)


#: ``model_type`` -> the builder of its tiny random model (each architecture module's ``build_tiny``)
TINY_MODELS: dict[str, Callable[[str, Path], Path]] = {
    **dict.fromkeys(("qwen2_vl", "qwen2_5_vl", "qwen3_vl"), qwen.build_tiny),
    "gemma3": gemma3.build_tiny,
    "idefics3": idefics3.build_tiny,
    "llava_onevision": llava_onevision.build_tiny,
}


def build_tiny_model(model_type: str, folder: str | Path) -> Path:
    """Write a tiny random model of ``model_type`` (:mod:`genalign.policies.vlm.architectures.tiny`) to ``folder``
    and return it; the weights come from a fixed seed.

    Raises:
        ValueError: no tiny builder for ``model_type``; the message lists those there are.
    """
    if model_type not in TINY_MODELS:
        raise ValueError(f"no tiny model for model_type={model_type!r}; there are: {', '.join(sorted(TINY_MODELS))}")
    import torch

    torch.manual_seed(0)
    return TINY_MODELS[model_type](model_type, Path(folder))


__all__ = [
    "ARCHITECTURES",
    "TINY_MODELS",
    "SampleMedia",
    "VLMArchitecture",
    "architecture_of",
    "build_tiny_model",
    "native_video_model_types",
]
