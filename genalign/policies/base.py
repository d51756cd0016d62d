"""The contract between the shared backend and a model family: :class:`Policy` and what it exchanges.

A model family plugs into genalign by saying two things (shared/ARCHITECTURE.md):

* how to sample a group of outputs: :meth:`Policy.rollout` returns a :class:`Rollout`;
* how to score the log-probability of a stored rollout under the current parameters: :meth:`Policy.score` returns a
  :class:`~genalign.algorithms.scores.ScoreOutput` with the features (declared signals) a
  :class:`~genalign.algorithms.scores.ScoreRequest` names.

Everything else (advantages, credit, ratios, clipping, KL, aggregation, logging, checkpoints) is shared. Everything the
trainer calls is declared here, with a no-op default where a family has nothing to do (the lifecycle stages
:meth:`Policy.on_step`, :meth:`Policy.on_inner_epoch`, :meth:`Policy.after_optimizer_step`, :meth:`Policy.state_dict`,
:meth:`Policy.load_state_dict`); what a family can compute is declared data (:class:`PolicyCapabilities`, with
:class:`FamilyTraits` in :mod:`genalign.policies.capabilities`, which imports no torch), checked against the configured
methods at config load. The backend reads a rollout only through its declared fields (the
action tensors and ``Rollout.structure``, a mapping of declared signals), never inside ``Rollout.per_sample``, which
belongs to the family. ``T`` is the action axis: tokens for language models, trained denoising steps for flow
models, tokens or one ELBO term per sequence for diffusion LMs.

Contract 2: with no parameter update in between, ``score(rollout)`` of a stored rollout is deterministic and
independent of how the batch is split into micro-batches, so the first ratio of every rollout batch is exactly 1.
``Rollout.old_logp`` holds the *behaviour* log-probs recorded while sampling. When the sampler computes them through
the very code path of ``score`` (flow-model SDE steps), the family declares ``rollout_logp_is_exact`` and the trainer
uses them as the old log-probs. Otherwise (language models sampled with a KV cache, or by vLLM) the trainer re-scores
the rollout once before the update, or uses the detached current log-probs when the update is fully on-policy; the
behaviour log-probs then serve to measure and correct the training/inference mismatch.

Contract 5 (data-parallel training, :mod:`genalign.trainer.parallel`): :meth:`Policy.prepare_sharding` hands every
module the family trains (and frozen copies worth sharding) to the trainer's ``wrap``; :meth:`Policy.score` calls
those modules themselves, never a submodule alone (their hooks gather sharded parameters); the EMA or other weights
evaluation samples with are swapped in by :meth:`Policy.evaluation_weights`, which the trainer enters before it
gathers the parameters for sampling.

Contract 4: :meth:`Policy.state_dict` returns every piece of resumable state that :meth:`Policy.save` does not write
(random generators, EMA weights, counters) as tensors and plain Python values (loadable with
``torch.load(weights_only=True)``), so that a killed run resumes bit for bit.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

import torch
from torch import Tensor, nn

from genalign.algorithms.scores import ScoreOutput, ScoreRequest
from genalign.algorithms.structure import cat_structures, check_structure, pad_cat, select_structure
from genalign.policies.capabilities import FamilyTraits, PolicyCapabilities

#: Weight dtypes by their config name (``policy.dtype``), for every family.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

#: ``reward_fn(rows [n], outputs [n]) -> [n]`` combined reward of decoded outputs (the trainer's weighted rewards).
RewardProbe = Callable[[list[dict[str, Any]], list[Any]], Tensor]


@dataclass(frozen=True)
class RolloutRequest:
    """What a training rollout should record besides its actions.

    Attributes:
        structure: the rollout-structure signals the configured methods need (a family may record cheap ones unasked).
        reward_probe: the trainer's combined reward of decoded outputs, for families whose rollouts measure rewards
            (of intermediate states, or to choose initial noise); None where rewards cannot be called.
    """

    structure: frozenset[str] = frozenset()
    reward_probe: RewardProbe | None = None


#: Row key of the guidance a sample source attaches to a training prompt (a dict; keys in
#: :attr:`PolicyCapabilities.guidance`). Guided tokens are part of the conditioning, never actions, so they get no
#: gradient; evaluation rows never carry it, and reward functions never see it.
GUIDANCE_KEY = "guidance"


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
        structure: declared rollout signals by name (prefix tree, step noise, segments, truncation, ...), each indexed
            by sample along its first axis; checked against its declaration (add one with :meth:`add_structure`).
        per_sample: family-private data, every value indexed by sample along its first axis: a tensor ``[N, ...]`` or a
            list of length ``N`` (for ragged data such as per-sample image patches). The backend never reads it.
        info: batch-level settings and descriptions of the sampling that are not per sample and not additive (e.g.
            ``{"nfe_per_sample": 10, "guidance_scale": 4.5}``), logged as ``rollout/<key>``.
        counts: event counts of the sampling (e.g. a multi-turn rollout's turns, tool calls by outcome, environment
            errors), logged as ``rollout/<key>``; additive by declaration, so joined rollouts sum them and a
            held-out evaluation reports their sums over its batches as ``eval/rollout/<key>``.
        left_padded: the ``per_sample`` keys whose ``[N, L, ...]`` tensors are left-padded along ``L`` (prompt ids),
            so that :meth:`cat` pads them on the left; every other tensor with a ragged second axis is right-padded.
    """

    rows: list[dict[str, Any]]
    outputs: list[Any]
    group_ids: Tensor
    old_logp: Tensor
    action_mask: Tensor
    structure: dict[str, Any] = field(default_factory=dict)
    per_sample: dict[str, Tensor | list[Any]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    left_padded: frozenset[str] = frozenset()

    #: ``info`` keys that describe the outputs themselves; rewards receive each as a column (one value per sample):
    #: ``fps``, the frames per second of video outputs ``[F, H, W, 3]``.
    OUTPUT_INFO_KEYS: ClassVar[tuple[str, ...]] = ("fps",)

    def output_columns(self) -> dict[str, list[Any]]:
        """The declared descriptions of the outputs (:attr:`OUTPUT_INFO_KEYS`) present in ``info``, as reward
        columns of ``[N]`` values."""
        return {key: [self.info[key]] * len(self) for key in self.OUTPUT_INFO_KEYS if key in self.info}

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
        self.structure = {name: value for name, value in self.structure.items() if value is not None}
        check_structure(self.structure, n, self.num_actions)

    def add_structure(self, **values: Any) -> None:
        """Record rollout signals after sampling (e.g. rewards of intermediate states), checked like the others."""
        values = {name: value for name, value in values.items() if value is not None}
        check_structure(values, len(self), self.num_actions)
        self.structure = {**self.structure, **values}

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
            structure=select_structure(self.structure, idx),
            per_sample=per_sample,
            info=dict(self.info),
            counts=dict(self.counts),
            left_padded=self.left_padded,
        )

    @staticmethod
    def cat(parts: Sequence[Rollout]) -> Rollout:
        """Join rollouts of one family along the sample axis (extra sampling rounds, replayed samples): tensors are
        zero-padded to the longest action / per-sample axis (``left_padded`` keys on the left), ``group_ids`` are
        kept as they are (the caller makes them globally meaningful first), ``counts`` are summed and ``info``
        (settings and descriptions of the sampling, e.g. the guidance scale a flow rollout is scored with) is the
        first part's."""
        parts = [part for part in parts if len(part)] or list(parts[:1])
        if len(parts) == 1:
            return parts[0]
        keys = set(parts[0].per_sample)
        if any(set(part.per_sample) != keys for part in parts):
            raise ValueError("cannot join rollouts with different per-sample data; they come from different families")
        per_sample: dict[str, Tensor | list[Any]] = {}
        for key in parts[0].per_sample:
            values = [part.per_sample[key] for part in parts]
            if isinstance(values[0], Tensor):
                side = "left" if key in parts[0].left_padded else "right"
                per_sample[key] = pad_cat(values, side=side)
            else:
                per_sample[key] = [item for value in values for item in value]
        info: dict[str, Any] = {}
        for part in parts:  # settings and descriptions of the sampling: the first part's (counts are summed)
            for key, value in part.info.items():
                info.setdefault(key, value)
        return Rollout(
            rows=[row for part in parts for row in part.rows],
            outputs=[output for part in parts for output in part.outputs],
            group_ids=torch.cat([part.group_ids for part in parts]),
            old_logp=pad_cat([part.old_logp for part in parts]),
            action_mask=pad_cat([part.action_mask for part in parts]),
            structure=cat_structures([part.structure for part in parts], [len(part) for part in parts]),
            per_sample=per_sample,
            info=info,
            counts=add_counts(part.counts for part in parts),
            left_padded=parts[0].left_padded,
        )


@dataclass(frozen=True)
class PeerModel:
    """Another model of a family (a teacher), loaded like the frozen reference copy.

    Attributes:
        module: the model, frozen and in eval mode, on the policy's device.
        vocabulary: its tokenizer's token -> id map (compared with the policy's: :mod:`genalign.teachers.vocabulary`).
        output_size: rows of its output head (ids it can score: ``0 .. output_size - 1``).
    """

    module: nn.Module
    vocabulary: dict[str, int]
    output_size: int


class TeacherHost(Protocol):
    """What a family offers a teacher (:mod:`genalign.teachers`); the kinds it hosts are
    :attr:`PolicyCapabilities.teachers`. Every method runs without gradient."""

    def score_with(self, module: nn.Module, rollout: Rollout, request: ScoreRequest) -> ScoreOutput:
        """The family's scoring pass of ``rollout`` (its chunked head) under ``module``, a model of the family (a
        teacher's, the reference's or the policy's own): ``logp`` ``[n, T]`` at the sampling temperature and the
        requested features, no KL."""
        ...

    def under_reference(self, fn: Callable[[nn.Module], Any]) -> Any:
        """``fn(module)`` under the reference weights (the base model), without gradient."""
        ...

    def under_current_weights(self, fn: Callable[[nn.Module], Any]) -> Any:
        """``fn(module)`` under the policy's current weights, in eval mode, without gradient."""
        ...

    def load_peer(self, path: str, *, tokenizer: str | None, dtype: str | None, field: str) -> PeerModel:
        """The model of the family saved at ``path`` (``tokenizer``: its tokenizer folder, default ``path``;
        ``dtype``: default the policy's), frozen; ``field`` names the config key in errors."""
        ...

    def vocabulary(self) -> dict[str, int]:
        """The policy's tokenizer's token -> id map."""
        ...

    def with_prompts(self, rollout: Rollout, rows: list[dict[str, Any]]) -> Rollout:
        """``rollout`` (a training rollout of this family) with sample ``i`` conditioned on the prompt of ``rows[i]``
        instead, rendered like the policy's prompts and never truncated; the actions are unchanged (``context``)."""
        ...

    def write_with(
        self, module: nn.Module, rows: list[dict[str, Any]], starts: list[list[int]], caps: list[int | None]
    ) -> list[tuple[list[int], Tensor]]:
        """Completions written by ``module`` (``generate``): after the prompt of ``rows[i]`` (rendered like the
        policy's prompts, never truncated) and the action ids ``starts[i]``, at most ``caps[i]`` actions (None: up to
        the policy's completion limit less the start) sampled with the policy's training sampling settings; returns
        the written ids and their sampling log-probs ``[k_i]`` (float32, CPU), empty where the start has ended or
        left no room."""
        ...

    def head_logits(self, module: nn.Module, hidden: Tensor) -> Tensor:
        """``[k, V]`` float32 next-token logits of ``module`` (a model of the family) from its hidden states ``hidden``
        ``[k, H]`` (the ``hidden`` score feature), divided by the sampling temperature, as its scoring pass computes
        them (``distribution``: the full-distribution teacher pass, :mod:`genalign.teachers.distribution`)."""
        ...


def add_counts(parts: Iterable[dict[str, int]]) -> dict[str, int]:
    """Key-by-key sums of :attr:`Rollout.counts` dicts (a key missing from a part counts 0), in sorted key order."""
    total: dict[str, int] = {}
    for part in parts:
        for key, value in part.items():
            total[key] = total.get(key, 0) + value
    return dict(sorted(total.items()))


class Policy(ABC):
    """What the trainer needs from a model family. See the module docstring for the contract.

    Subclasses set ``family`` (class attribute) and ``capabilities`` (usually ``config.capabilities()``) and implement
    the six abstract methods; the lifecycle stages default to no-ops.
    """

    family: ClassVar[str]
    capabilities: PolicyCapabilities

    # -- sampling and scoring -----------------------------------------------------------------------------------------
    @abstractmethod
    def rollout(
        self,
        rows: list[dict[str, Any]],
        group_size: int,
        *,
        mode: Literal["train", "eval"] = "train",
        request: RolloutRequest = RolloutRequest(),
    ) -> Rollout:
        """Sample ``group_size`` outputs for each row; ``mode="eval"`` uses the evaluation sampling settings and
        records nothing for training. ``request`` names the structure the configured methods need."""

    def force(
        self,
        rows: list[dict[str, Any]],
        completions: list[Tensor | str],
        behaviour_logp: list[Tensor | None],
        *,
        request: RolloutRequest = RolloutRequest(),
        continues: list[bool] | None = None,
    ) -> Rollout:
        """A training rollout of given completions instead of sampled ones (``capabilities.forced_completions``):
        sample ``i`` answers ``rows[i]`` with the action ids ``completions[i]`` ``[T_i]`` (ending with the end
        action when the completion ended) or with a text (tokenized, the end action appended); its ``old_logp`` is
        ``behaviour_logp[i]`` ``[T_i]`` (the policy that produced it, for replayed samples) or, where None or NaN, the
        current policy's log-probs (reference solutions, inserted cues). ``group_ids`` index ``rows``. Where
        ``continues[i]``, the given ids are only the start: the policy samples the rest of the completion as in
        :meth:`rollout` (a forced continuation), recording those actions' behaviour log-probs. Sample sources replay
        stored samples, insert reference solutions and continue given starts with it."""
        raise NotImplementedError(
            f"the {self.family} family cannot build rollouts of given completions (capabilities.forced_completions is "
            "False), which replay and reference-solution sample sources need; remove them from "
            "algorithm.sample_sources or use a token family (causal_lm)."
        )

    @abstractmethod
    def score(self, rollout: Rollout, request: ScoreRequest = ScoreRequest()) -> ScoreOutput:
        """Re-score a training ``rollout`` under the current parameters (with grad when the modules are in training
        mode) and return the requested features (only those in ``capabilities.signals`` are ever asked)."""

    def restrict_to_trained(self, rollout: Rollout, trained: Tensor) -> Rollout:
        """A rollout whose :meth:`score` computes only the actions where ``trained`` ``[n, T]`` bool is set (and
        their log-probs unchanged): ``algorithm.score_only_trained`` (``capabilities.trained_action_scoring``). Its
        action axis may be shorter than ``T``; the trainer pads the result back."""
        raise NotImplementedError(
            f"the {self.family} family cannot restrict its scoring pass to the trained actions "
            "(capabilities.trained_action_scoring is False); set algorithm.score_only_trained=false."
        )

    # -- parameters and weights ---------------------------------------------------------------------------------------
    @abstractmethod
    def trainable_parameters(self) -> list[nn.Parameter]:
        """The parameters the optimizer updates."""

    @abstractmethod
    def modules_to_train(self) -> list[nn.Module]:
        """Modules whose ``train()``/``eval()`` mode the trainer toggles."""

    @abstractmethod
    def save(self, directory: Path) -> None:
        """Write the trainable weights (LoRA adapters alone when LoRA is used) as safetensors in the format of the
        family's ecosystem (peft / diffusers), loadable without genalign."""

    @abstractmethod
    def load(self, directory: Path) -> None:
        """Load weights written by :meth:`save`."""

    def prepare_sharding(self, wrap: Callable[[nn.Module], None]) -> None:
        """Called once by a data-parallel run before the optimizer is built: call ``wrap(module)`` on every module that
        :meth:`modules_to_train` returns (the default) and on frozen modules worth sharding (a full reference copy,
        also when it is built later). ``wrap`` shards the module in place (its parameters become DTensors)."""
        for module in self.modules_to_train():
            wrap(module)

    def teacher_host(self) -> TeacherHost:
        """What a teacher (``algorithm.teacher``) uses of the family; only called when ``capabilities.teachers`` is
        not empty (config load refuses a teacher otherwise)."""
        raise NotImplementedError(
            f"the {self.family} family hosts no teacher ({self.capabilities.teacher_limits}); remove algorithm.teacher."
        )

    def evaluation_weights(self) -> AbstractContextManager:
        """Context in which the parameters hold the weights evaluation samples with (e.g. an EMA); the default is the
        live weights. Entered by the trainer and the CLI around ``rollout(mode="eval")``."""
        return nullcontext()

    # -- lifecycle (no-op defaults) -----------------------------------------------------------------------------------
    def on_step(self, step: int) -> None:  # noqa: B027  (a declared no-op stage)
        """Called before each training rollout with the 1-based step (sliding windows, annealed schedules)."""

    def on_inner_epoch(self, epoch: int) -> None:  # noqa: B027
        """Called before each pass over a rollout batch, ``epoch = 0`` for the scoring pass before the update too
        (d1's fresh masks per inner iteration)."""

    def after_optimizer_step(self) -> None:  # noqa: B027
        """Called after each optimizer step (EMA updates, the "old" model of likelihood-free objectives)."""

    def anchor_reference(self, weights: dict[str, torch.Tensor]) -> None:
        """Move the reference policy to ``weights`` (trained parameters by name, e.g. the best validation
        checkpoint's: ``eval.reset_to_best_every``, VAPR [18]); families that cannot refuse it at config load."""
        raise NotImplementedError(f"the {self.family} family cannot move its reference policy; unset "
                                  "eval.reset_to_best_every.")  # fmt: skip

    def random_generators(self) -> dict[str, torch.Generator]:
        """Every random generator the policy samples with, by name (none by default). Evaluation reseeds them and
        restores them afterwards (:func:`genalign.trainer.evaluate.evaluation_randomness`), so it sees the same noise
        every time and never moves the training stream; families also save them in :meth:`state_dict`."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Every piece of resumable state that :meth:`save` does not write: random generators, EMA weights,
        counters; tensors and plain values only (contract 4)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        if state:
            raise ValueError(
                f"the {self.family} policy keeps no state besides its weights, but the checkpoint holds policy state "
                f"{sorted(state)}; was it written with other policy options?"
            )


__all__ = [
    "DTYPES",
    "GUIDANCE_KEY",
    "FamilyTraits",
    "PeerModel",
    "Policy",
    "PolicyCapabilities",
    "RewardProbe",
    "Rollout",
    "RolloutRequest",
    "ScoreOutput",
    "ScoreRequest",
    "TeacherHost",
    "add_counts",
]
