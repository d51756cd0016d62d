"""Optional per-action inputs of the policy objective, beyond ``logp``, ``old_logp``, advantages and mask.

Some ratio levels and clip forms need more than the log-ratio: the entropy of each action (SSPO [15], DHPO [212]),
the log-probs of the engine that generated the rollout (IcePop [318], truncated importance sampling, off-policy
GRPO [323]), sentence boundaries (SSPO [15]), the reward spread of each sample's group (ETR [204]) or the training
progress (HölderPO's annealed ``p`` [55]). They travel in one :class:`ObjectiveContext` passed to
:func:`genalign.algorithms.policy_loss` as ``context=``; :func:`policy_loss` fills ``old_logp`` and ``mask`` itself.

Every ratio level receives the context as its fifth argument and every clip form as its third, so the call signature
of each family stays fixed; an option that needs a field the caller left ``None`` raises a ``ValueError`` naming the
field and how to provide it (:func:`require`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from torch import Tensor

from genalign.algorithms._validation import check_float_tensor, check_group_ids, check_shape


@dataclass(frozen=True)
class ObjectiveContext:
    """Extra inputs of the objective; every tensor is a constant (detached by :func:`policy_loss`).

    Attributes:
        entropy: ``[N, T]`` entropy of the policy at each action (from the scoring pass before the update).
        rollout_logp: ``[N, T]`` log-probs of the sampled actions under the *rollout engine* (e.g. vLLM), which may
            differ from ``old_logp`` recomputed by the trainer (training/inference mismatch).
        segment_ids: ``[N, T]`` integer sentence (segment) index of each action, non-decreasing along ``T``.
        group_reward_std: ``[N]`` standard deviation of the rewards of each sample's group.
        progress: training progress in ``[0, 1]`` (``step / max_steps``), for annealed hyper-parameters.
        old_logp: ``[N, T]`` the behaviour/old log-probs of the ratio (set by the trainer; :func:`policy_loss` fills
            it from its argument).
        mask: ``[N, T]`` float, 1 where an action is trained (set by the trainer; filled by :func:`policy_loss`).
        group_ids: ``[N]`` long, the group of each sample (objectives that weigh samples within their group).
        phase: the update phase being run, ``0 .. P - 1``, for objectives with registry meta ``phases = P > 1``
            (Lopti [219]: low-probability tokens first, then the rest).
    """

    entropy: Tensor | None = None
    rollout_logp: Tensor | None = None
    segment_ids: Tensor | None = None
    group_reward_std: Tensor | None = None
    progress: float | None = None
    old_logp: Tensor | None = None
    mask: Tensor | None = None
    group_ids: Tensor | None = None
    phase: int | None = None


#: How a caller provides each field, used in error messages.
_HOW_TO_PASS = {
    "entropy": "score the batch with entropy=True before the update and pass ObjectiveContext(entropy=[N, T])",
    "rollout_logp": "keep the rollout engine's log-probs of the sampled tokens and pass "
    "ObjectiveContext(rollout_logp=[N, T])",
    "segment_ids": "pass ObjectiveContext(segment_ids=[N, T]) with the sentence index of each action",
    "group_reward_std": "pass ObjectiveContext(group_reward_std=[N]) "
    "(genalign.algorithms.group_reward_std(combined_rewards, group_ids))",
    "progress": "pass ObjectiveContext(progress=step / max_steps)",
    "old_logp": "pass ObjectiveContext(old_logp=[N, T]) with the log-probs of the policy that sampled the batch",
    "mask": "pass ObjectiveContext(mask=[N, T]) with 1 where an action is trained",
    "phase": "pass ObjectiveContext(phase=p) with the update phase being run (the trainer does for objectives with "
    "meta phases > 1)",
    "group_ids": "pass ObjectiveContext(group_ids=[N]) with the group of each sample",
}


def require(context: ObjectiveContext | None, name: str, option: str) -> Tensor | float:
    """Return ``context.<name>``; raise a ``ValueError`` naming ``option`` and the fix when it is missing."""
    value = None if context is None else getattr(context, name)
    if value is None:
        raise ValueError(f"{option} needs context.{name}, which is None; {_HOW_TO_PASS.get(name, 'pass it')}")
    return value


def check_context(context: ObjectiveContext | None, shape: tuple[int, int]) -> ObjectiveContext:
    """Validate the shapes of the fields a caller set and return the context with its tensors detached."""
    if context is None:
        return ObjectiveContext()
    if not isinstance(context, ObjectiveContext):
        raise ValueError(f"context must be an ObjectiveContext or None, got {type(context).__name__}")
    values = {f.name: getattr(context, f.name) for f in fields(context)}
    for name in ("entropy", "rollout_logp", "old_logp", "mask"):
        if values[name] is not None:
            values[name] = check_shape(values[name], f"context.{name}", shape, "[N, T]").detach()
    if values["group_ids"] is not None:
        check_group_ids(values["group_ids"], shape[0], "context.group_ids")
    if values["group_reward_std"] is not None:
        values["group_reward_std"] = check_shape(
            values["group_reward_std"], "context.group_reward_std", (shape[0],), "[N]"
        ).detach()
    segment_ids = values["segment_ids"]
    if segment_ids is not None:
        if not isinstance(segment_ids, Tensor) or segment_ids.dtype.is_floating_point:
            raise ValueError("context.segment_ids must be an integer tensor of shape [N, T]")
        if tuple(segment_ids.shape) != shape:
            raise ValueError(f"context.segment_ids must have shape [N, T]={list(shape)}, got {list(segment_ids.shape)}")
        if (segment_ids.diff(dim=1) < 0).any():
            raise ValueError("context.segment_ids must be non-decreasing along T (one sentence after the other)")
    progress = values["progress"]
    if progress is not None and not 0 <= progress <= 1:
        raise ValueError(f"context.progress must be in [0, 1] (step / max_steps), got {progress!r}")
    if values["entropy"] is not None:
        check_float_tensor(values["entropy"], "context.entropy", "[N, T]")
    return ObjectiveContext(**values)
