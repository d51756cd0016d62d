"""Tiny masked diffusion LMs in the style of LLaDA and Dream, built from the transformers config classes of the
bodies they share (nothing downloaded; for tests and the architecture matrix).

Neither model is in transformers: their checkpoints ship their own modelling code (``architecture: remote_code``).
What each is, and how a tiny stand-in of this module matches it:

* **LLaDA** (GSAI-ML/LLaDA-8B): a Llama body (RMS norm, rotary embedding, SwiGLU MLP, no biases, untied head) whose
  attention has no causal mask; the mask token (126336) is the noise, and the logits at position ``j`` predict token
  ``j`` (no shift). Stand-in: ``LlamaForCausalLM`` run bidirectionally, ``shifted_logits: false``.
* **Dream** (Dream-org/Dream-v0-7B, DiffuCoder): a Qwen2 body (q/k/v biases, tied or untied head as in the Qwen2.5
  checkpoint it starts from) made bidirectional; it keeps the autoregressive habit that the logits at ``j`` predict
  token ``j + 1``, so genalign shifts them back (``shifted_logits: true``); mask token 151666. Stand-in:
  ``Qwen2ForCausalLM`` run bidirectionally, ``shifted_logits: true``.

``architecture: bidirectional_causal_lm`` gives the body a full (non-causal) attention mask
(:func:`genalign.policies.dlm.policy.bidirectional_attention_bias`); the tokenizer carries ``<mask>`` as its mask
token. Tests check that the stand-ins attend both ways and that Dream's logits are re-aligned.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from genalign.policies.lm.tiny import build_tiny_causal_lm, build_tiny_tokenizer


@dataclass(frozen=True)
class DiffusionStyle:
    """How one published masked diffusion LM is run by the family.

    Attributes:
        body: the tiny causal-LM architecture with its module shapes (:data:`genalign.policies.lm.tiny.TINY_ARCHITECTURES`).
        shifted_logits: the logits at ``j`` predict token ``j + 1`` (``policy.shifted_logits``).
        mask_token_id: the published checkpoint's mask token (its ``policy.mask_token_id``).
    """

    body: Literal["llama", "qwen2"]
    shifted_logits: bool
    mask_token_id: int

    def policy_options(self) -> dict[str, Any]:
        """The ``policy`` options that run a tiny stand-in of this style (its tokenizer names the mask token)."""
        return {"architecture": "bidirectional_causal_lm", "shifted_logits": self.shifted_logits}


#: style -> what the family needs to know about it.
DIFFUSION_STYLES: dict[str, DiffusionStyle] = {
    "llada": DiffusionStyle(body="llama", shifted_logits=False, mask_token_id=126336),
    "dream": DiffusionStyle(body="qwen2", shifted_logits=True, mask_token_id=151666),
}


def build_tiny_diffusion_lm(
    directory: Path, *, style: Literal["llada", "dream"], vocab_size: int = 96, seed: int = 0, **sizes: int
) -> Path:
    """Write a randomly initialised ``style`` stand-in (:data:`DIFFUSION_STYLES`) and its tokenizer, whose mask token
    is ``<mask>``, to ``directory``; ``sizes`` as in :func:`~genalign.policies.lm.tiny.build_tiny_causal_lm`."""
    if style not in DIFFUSION_STYLES:
        raise ValueError(f"style={style!r} is not one of {sorted(DIFFUSION_STYLES)}.")
    tokenizer = build_tiny_tokenizer(vocab_size, mask_token=True)
    return build_tiny_causal_lm(
        directory,
        architecture=DIFFUSION_STYLES[style].body,
        vocab_size=vocab_size,
        seed=seed,
        tokenizer=tokenizer,
        **sizes,
    )


__all__ = ["DIFFUSION_STYLES", "DiffusionStyle", "build_tiny_diffusion_lm"]
