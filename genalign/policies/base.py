"""The contract between the shared backend and a model family.

A model family plugs into genalign by saying two things (shared/ARCHITECTURE.md):

* how to sample a group of outputs: :meth:`Policy.rollout` returns a :class:`Rollout`;
* how to score the log-probability of a stored rollout under the current parameters: :meth:`Policy.score`.

Everything else (advantages, ratios, clipping, KL, aggregation, logging, checkpoints) is shared and never looks inside
``Rollout.per_sample``. ``T`` is the action axis: tokens for language models, trained denoising steps for flow models,
tokens or one ELBO term per sequence for diffusion LMs.

Contract 2: with no parameter update in between, ``score(rollout)`` of a stored rollout is deterministic and
independent of how the batch is split into micro-batches, so the first ratio of every rollout batch is exactly 1.
``Rollout.old_logp`` holds the *behaviour* log-probs recorded while sampling. When the sampler computes them through
the very code path of ``score`` (flow-model SDE steps), the policy sets ``rollout_logp_is_exact = True`` and the trainer
uses them as the old log-probs. Otherwise (language models sampled with a KV cache, or by vLLM) the trainer re-scores
the rollout once before the update, or uses the detached current log-probs when the update is fully on-policy; the
behaviour log-probs then serve to measure and correct the training/inference mismatch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from torch import Tensor, nn


@dataclass
class Rollout:
    """A batch of sampled outputs with everything needed to re-score them.

    Attributes:
        rows: ``[N]`` dataset rows (dicts with at least ``"prompt"``), repeated for each member of a group.
        outputs: ``[N]`` what reward functions receive: completion strings, PIL images, video arrays, ...
        group_ids: ``[N]`` long tensor: the index, in the ``rows`` passed to :meth:`Policy.rollout`, of the prompt the
            sample was drawn for (the trainer maps it to a globally unique id).
        old_logp: ``[N, T]`` float32 log-probabilities of the actions at sampling time (detached).
        action_mask: ``[N, T]`` float32, 1 where an action exists and is trained, 0 for padding / untrained steps.
        per_sample: family-specific data, every value indexed by sample along its first axis: a tensor ``[N, ...]``
            or a list of length ``N`` (for ragged data such as per-sample image patches).
        info: batch-level facts that are not per sample (e.g. ``{"nfe_per_sample": 10}``); summed/averaged by the
            trainer only for logging.
    """

    rows: list[dict[str, Any]]
    outputs: list[Any]
    group_ids: Tensor
    old_logp: Tensor
    action_mask: Tensor
    per_sample: dict[str, Tensor | list[Any]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.rows)
        checks = {"outputs": len(self.outputs), "group_ids": self.group_ids.shape[0]}
        checks |= {"old_logp": self.old_logp.shape[0], "action_mask": self.action_mask.shape[0]}
        checks |= {f"per_sample[{k!r}]": len(v) for k, v in self.per_sample.items()}
        for name, size in checks.items():
            assert size == n, f"Rollout.{name} has {size} samples, rows has {n}"
        assert self.old_logp.shape == self.action_mask.shape, (
            f"old_logp {tuple(self.old_logp.shape)} and action_mask {tuple(self.action_mask.shape)} differ"
        )

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def num_actions(self) -> int:
        """``T``, the length of the action axis."""
        return self.old_logp.shape[1]

    def select(self, index: Sequence[int] | Tensor) -> Rollout:
        """Return the sub-batch at ``index`` (used for micro-batches, filtering and per-rank shards)."""
        idx = torch.as_tensor(index, dtype=torch.long)
        picks = idx.tolist()
        per_sample: dict[str, Tensor | list[Any]] = {}
        for key, value in self.per_sample.items():
            per_sample[key] = value[idx.to(value.device)] if isinstance(value, Tensor) else [value[i] for i in picks]
        return Rollout(
            rows=[self.rows[i] for i in picks],
            outputs=[self.outputs[i] for i in picks],
            group_ids=self.group_ids[idx],
            old_logp=self.old_logp[idx.to(self.old_logp.device)],
            action_mask=self.action_mask[idx.to(self.action_mask.device)],
            per_sample=per_sample,
            info=dict(self.info),
        )


@dataclass
class ScoreOutput:
    """What :meth:`Policy.score` returns for a (micro-)batch of ``n`` samples.

    Attributes:
        logp: ``[n, T]`` float32 log-probabilities of the stored actions under the current parameters (with grad).
        entropy: ``[n, T]`` per-action entropy when asked for, else ``None``.
        kl: ``[n, T]`` per-action KL to the reference policy when asked for, else ``None``. Each family computes it in
            its natural space (token log-probs for language models, mean space for flow models).
        vocab_term: ``[n, T]`` float32 per-action value (with grad, 0 on padding) of the ``vocab_term`` callable
            ``fn(logits [k, V]) -> [k]`` passed to ``score``, evaluated on the next-token logits at the sampling
            temperature inside the chunked head pass (``[n, T, V]`` never exists); ``None`` when not asked. Only the
            families whose ``score`` takes ``vocab_term`` (token-level language models: ``causal_lm``, ``vlm``)
            compute it; it feeds the vocabulary regularisers (``genalign.algorithms.bind_vocab_term``).
    """

    logp: Tensor
    entropy: Tensor | None = None
    kl: Tensor | None = None
    vocab_term: Tensor | None = None


@runtime_checkable
class Policy(Protocol):
    """What the trainer needs from a model family. See the module docstring for the contract."""

    family: str
    rollout_logp_is_exact: bool

    def rollout(
        self, rows: list[dict[str, Any]], group_size: int, *, mode: Literal["train", "eval"] = "train"
    ) -> Rollout:
        """Sample ``group_size`` outputs for each row; ``mode="eval"`` uses the evaluation sampling settings."""
        ...

    def score(self, rollout: Rollout, *, entropy: bool = False, kl_estimator: str | None = None) -> ScoreOutput:
        """Re-score ``rollout`` under the current parameters (with grad when the module is in training mode).

        Families over a token vocabulary (``causal_lm``, ``vlm``) also take ``vocab_term=fn`` (``fn(logits [k, V]) ->
        [k]``) and return its per-action value in ``ScoreOutput.vocab_term``; the trainer passes it only for a
        regulariser with ``needs=("vocab",)``, which the config allows only for those families.
        """
        ...

    def trainable_parameters(self) -> list[nn.Parameter]: ...

    def modules_to_train(self) -> list[nn.Module]:
        """Modules whose ``train()``/``eval()`` mode the trainer toggles."""
        ...

    def save(self, directory: Path) -> None:
        """Write the trainable weights (LoRA adapters alone when LoRA is used) as safetensors."""
        ...

    def load(self, directory: Path) -> None:
        """Load weights written by :meth:`save`."""
        ...


# Optional attribute: has_action_entropy = False when score(entropy=True) is not meaningful (the trainer then only
# asks for entropy when an entropy bonus is configured).
# Optional hooks a policy may define; the trainer calls them when present:
#   set_step(step: int) -> None          before each training rollout (sliding SDE windows, annealed schedules)
#   set_inner_epoch(epoch: int) -> None  before each pass over a rollout batch (d1's fresh mask per inner iteration)
#   after_optimizer_step() -> None       after each optimizer step (EMA updates, "old" model decay)
#   state_dict_extra() -> dict / load_state_dict_extra(d) for resumable state that is not a weight (EMA, counters)
#   per_action_advantages(rollout, advantages [n]) -> [n] or [n, T]   (per-depth credit of tree rollouts)
#   dense_step_advantages(rollout, reward_fn) -> [n, T] | None  (DenseGRPO; reward_fn(rows, outputs) -> [n])
#   objective(batch, score_output, advantages) -> (per_action_loss [n, T], metrics)
#                                        replaces the shared ratio objective (likelihood-free methods, e.g. DiffusionNFT)
