"""The advantage stage of a step, with every option bound once: rewards ``[N, K]`` -> combined reward -> (KL in the
reward) -> reward shapers -> advantage estimator -> group statistics, over the global batch; then per-action credit
over each process's batch (formulas.md §1).

The trainer builds one :class:`AdvantageStage` per run (:meth:`AdvantageStage.build`) and, every step:

1. scores the rollout before the update with :meth:`AdvantageStage.prepass` (the features the credit rules and
   shapers read, and the KL of a KL-in-reward), when it asks for any;
2. gathers, from every process, the rewards, groups and :meth:`AdvantageStage.gathered` signals into one
   :class:`~genalign.algorithms.batch.StepBatch` and calls :meth:`AdvantageStage.sample_advantages`;
3. adds this process's slice of the result to its own batch and calls :meth:`AdvantageStage.credit`.

Stateful options (an estimator or a combiner that reads earlier steps) keep their statistics in the bound option and
are updated here, after the step's own advantages; :meth:`AdvantageStage.stateful` hands them to the trainer's
checkpoint. No signal is named here beyond the core step signals.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from genalign.algorithms.advantages import ADVANTAGE_ESTIMATORS
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit import CREDIT_RULES, apply_credit, check_rule_order
from genalign.algorithms.group_filters import frac_reward_zero_std, group_reward_std, zero_std_mask
from genalign.algorithms.kl import kl_in_reward
from genalign.algorithms.options import Option, Stateful, bind_option
from genalign.algorithms.reward_combiners import REWARD_COMBINERS
from genalign.algorithms.reward_shaping import REWARD_SHAPERS
from genalign.algorithms.scores import ScoreRequest
from genalign.algorithms.signals import declare_signal, names_by

declare_signal("reward_zero_std", ("N",), "step",
               "The sample's group has (near-)identical combined rewards (no learning signal).", dtype="bool")  # fmt: skip


@dataclass
class AdvantageStage:
    """Bound options of the advantage stage (build with :meth:`build`).

    Attributes:
        combiner, estimator: the bound reward combiner and advantage estimator.
        shapers, credit: ``(name, bound option)`` pairs, in order.
        needs: the signals the shapers and credit rules read (their registry meta ``needs``).
        advantage_clip: clip the advantages to ``[-c, c]`` (None: no clipping).
        kl_in_reward: ``β`` of a KL subtracted from the reward (0: none); kl_estimator: its estimator.
        zero_std_tol: a group whose reward std is at most this has no spread.
    """

    combiner: Callable[..., tuple[Tensor, dict[str, float]]]
    estimator: Callable[[Tensor, Tensor], Tensor]
    shapers: list[tuple[str, Callable[..., tuple[Tensor, dict[str, float]]]]]
    credit: list[tuple[str, Callable[..., Tensor]]]
    needs: frozenset[str]
    shaper_needs: frozenset[str]
    advantage_clip: float | None = None
    kl_in_reward: float = 0.0
    kl_estimator: str = "k3"
    zero_std_tol: float = 1e-6
    vocab_term: Callable[[Tensor], Tensor] | None = None  # the pre-update pass's ``vocab_term`` (a rule's meta)

    @classmethod
    def build(
        cls,
        *,
        combiner: Option,
        estimator: Option,
        shapers: Sequence[Option] = (),
        credit: Sequence[Option] = (),
        advantage_clip: float | None = None,
        kl_in_reward: float = 0.0,
        kl_estimator: str = "k3",
        zero_std_tol: float = 1e-6,
    ) -> AdvantageStage:
        """Validate and bind every option (unknown names and keywords raise with a did-you-mean hint)."""
        if advantage_clip is not None and not advantage_clip > 0:
            raise ValueError(f"advantage clip must be a positive number or None, got {advantage_clip!r}")
        check_rule_order([rule.name for rule in credit])
        shaper_needs = frozenset(n for s in shapers for n in REWARD_SHAPERS.meta(s.name).get("needs", ()))
        credit_needs = frozenset(n for r in credit for n in CREDIT_RULES.meta(r.name).get("needs", ()))
        return cls(
            combiner=bind_option(REWARD_COMBINERS, combiner.name, combiner.args),
            estimator=bind_option(ADVANTAGE_ESTIMATORS, estimator.name, estimator.args),
            shapers=[(s.name, bind_option(REWARD_SHAPERS, s.name, s.args)) for s in shapers],
            credit=[(r.name, bind_option(CREDIT_RULES, r.name, r.args)) for r in credit],
            needs=shaper_needs | credit_needs,
            shaper_needs=shaper_needs,
            advantage_clip=advantage_clip,
            kl_in_reward=kl_in_reward,
            kl_estimator=kl_estimator,
            zero_std_tol=zero_std_tol,
            vocab_term=_prepass_vocab_term(
                [("reward shaper", REWARD_SHAPERS, s) for s in shapers]
                + [("credit rule", CREDIT_RULES, r) for r in credit]
            ),
        )

    # -- what the trainer computes for the stage -------------------------------------------------------------------
    def prepass(self) -> ScoreRequest | None:
        """The features a scoring pass before the update must return (those the rules and shapers read, and ``kl``
        for a KL in the reward: ``k1`` when a credit rule reads the KL, else the configured estimator), or None."""
        features = names_by("score", self.needs)
        if self.kl_in_reward > 0:
            features |= {"kl"}
        if not features:
            return None
        params = {"kl": "k1" if "kl" in self.needs else self.kl_estimator} if "kl" in features else {}
        if "vocab_term" in features:
            params["vocab_term"] = self.vocab_term
        return ScoreRequest(features, params)

    def gathered(self) -> frozenset[str]:
        """Signals of each process's batch that :meth:`sample_advantages` reads from the global batch (besides
        ``rewards`` and ``group_ids``)."""
        names = set(self.shaper_needs)
        if self.kl_in_reward > 0:
            names.add("kl")
        return frozenset(names | {"mask"}) if names else frozenset()

    def stateful(self) -> dict[str, Stateful]:
        """The bound options that keep state across steps, by config field."""
        parts = {"advantage": self.estimator, "reward_combination": self.combiner}
        parts |= {f"reward_shaping.{name}": shaper for name, shaper in self.shapers}
        parts |= {f"credit.{name}": rule for name, rule in self.credit}
        return {key: part for key, part in parts.items() if isinstance(part, Stateful)}

    # -- the stage ------------------------------------------------------------------------------------------------
    def sample_advantages(self, batch: StepBatch, weights: Tensor) -> tuple[dict[str, Tensor], dict[str, float]]:
        """Advantages and group statistics of the global batch.

        Args:
            batch: every process's samples: ``rewards`` ``[N, K]`` (NaN = not applicable), ``group_ids`` ``[N]``
                (globally unique) and the :meth:`gathered` signals.
            weights: ``[K]`` reward weights.
        Returns:
            ``[N]`` tensors by signal name (``sample_advantages``, ``combined_reward``, ``group_reward_std``,
            ``group_mean_reward``, ``reward_zero_std``) and statistics for logging.
        """
        rewards, group_ids = batch.require("rewards", "the advantage stage"), batch.group_ids
        combined, stats = self.combiner(rewards, group_ids, weights)  # [N]
        if hasattr(self.combiner, "update"):
            self.combiner.update(rewards, group_ids)  # AFTER this step's combination
        if self.kl_in_reward > 0:
            kl_per_sample = (batch.require("kl", "a KL in the reward") * batch.mask).sum(1)  # [N]
            combined = kl_in_reward(combined, kl_per_sample, self.kl_in_reward)
        for _, shaper in self.shapers:
            combined, shaped = shaper(combined, batch)  # [N]
            stats = {**stats, **shaped}
        advantages = self.estimator(combined, group_ids)  # [N]
        if self.advantage_clip is not None:
            advantages = advantages.clamp(-self.advantage_clip, self.advantage_clip)
        if hasattr(self.estimator, "update"):
            self.estimator.update(combined, group_ids)  # AFTER this step's advantages
        return self._with_group_statistics(advantages, combined, group_ids, stats)

    def _with_group_statistics(
        self, advantages: Tensor, combined: Tensor, group_ids: Tensor, stats: dict[str, Any]
    ) -> tuple[dict[str, Tensor], dict[str, float]]:
        group_std = group_reward_std(combined, group_ids)  # [N]
        groups = group_ids.unique(return_inverse=True)[1]  # [N] in 0..G-1
        valid = ~combined.isnan()
        sums = torch.zeros(int(groups.max()) + 1).index_add_(0, groups, torch.where(valid, combined, 0.0).float())
        counts = torch.zeros_like(sums).index_add_(0, groups, valid.float())
        group_mean = (sums / counts.clamp_min(1))[groups]  # [N]
        zero_std = zero_std_mask(combined, group_ids, tol=self.zero_std_tol)  # [N]
        stats = dict(stats)
        stats["frac_reward_zero_std"] = float(frac_reward_zero_std(combined, group_ids, tol=self.zero_std_tol))
        stats["advantage/abs_mean"] = float(advantages.abs().mean())
        present = combined[~combined.isnan()]
        stats["reward/mean"] = float(present.mean()) if present.numel() else float("nan")
        stats["reward/std"] = float(present.std()) if present.numel() > 1 else 0.0
        values = {
            "sample_advantages": advantages,
            "combined_reward": combined,
            "group_reward_std": group_std,
            "group_mean_reward": group_mean,
            "reward_zero_std": zero_std,
        }
        return values, stats

    def credit_advantages(self, batch: StepBatch) -> Tensor:
        """``[n]`` sample advantages, or ``[n, T]`` after the credit rules, of this process's ``batch``."""
        return apply_credit([rule for _, rule in self.credit], batch["sample_advantages"], batch)


def _prepass_vocab_term(options: list[tuple[str, Any, Option]]) -> Callable[[Tensor], Tensor] | None:
    """The ``vocab_term`` function of the pre-update scoring pass: the registry meta ``vocab_term`` of the one
    shaper or credit rule that reads the signal, with its hyper-parameters bound and checked on a dummy ``[1, 2]``
    logits row (e.g. LaSeR's self-reward bonus [208]); None when no option reads it. Two options that read it
    would need two terms of one pass: refused."""
    readers = [(kind, registry, option) for kind, registry, option in options
               if "vocab_term" in registry.meta(option.name).get("needs", ())]  # fmt: skip
    if len(readers) > 1:
        names = ", ".join(f"{kind} {option.name!r}" for kind, _, option in readers)
        raise ValueError(f"{names} each read the pre-update pass's vocab_term; one pass computes one term: keep one.")
    if not readers:
        return None
    kind, registry, option = readers[0]
    term = registry.meta(option.name).get("vocab_term")
    if term is None:
        raise ValueError(f"{kind} {option.name!r} reads vocab_term but declares no registry meta 'vocab_term'.")
    bound = functools.partial(term, **option.args)
    bound(torch.zeros(1, 2))  # validates the hyper-parameters before any model runs
    return bound
