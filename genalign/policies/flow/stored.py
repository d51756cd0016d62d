"""What a flow training rollout stores per sample in ``Rollout.per_sample`` (family-private), shared by the sampling
strategies that write it and the scorers that read it.

SDE rollouts: ``latents`` ``[N, S + 1, ...]`` (every state ``x_0 .. x_S``), ``noise_level`` ``[N, S]`` (the level each
step was sampled at) and the prompt embeddings (``cond.<key>`` / ``uncond.<key>``, ``[N, ...]`` each). Likelihood-free
rollouts: ``clean_latents`` ``[N, ...]``, the flow-matching points ``fm_sigmas`` ``[N, K]`` and ``fm_noise``
``[N, K, ...]``, and the conditional embeddings. Rollouts of an architecture that takes source images (image-to-image,
editing, image-to-video) also store the sources' conditioning once (``source.<key>``, ``[N, ...]`` each), which
:func:`stored_embeddings` joins to both branches, as the rollout did.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from genalign.pipelines.architectures.base import PromptEmbeddings, SourceConditioning, join_sources

LATENTS, NOISE_LEVEL = "latents", "noise_level"
CLEAN, SIGMAS, NOISE = "clean_latents", "fm_sigmas", "fm_noise"
COND, UNCOND, SOURCE = "cond.", "uncond.", "source."


def store_embeddings(
    cond: PromptEmbeddings, uncond: PromptEmbeddings | None, sources: SourceConditioning | None = None
) -> dict[str, Tensor]:
    """``per_sample`` entries of the conditional and (when present) unconditional embeddings ``[N, ...]`` and of the
    source conditioning ``[N, ...]`` (stored once for both branches)."""
    stored = {COND + k: v for k, v in cond.items()}
    stored |= {SOURCE + k: v for k, v in (sources or {}).items()}
    return stored | {UNCOND + k: v for k, v in (uncond or {}).items()}


def stored_embeddings(
    per_sample: dict[str, Any], device: torch.device
) -> tuple[PromptEmbeddings, PromptEmbeddings | None]:
    """The embeddings written by :func:`store_embeddings`, on ``device`` (unconditional ones None when absent), each
    branch joined with the stored source conditioning."""
    cond = {k[len(COND) :]: v.to(device) for k, v in per_sample.items() if k.startswith(COND)}
    uncond = {k[len(UNCOND) :]: v.to(device) for k, v in per_sample.items() if k.startswith(UNCOND)}
    sources = {k[len(SOURCE) :]: v.to(device) for k, v in per_sample.items() if k.startswith(SOURCE)}
    return join_sources(cond, sources), join_sources(uncond or None, sources)


def require(per_sample: dict[str, Any], key: str) -> Any:
    """``per_sample[key]``, or a ``ValueError`` saying that only training rollouts can be scored."""
    if key not in per_sample:
        raise ValueError(
            f"this rollout has no stored {key!r} (an evaluation rollout, or one of another flow training mode?); "
            "score only the training rollouts of this policy."
        )
    return per_sample[key]
