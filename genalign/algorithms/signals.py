"""Declared signals: every named tensor the backend moves between a model family, the trainer and the registries.

A *signal* is a per-sample ``[N, ...]`` or per-action ``[N, T, ...]`` tensor (or a small value object indexed by
sample, such as :class:`~genalign.algorithms.structure.PrefixTree`) with a registered :class:`Signal` declaration:
its name, axes, dtype, whether it carries gradient, who produces it, a doc line and its source. Four producers:

* ``score`` — a *feature* of a family's scoring pass (:class:`~genalign.algorithms.scores.ScoreOutput`): entropy,
  per-action KL, hidden states, a log-prob under an altered input, ... The trainer asks for the names the configured
  methods need (:class:`~genalign.algorithms.scores.ScoreRequest`) and never names one itself.
* ``rollout`` — *structure* a family records while sampling (``Rollout.structure``): prefix trees, segment ids, noise
  levels, truncation, rewards of intermediate states, ...
* ``step`` — what the trainer's generic stages compute for every step (groups, masks, rewards, advantages, progress):
  the core of :class:`~genalign.algorithms.batch.StepBatch`.
* ``teacher`` — the judgements of the configured teacher (``algorithm.teacher``, :mod:`genalign.teachers`) of the
  sampled actions: its per-action log-probs, its entropy, ... A config whose options read one needs a teacher that
  supplies it (checked at load).
* ``source`` — what a sample source (``algorithm.sample_sources``) knows about the samples it drew or added, per
  sample (``Decision.signals``; the rule lists the names in its registry meta ``provides``): the trainer adds them to
  the rollout's structure, and a config whose rules need one that no configured sample source provides is refused.

Adding a signal is three edits, none in the trainer: declare it (:func:`declare_signal`, in the module of the rule
that reads it), compute it in the family (and list it in the family's ``PolicyCapabilities.signals``), read it in the
rule (registry meta ``needs`` + ``batch.require(name, option)``). A config whose rules need a signal the family cannot
supply is refused at load; a value that does not match its declaration is refused where it is made.

Axes: ``"N"`` is the sample axis (always first), ``"T"`` the action axis; other names (``"K"``, ``"H"``, ``"S+1"``)
are free sizes and an integer a fixed one; a trailing ``"T?"`` means the axis may be absent (``[N]`` or ``[N, T]``).
An empty tuple is a scalar (a Python number, the same for every sample).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

Producer = Literal["score", "rollout", "step", "teacher", "source"]
DType = Literal["float", "integer", "bool"]


@dataclass(frozen=True)
class Signal:
    """The declaration of one signal.

    Attributes:
        name: the key in score outputs, rollout structure, step batches and registry meta ``needs``.
        axes: e.g. ``("N", "T")``; see the module docstring.
        producer: ``score``, ``rollout``, ``step``, ``teacher`` or ``source`` (module docstring).
        doc: one line: what the value is.
        source: the methods (abstract numbers) that read it, or ``"core"``.
        dtype: ``float``, ``integer`` or ``bool``; None for value objects or any dtype.
        detached: the value never carries gradient (a feature with gradient, e.g. ``kl``, is False).
        value_type: the class of a non-tensor value (it must offer ``select(index)``), else None.
        param: what a :class:`~genalign.algorithms.scores.ScoreRequest` parameter of this feature means (e.g. the
            KL estimator's name), or None when the feature takes none.
        needs_rewards: the family measures it during the rollout with the trainer's reward probe (it cannot be
            produced where the rewards are not callable, e.g. in an asynchronous rollout process).
        check: a constraint on the value beyond its shape: ``fn(value) -> error text or None``.
        pad: how the per-sample axis after ``N`` is filled when rollouts of different widths are joined
            (:func:`~genalign.algorithms.structure.cat_structures`): ``"zero"``, ``"last"`` (each row's last entry
            repeated: keeps ids non-decreasing) or ``"nan"`` (missing values).
    """

    name: str
    axes: tuple[str | int, ...]
    producer: Producer
    doc: str
    source: str = "core"
    dtype: DType | None = "float"
    detached: bool = True
    value_type: type | None = None
    param: str | None = None
    needs_rewards: bool = False
    check: Callable[[Any], str | None] | None = None
    pad: Literal["zero", "last", "nan"] = "zero"

    @property
    def shape_text(self) -> str:
        if self.value_type is not None:
            return self.value_type.__name__
        return "[" + ", ".join(str(axis) for axis in self.axes) + "]" if self.axes else "scalar"

    @property
    def per_action(self) -> bool:
        return len(self.axes) > 1 and self.axes[1] in ("T", "T?")


#: name -> declaration, in declaration order (read it through :func:`declared`, which also loads the signals that
#: the experimental tier declares)
SIGNALS: dict[str, Signal] = {}

#: the tier that declares more signals beside its options (named, not imported: it builds on this package)
EXPERIMENTAL_CATALOGUE = "genalign.experimental"
_catalogue_loaded = False


def declared() -> dict[str, Signal]:
    """Every declaration, the experimental tier's included (its catalogue is imported on the first call)."""
    global _catalogue_loaded
    if not _catalogue_loaded:
        _catalogue_loaded = True
        importlib.import_module(EXPERIMENTAL_CATALOGUE).load_all()
    return SIGNALS


def declare_signal(name: str, axes: tuple[str | int, ...], producer: Producer, doc: str, **details: Any) -> Signal:
    """Register the declaration of signal ``name`` (see :class:`Signal` for ``details``); a name is declared once."""
    if name in SIGNALS:
        raise ValueError(f"signal {name!r} is declared twice")
    signal = Signal(name, tuple(axes), producer, doc, **details)
    SIGNALS[name] = signal
    return signal


def signal(name: str) -> Signal:
    """The declaration of ``name``, or a ``KeyError`` listing the declared names."""
    try:
        return SIGNALS[name] if name in SIGNALS else declared()[name]
    except KeyError:
        from genalign.registry import UnknownOptionError, did_you_mean

        raise UnknownOptionError(
            f"unknown signal {name!r}.{did_you_mean(name, list(SIGNALS))} Declared: {', '.join(sorted(SIGNALS))}."
        ) from None


def names_by(producer: Producer, names: Iterable[str] | None = None) -> frozenset[str]:
    """The declared names (among ``names``, default all) whose producer is ``producer``; undeclared names are
    ignored."""
    signals = declared()
    pool = signals if names is None else [name for name in names if name in signals]
    return frozenset(name for name in pool if signals[name].producer == producer)


def check_value(name: str, value: Any, *, samples: int | None, actions: int | None, where: str) -> int | None:
    """Check ``value`` against the declaration of ``name``: a ``ValueError`` naming ``where``, the signal, the
    expected and the actual shape on a mismatch. ``samples`` / ``actions`` are the sizes of ``N`` / ``T`` when known.
    Returns the size of ``T`` the value shows (None when it has no action axis)."""
    spec = signal(name)
    if not spec.axes:  # a scalar
        if (isinstance(value, Tensor) and value.numel() != 1) or not isinstance(value, (int, float, Tensor)):
            raise ValueError(f"{where}: signal {name!r} is a scalar, got {type(value).__name__}")
        problem = spec.check(value) if spec.check is not None else None
        if problem:
            raise ValueError(f"{where}: signal {name!r} {problem}")
        return None
    if spec.value_type is not None:
        if not isinstance(value, spec.value_type):
            raise ValueError(
                f"{where}: signal {name!r} must be a {spec.value_type.__name__}, got {type(value).__name__}"
            )
        size, width = getattr(value, "num_samples", None), getattr(value, "num_actions", None)
        if samples is not None and size is not None and size != samples:
            raise ValueError(f"{where}: signal {name!r} holds {size} samples, expected N = {samples}")
        if actions is not None and width is not None and spec.per_action and width != actions:
            raise ValueError(f"{where}: signal {name!r} spans {width} actions, expected T = {actions}")
        return width if spec.per_action else None
    if not isinstance(value, Tensor):
        raise ValueError(
            f"{where}: signal {name!r} must be a tensor of shape {spec.shape_text}, got {type(value).__name__}"
        )
    axes = list(spec.axes)
    if axes[-1] == "T?" and value.dim() == len(axes) - 1:
        axes = axes[:-1]
    axes = ["T" if axis == "T?" else axis for axis in axes]
    expected = {"N": samples, "T": actions}
    if value.dim() != len(axes) or any(
        (isinstance(axis, int) and size != axis) or (expected.get(axis) is not None and size != expected[axis])
        for axis, size in zip(axes, value.shape)
    ):
        known = [
            expected.get(axis) if isinstance(axis, str) and expected.get(axis) is not None else axis for axis in axes
        ]
        shown = ", ".join(map(str, known))
        raise ValueError(f"{where}: {name} must have shape {spec.shape_text}=[{shown}], got {list(value.shape)}")
    if spec.dtype == "float" and not value.is_floating_point():
        raise ValueError(f"{where}: signal {name!r} must be a float tensor, got {value.dtype}")
    if spec.dtype == "integer" and (value.is_floating_point() or value.dtype == torch.bool or value.is_complex()):
        raise ValueError(f"{where}: signal {name!r} must be an integer tensor, got {value.dtype}")
    if spec.dtype == "bool" and value.dtype != torch.bool:
        raise ValueError(f"{where}: signal {name!r} must be a bool tensor, got {value.dtype}")
    problem = spec.check(value) if spec.check is not None else None
    if problem:
        raise ValueError(f"{where}: signal {name!r} {problem}")
    return value.shape[1] if "T" in axes[1:2] else None


def select_value(value: Any, index: Tensor) -> Any:
    """The entries of a per-sample signal value at ``index`` (``[n]`` long); a scalar is returned as it is."""
    if isinstance(value, Tensor):
        return value if value.dim() == 0 else value[index.to(value.device)]
    if hasattr(value, "select"):
        return value.select(index)
    return value


def _non_decreasing(ids: Tensor) -> str | None:
    if ids.dim() == 2 and ids.shape[1] > 1 and bool((ids.diff(dim=1) < 0).any()):
        return "must be non-decreasing along T (one segment after the other)"
    return None


# ---------------------------------------------------------------------------------------------- the core declarations
# Step signals: what the trainer's generic stages compute for every step.
declare_signal("mask", ("N", "T"), "step", "1 where an action exists and is trained, 0 on padding.", dtype=None)
declare_signal("group_ids", ("N",), "step", "The group (prompt) of each sample; globally unique within a step.",
               dtype="integer")  # fmt: skip
declare_signal("behaviour_logp", ("N", "T"), "step",
               "Log-probs of the sampled actions recorded by the sampler (the rollout engine; Rollout.old_logp).")  # fmt: skip
declare_signal("old_logp", ("N", "T"), "step",
               "Log-probs of the policy the ratio is taken against (re-scored before the update, or the sampler's).")  # fmt: skip
declare_signal("rewards", ("N", "K"), "step", "The raw reward of each reward function (NaN = not applicable).")
declare_signal("combined_reward", ("N",), "step", "The combined (and shaped) reward the advantage estimator reads.")
declare_signal("sample_advantages", ("N",), "step", "The group-relative advantage of each sample.")
declare_signal("advantages", ("N", "T?"), "step", "The advantages the objective multiplies, after per-action credit.")
declare_signal("group_reward_std", ("N",), "step", "Standard deviation of the combined rewards of the sample's group.")
declare_signal("group_mean_reward", ("N",), "step",
               "Mean combined reward of the sample's group (the success rate p for 0/1 rewards).")  # fmt: skip
declare_signal("progress", (), "step", "Training progress step / max_steps in [0, 1].", dtype=None,
               check=lambda p: None if 0 <= float(p) <= 1 else f"must be in [0, 1] (step / max_steps), got {p!r}")  # fmt: skip
declare_signal("phase", (), "step", "The update phase being run (objectives with meta phases > 1).", dtype=None)

# Score features every token family computes in its chunked head pass (and flow families where it has a meaning).
declare_signal("entropy", ("N", "T"), "score", "Per-action entropy of the policy.", detached=False)
declare_signal("kl", ("N", "T"), "score", "Per-action KL to the reference policy, in the family's natural space.",
               detached=False, param="the KL estimator: k1, k2 or k3")  # fmt: skip
declare_signal("vocab_term", ("N", "T"), "score",
               "A per-token function of the next-token logits, evaluated with gradient inside the chunked head pass.",
               detached=False, param="the function fn(logits [k, V]) -> [k] (bind_vocab_term)")  # fmt: skip
declare_signal("ref_vocab_term", ("N", "T"), "score",
               "A per-token function of the policy's and the reference's next-token distributions at the same state, "
               "with gradient on the policy's side, evaluated chunk by chunk in the head pass.",
               detached=False, param="the function fn(log_probs [k, V], ref_log_probs [k, V]) -> [k] "
               "(bind_reference_vocab_term)")  # fmt: skip
declare_signal("ref_logp", ("N", "T"), "score",
               "Log-probs of the stored actions under the reference policy (the KL's reference), computed like logp.")  # fmt: skip
declare_signal("topk_logp", ("N", "T", "k"), "score", "The k largest next-token log-probabilities at each action.",
               param="k > 0")  # fmt: skip
declare_signal("hidden", ("N", "T", "H"), "score", "The last hidden state that predicts each action.")

# The score features a family computes with its reference policy (kl, ref_logp) are listed, for the config classes
# that read them without torch, as genalign.policies.capabilities.REFERENCE_FEATURES.

# Structure the families record while sampling.
declare_signal("truncated", ("N",), "rollout", "The sample hit the length limit before its end action.", dtype="bool")
declare_signal("action_ids", ("N", "T"), "rollout", "The token id of each action (token families; 0 on padding).",
               dtype="integer")  # fmt: skip
declare_signal("segment_ids", ("N", "T"), "rollout",
               "The segment (sentence or reasoning step) of each action, non-decreasing along T.", dtype="integer",
               check=_non_decreasing, pad="last")  # fmt: skip
declare_signal("step_std", ("N", "T"), "rollout",
               "Standard deviation of the transition each action sampled (flow SDE steps; 0 for deterministic ones).")  # fmt: skip

# Structure of multi-turn rollouts (token families with environments, genalign.environments).
declare_signal("turn_ids", ("N", "T"), "rollout",
               "The model turn (from 0) of each action position; environment tokens carry the turn they answer.",
               dtype="integer", check=_non_decreasing, pad="last")  # fmt: skip
declare_signal("turn_rewards", ("N", "K"), "rollout",
               "The environment's reward of each model turn (StepResult.reward); NaN where it gave none.", pad="nan")  # fmt: skip
declare_signal("tool_calls", ("N",), "rollout", "Tool calls the sample made over its episode (errors included).",
               dtype="integer")  # fmt: skip

# What the configured teacher (algorithm.teacher, genalign.teachers) says of the sampled actions; 0 on padding and on
# the samples it did not score.
declare_signal("teacher_scored", ("N",), "teacher",
               "The teacher scored the sample (False: a remote teacher failed on it; it gets no teacher term).",
               dtype="bool", source="[13] [88] [93] [107] [130] (on-policy distillation)")  # fmt: skip
declare_signal("teacher_action_logp", ("N", "T"), "teacher",
               "The teacher's log-probability of each sampled action, after the prompt as the teacher sees it (with "
               "its privileged context), at the sampling temperature.",
               source="[13] [88] [93] [107] [130] (on-policy distillation)")  # fmt: skip
declare_signal("teacher_entropy", ("N", "T"), "teacher",
               "Entropy of the teacher's next-token distribution at each action (from its chunked head pass).",
               source="[262] SRPO")  # fmt: skip
declare_signal("teacher_contrast_logp", ("N", "T"), "teacher",
               "The teacher's log-probability of each action under its contrast context (e.g. a wrong hint).",
               source="[135] RLCSD")  # fmt: skip
declare_signal("teacher_vocab_reverse_kl", ("N", "T"), "teacher",
               "KL(π_S ‖ π_T) over the whole vocabulary at each action (the full-distribution teacher pass).",
               source="[107] COPSD [85] AlignDistil")  # fmt: skip
declare_signal("teacher_vocab_forward_kl", ("N", "T"), "teacher",
               "KL(π_T ‖ π_S) over the whole vocabulary at each action (the full-distribution teacher pass).",
               source="[107] COPSD")  # fmt: skip
declare_signal("teacher_anchor_logp", ("N", "T"), "teacher",
               "The teacher's anchor model's log-probability of each action (algorithm.teacher.distribution.anchor).",
               source="[89] RTO")  # fmt: skip
declare_signal("teacher_extrapolation", ("N", "T"), "teacher",
               "The logit-extrapolation weight w_t of the teacher's synthetic distribution s_T + w_t (s_T − s_anchor).",
               source="[85] AlignDistil")  # fmt: skip
