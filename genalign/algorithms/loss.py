"""The per-micro-batch loss of the update, with every option bound once (formulas.md §2-§4):

    L_it = objective_it + β·KL_it (KL in the loss) + c_reg·regulariser_it − c_H·H_it      -> aggregate(L, mask, N_global)

The trainer builds one :class:`LossPlan` per run (:meth:`LossPlan.build`), asks it what each micro-batch's scoring pass
must return (:meth:`LossPlan.score_request`), sums :meth:`LossPlan.normalizer` over the optimisation batch (all
micro-batches, all processes), and calls the plan on each micro-batch's score and slice of the step batch. Loss math
lives here, never in the optimisation loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from genalign.algorithms.aggregation import AGGREGATIONS, aggregate, loss_normalizer
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.clip_forms import CLIP_FORMS
from genalign.algorithms.kl import importance_weighted_kl
from genalign.algorithms.objectives import OBJECTIVES, objective_hyperparameters
from genalign.algorithms.options import Option, bind_option, check_hyperparameters
from genalign.algorithms.ratio_levels import RATIO_LEVELS
from genalign.algorithms.regularizers import REGULARIZERS, bind_reference_vocab_term, bind_vocab_term
from genalign.algorithms.scores import ScoreOutput, ScoreRequest
from genalign.algorithms.signals import names_by


@dataclass
class LossPlan:
    """Bound options of the update's loss (build with :meth:`build`).

    Attributes:
        objective: the bound objective ``(score, advantages, batch) -> (loss [n, T], metrics)``.
        needs: the signals the objective (with its ratio level and clip form) and the regulariser read.
        phases: how many times the update runs over the batch (objective meta ``phases``).
        uses_old_logp: the objective reads ``old_logp`` (objective meta; likelihood-free ones do not).
        kl_coef, kl_estimator, kl_importance: the KL term of the loss (``kl_coef = 0``: none).
        regularizer, regularizer_coef, vocab_term, ref_vocab_term: a per-action regulariser and the vocabulary term
            (of the policy's distribution, or of the policy's and the reference's) it reads.
        entropy_coef: the entropy bonus.
        aggregation: the aggregation mode with its keywords.
    """

    objective: Callable[..., tuple[Tensor, dict[str, Tensor]]]
    needs: frozenset[str]
    phases: int = 1
    uses_old_logp: bool = True
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_importance: str = "none"
    regularizer: Callable[..., Tensor] | None = None
    regularizer_coef: float = 1.0
    vocab_term: Callable[[Tensor], Tensor] | None = None
    ref_vocab_term: Callable[[Tensor, Tensor], Tensor] | None = None
    entropy_coef: float = 0.0
    aggregation: Option = field(default_factory=lambda: Option("token_mean"))

    @classmethod
    def build(
        cls,
        *,
        objective: Option,
        ratio_level: Option | None = None,
        clip: Option | None = None,
        regularizer: Option | None = None,
        regularizer_coef: float = 1.0,
        kl_coef: float = 0.0,
        kl_estimator: str = "k3",
        kl_importance: str = "none",
        entropy_coef: float = 0.0,
        aggregation: Option = Option("token_mean"),
    ) -> LossPlan:
        """Validate and bind every option. ``ratio_level`` / ``clip`` are those of a ratio objective (objective meta
        ``ratio``), each with its own keywords (``objective`` holds only the objective's own); ``kl_coef`` is the β of
        a KL *in the loss* (0 when the KL goes in the reward)."""
        meta = OBJECTIVES.meta(objective.name)
        needs = set(meta.get("needs", ()))
        args = objective_hyperparameters(objective, ratio_level=ratio_level, clip=clip)
        if meta.get("ratio", False):
            level, form = ratio_level or Option("token"), clip or Option("ppo")
            needs |= set(RATIO_LEVELS.meta(level.name).get("needs", ())) | set(
                CLIP_FORMS.meta(form.name).get("needs", ())
            )
        bound_regularizer = vocab = ref_vocab = None
        if regularizer is not None:
            bound_regularizer = bind_option(REGULARIZERS, regularizer.name, regularizer.args)
            needs |= set(REGULARIZERS.meta(regularizer.name).get("needs", ()))
            if "vocab_term" in needs:
                vocab = bind_vocab_term(regularizer.name, **regularizer.args)
            if "ref_vocab_term" in needs:
                ref_vocab = bind_reference_vocab_term(regularizer.name, **regularizer.args)
        check_hyperparameters(AGGREGATIONS, aggregation.name, aggregation.args)
        return cls(
            objective=bind_option(OBJECTIVES, objective.name, args),
            needs=frozenset(needs),
            phases=int(meta.get("phases", 1)),
            uses_old_logp=bool(meta.get("uses_old_logp", True)),
            kl_coef=kl_coef,
            kl_estimator=kl_estimator,
            kl_importance=kl_importance,
            regularizer=bound_regularizer,
            regularizer_coef=regularizer_coef,
            vocab_term=vocab,
            ref_vocab_term=ref_vocab,
            entropy_coef=entropy_coef,
            aggregation=aggregation,
        )

    def score_request(self, supplied: frozenset[str]) -> ScoreRequest:
        """What each micro-batch's scoring pass returns: the score features the options read, the KL of a KL term,
        the vocabulary term of a vocabulary regulariser, and the entropy whenever the family ``supplied`` it (it is
        logged and watched for collapse)."""
        features = set(names_by("score", self.needs))
        params: dict[str, Any] = {}
        if self.kl_coef > 0 or "kl" in features:
            features.add("kl")
            params["kl"] = self.kl_estimator
        if self.vocab_term is not None:
            params["vocab_term"] = self.vocab_term
        if self.ref_vocab_term is not None:
            params["ref_vocab_term"] = self.ref_vocab_term
        if self.entropy_coef or "entropy" in supplied:
            features.add("entropy")
        return ScoreRequest(frozenset(features), params)

    def normalizer(self, mask: Tensor, advantages: Tensor) -> Tensor:
        """The additive statistics ``[S]`` of one micro-batch's ``mask`` ``[n, T]`` for the aggregation (sum them over
        the optimisation batch and all processes)."""
        return loss_normalizer(mask, self.aggregation.name, advantages=advantages, **self.aggregation.args)

    def __call__(self, score: ScoreOutput, batch: StepBatch, normalizer: Tensor) -> tuple[Tensor, dict[str, Any]]:
        """The aggregated loss of one micro-batch (to backpropagate) and its metrics.

        Args:
            score: the micro-batch's scoring pass (:meth:`score_request`).
            batch: its slice of the step batch: ``mask``, ``advantages``, ``old_logp`` (absent: the update is fully
                on-policy and the detached current log-probs stand in, so every ratio is exactly 1), ``phase`` and
                whatever the options read.
            normalizer: the global normaliser of the optimisation batch.
        Returns:
            ``(loss, metrics)``: the objective's metrics plus the mean ``entropy`` and ``kl`` over the valid actions
            when the pass returned them.
        """
        logp = score.logp.float()  # [m, T]
        device = logp.device
        batch = batch.to(device)
        mask = batch.mask  # [m, T]
        advantages = batch.require("advantages", "the loss")  # [m] or [m, T]
        old = batch.get("old_logp")
        old = logp.detach() if old is None else old  # [m, T]
        current = {name: value.detach().float() for name, value in score.items() if isinstance(value, Tensor)}
        view = batch.with_values(current, old_logp=old)
        per_action, metrics = self.objective(score, advantages, view)  # [m, T]
        if self.kl_coef > 0:
            per_action = per_action + self.kl_coef * self._kl_term(score["kl"].float(), logp, old, mask)  # [m, T]
        if self.regularizer is not None:
            term = self.regularizer(ScoreOutput(logp, score.features), advantages, view)  # [m, T]
            per_action = per_action + self.regularizer_coef * term  # [m, T]
        if self.entropy_coef and "entropy" in score:
            per_action = per_action - self.entropy_coef * score["entropy"].float()  # [m, T]
        loss = aggregate(
            per_action,
            mask,
            self.aggregation.name,
            normalizer.to(device),
            advantages=advantages,
            **self.aggregation.args,
        )
        weight = mask.sum().clamp_min(1.0)
        for name in ("entropy", "kl"):
            if name in score:
                metrics = {**metrics, name: (score[name].detach().float() * mask).sum() / weight}
        return loss, metrics

    def _kl_term(self, kl: Tensor, logp: Tensor, old: Tensor, mask: Tensor) -> Tensor:
        """The per-action KL of the loss ``[m, T]``, times the importance ratio when ``kl_importance`` asks."""
        if self.kl_importance == "none":
            return kl
        return importance_weighted_kl(kl, logp, old, mask, level=self.kl_importance)
