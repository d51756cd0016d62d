"""A trainable decoding policy as a component of the diffusion-LM policy: build, sample, score, save.

:class:`TrainedDecoding` is what :class:`~genalign.policies.dlm.policy.DiffusionLMPolicy` composes when
``policy.decoding_policy`` is set (Co-GRPO [179] ``count_schedule``, SAS [118] ``order_head``):

* rollout: :func:`~genalign.policies.dlm.decoding.generate_with_decoding_policy` replaces the heuristic sampler; the
  decoding records go into ``per_sample`` under ``decoding/<key>`` and the pathwise log-likelihood per step into the
  rollout structure (``path_logp`` ``[N, S]``);
* score: the decoding policy's log-probabilities ``[N, S]`` (one action per decoding step that had a choice, mask 0
  on forced steps) are appended to the action axis after the likelihood proxy's actions (joint training, Co-GRPO),
  or are the whole action axis (``policy.freeze_denoiser``, SAS). Every action shares its sample's advantage unless a
  credit rule says otherwise;
* the KL's reference for the decoding actions is the decoding policy at its initialisation (the heuristic schedule
  or order it starts from), kept as a frozen copy; it is a function of the config, so a resumed run rebuilds it;
* checkpoints: ``decoding_policy.safetensors`` next to the model weights (:meth:`save` / :meth:`load`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model
from torch import Tensor, nn

from genalign.policies.dlm.base import DECODING_POLICIES
from genalign.policies.dlm.decoding import LearnedGeneration, generate_with_decoding_policy
from genalign.schedulers.masked_diffusion import ModelFn

DECODING_FILE = "decoding_policy.safetensors"
RECORD_PREFIX = "decoding/"


class TrainedDecoding:
    """The configured decoding policy and its frozen initial copy.

    Args:
        name: option of :data:`~genalign.policies.dlm.base.DECODING_POLICIES`; args: its hyper-parameters.
        gen_length, block_length, steps: the sampler's settings (checked by the policy config).
        remasking: ``policy.remasking``, handed to the option (which rejects what it cannot follow).
        device: where the parameters live.
    """

    def __init__(
        self,
        name: str,
        args: dict[str, Any],
        *,
        gen_length: int,
        block_length: int,
        steps: int,
        remasking: str,
        device: torch.device,
    ) -> None:
        steps_per_block = steps // (gen_length // block_length)
        self.name = name
        self.module: nn.Module = DECODING_POLICIES.get(name)(block_length, steps_per_block, remasking=remasking, **args)
        self.module.to(device)
        self.initial = copy.deepcopy(self.module).requires_grad_(False)

    def generate(
        self, model_fn: ModelFn, prompt_ids: Tensor, prompt_mask: Tensor, *, greedy: bool, **sampler: Any
    ) -> LearnedGeneration:
        """Sample with the decoding policy (``sampler``: mask_id, gen_length, block_length, steps, temperature,
        generator)."""
        with torch.no_grad():
            return generate_with_decoding_policy(
                model_fn,
                prompt_ids,
                self.module,
                prompt_attention_mask=prompt_mask,
                greedy_decisions=greedy,
                **sampler,
            )

    @staticmethod
    def records_of(per_sample: dict[str, Any]) -> dict[str, Tensor]:
        """The decoding records ``{key: [n, S, ...]}`` stored in a rollout's ``per_sample``."""
        return {k.removeprefix(RECORD_PREFIX): v for k, v in per_sample.items() if k.startswith(RECORD_PREFIX)}

    @staticmethod
    def per_sample_of(records: dict[str, Tensor]) -> dict[str, Tensor]:
        return {RECORD_PREFIX + key: value for key, value in records.items()}

    def logp(self, per_sample: dict[str, Any], *, reference: bool = False) -> tuple[Tensor, Tensor]:
        """``(logp [n, S], decision mask [n, S] float32)`` of the stored decisions under the current parameters
        (with grad) or, ``reference=True``, under the initial ones (no grad)."""
        module = self.initial if reference else self.module
        with torch.set_grad_enabled(not reference and torch.is_grad_enabled()):
            return module(self.records_of(per_sample))

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        save_model(self.module, str(directory / DECODING_FILE))

    def load(self, directory: Path) -> None:
        path = directory / DECODING_FILE
        if not path.exists():
            raise FileNotFoundError(
                f"{path} not found: the policy uses decoding_policy={self.name!r}, whose parameters save() writes "
                "there; was the checkpoint written without it?"
            )
        load_model(self.module, str(path))


__all__ = ["DECODING_FILE", "RECORD_PREFIX", "TrainedDecoding"]
