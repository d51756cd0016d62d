"""What a model family declares as data, importable without torch (config checks read it): its
:class:`PolicyCapabilities` (what its rollouts and scoring can supply with given options) and its
:class:`FamilyTraits` (what the layers above the policy need to know about it). The policy contract itself is
:mod:`genalign.policies.base`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from genalign.catalog.registries import declared_signals, signals_by

#: Score features a family computes with its reference policy (requesting one loads the reference; declared in
#: :mod:`genalign.algorithms.signals`).
REFERENCE_FEATURES = frozenset({"kl", "ref_logp"})


@dataclass(frozen=True)
class FamilyTraits:
    """What the layers above the policy (the planner, export, ``genalign sample``, the dashboard) need to know about a
    family, as data: a family config class declares them as its ``traits`` class attribute, and those layers read them
    instead of comparing family names (:func:`genalign.policies.family_traits`).

    Attributes:
        workload: the memory model ``genalign plan`` builds (a key of
            :data:`genalign.planning.estimate.WORKLOADS`: ``token``, ``vision_token``, ``masked_diffusion``,
            ``flow``), or None when the planner has none for the family.
        media_samples: samples are images or videos (written to files) rather than text.
        image_inputs: dataset rows may carry input images (``genalign sample --image``).
        export_format: the folder ``genalign export`` writes (a key of :data:`genalign.export.command.WRITERS`:
            ``token_lm`` for a transformers folder, ``diffusers`` for a diffusers pipeline folder).
        suggested_lora_rank: the LoRA rank the planner suggests for a full fine-tuning config that does not fit.
        suggest_checkpointing: the planner may suggest ``policy.gradient_checkpointing=true``.
        sample_batch_field: the policy field that bounds the samples generated per forward (halved by the planner's
            suggestions), or None.
        action_unit: what one trained action of a sample is, for the dashboard's length panel.
    """

    workload: str | None = None
    media_samples: bool = False
    image_inputs: bool = False
    export_format: str = "token_lm"
    suggested_lora_rank: int = 64
    suggest_checkpointing: bool = True
    sample_batch_field: str | None = None
    action_unit: str = "actions per sample"


@dataclass(frozen=True)
class PolicyCapabilities:
    """What a family (with its configured options) can supply; checked against the algorithm's needs at config load.

    Attributes:
        rollout_logp_is_exact: the sampler's log-probs come from the code path of ``score`` (bit-exact old log-probs).
        signals: the declared signals (:mod:`genalign.algorithms.signals`) it can produce: score features its
            ``score`` computes on request, and rollout structure its training rollouts record on request.
        group_size: the only group size its training rollouts can produce (tree rollouts: the leaves per prompt), or
            None when any ``algorithm.group_size`` works.
        forced_completions: :meth:`Policy.force` builds rollouts of given completions (replayed samples, reference
            solutions) and of given starts it continues by sampling, and training rollouts carry the ``action_ids``
            signal so that samples can be stored.
        guidance: the keys of a row's :data:`genalign.policies.base.GUIDANCE_KEY` dict its training rollouts honour (``hint``: text added
            to the prompt; ``prefix``: text the completion is forced to start with, conditioning only;
            ``temperature``: this row's sampling temperature).
        rollout_calls_rewards: its training rollouts call the trainer's reward probe with these options (e.g. a
            noise search that ranks initial noises by reward), so they cannot run where the rewards are not callable.
        teachers: the kinds of teacher (``algorithm.teacher``, :mod:`genalign.teachers`) it hosts through
            :meth:`~genalign.policies.base.Policy.teacher_host`: ``model`` (another model of the family, same
            tokenizer), ``self`` (its own current weights), ``reference`` (its base weights: the reference),
            ``context`` (a teacher that sees the prompt with privileged context added), ``remote`` (a server scoring
            the sampled token ids), ``generate`` (a model or self teacher that writes completions for sample
            sources, :meth:`~genalign.policies.base.TeacherHost.write_with`), ``distribution`` (the full-distribution
            pass of :mod:`genalign.teachers.distribution`: ``TeacherHost.head_logits``).
        teacher_limits: why the kinds it does not host are refused (in the config-load error).
        trained_action_scoring: :meth:`~genalign.policies.base.Policy.restrict_to_trained` cuts a rollout's scoring
            pass to its trained actions (``algorithm.score_only_trained``).
    """

    rollout_logp_is_exact: bool = False
    signals: frozenset[str] = frozenset()
    group_size: int | None = None
    forced_completions: bool = False
    guidance: frozenset[str] = frozenset()
    rollout_calls_rewards: bool = False
    teachers: frozenset[str] = frozenset()
    teacher_limits: str = "this family hosts no teacher"
    trained_action_scoring: bool = False

    def missing(self, needs: Iterable[str]) -> list[str]:
        """The signals among ``needs`` a family must produce (score features, rollout structure) that this one cannot
        (step signals such as ``behaviour_logp`` or ``progress`` come from the trainer and are always available)."""
        needs = list(needs)
        family_made = signals_by("score", needs) | signals_by("rollout", needs)
        return sorted(family_made - self.signals)

    def undeclared(self) -> list[str]:
        """Names in :attr:`signals` that no declaration knows (a typo, or a module that declares them not imported)."""
        signals = declared_signals()
        return sorted(name for name in self.signals if name not in signals)


__all__ = ["REFERENCE_FEATURES", "FamilyTraits", "PolicyCapabilities"]
