"""The option pieces of the token-LM families' configs (causal LM, VLM, masked-diffusion LM), importable without torch
so that a config is read and checked without the model libraries: the attention kernel, the reference policy a LoRA
configuration implies, the declared capabilities of a token family, the guidance keys the families honour, and the
options of shared-prefix trees (``policy.tree``) and of the rollout-time probes (``policy.probes``). The code that uses
them lives in :mod:`genalign.policies.lm.core`, :mod:`~genalign.policies.lm.reference`,
:mod:`~genalign.policies.lm.trees`, :mod:`~genalign.policies.lm.probes` and :mod:`~genalign.policies.lm.guidance`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from genalign.policies.capabilities import REFERENCE_FEATURES, PolicyCapabilities
from genalign.policies.lora import TOKEN_LORA, LoRAConfig
from genalign.registry import Option

if TYPE_CHECKING:
    from torch import Tensor

    from genalign.policies.lm.engines.tree import LMTreePlan

#: The reference's own per-action entropy (declared with its reader, the ``response_weighted_kl`` regulariser [18]): a
#: reference feature of the families that compute ``entropy``.
REFERENCE_ENTROPY = frozenset({"ref_entropy"})
#: Score features every autoregressive token family computes in its chunked head pass (``kl`` needs a reference).
AUTOREGRESSIVE_FEATURES = frozenset({"entropy", "vocab_term", "topk_logp", "hidden"})
#: Rollout structure every autoregressive token family can fill.
AUTOREGRESSIVE_STRUCTURE = frozenset({"truncated", "segment_ids", "action_ids", "prefix_tree"})


#: Attention kernels by transformers' name (``attn_implementation``); a family's ``None`` passes nothing, so
#: transformers keeps its own choice (``sdpa`` where the model supports it, else ``eager``).
AttnImplementation = Literal["eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"]

#: ``policy.reference`` as written, and as resolved against the LoRA options (:func:`resolve_reference_mode`)
ReferenceMode = Literal["auto", "lora_disabled", "frozen_copy", "none"]
ResolvedReferenceMode = Literal["lora_disabled", "frozen_copy", "none"]


def resolve_reference_mode(
    mode: ReferenceMode, lora_enabled: bool, *, adapters_off_is_base: bool = True
) -> ResolvedReferenceMode:
    """``auto`` -> ``lora_disabled`` with LoRA whose disabled adapters leave the original model
    (``adapters_off_is_base``, see :attr:`~genalign.policies.lm.lora.LoRAConfig.adapters_off_is_base`), else
    ``frozen_copy``."""
    if mode == "auto":
        return "lora_disabled" if lora_enabled and adapters_off_is_base else "frozen_copy"
    if mode == "lora_disabled" and not lora_enabled:
        raise ValueError("policy.reference='lora_disabled' needs policy.lora.rank > 0; use 'frozen_copy' or 'auto'.")
    if mode == "lora_disabled" and not adapters_off_is_base:
        raise ValueError(
            "policy.reference='lora_disabled' with policy.lora.init_lora_weights 'pissa'/'olora' or policy.lora.bias "
            "other than 'none': disabling the adapters does not give the original model back; use 'frozen_copy' or "
            "'auto'."
        )
    return mode


def lora_reference_mode(lora: LoRAConfig, reference: ReferenceMode) -> ResolvedReferenceMode:
    """Validate ``lora`` and resolve ``policy.reference`` against it (raises a ``ValueError`` naming the option):
    ``auto`` is the model with adapters disabled when that is the original model, else a frozen copy."""
    lora.validate(TOKEN_LORA)
    return resolve_reference_mode(reference, lora.rank > 0, adapters_off_is_base=lora.adapters_off_is_base)


def token_capabilities(
    reference: ReferenceMode,
    *,
    features: frozenset[str] = AUTOREGRESSIVE_FEATURES,
    structure: frozenset[str] = AUTOREGRESSIVE_STRUCTURE,
    group_size: int | None = None,
) -> PolicyCapabilities:
    """Capabilities of a token family: the score ``features`` (plus ``kl`` and ``ref_logp`` unless ``policy.reference``
    is ``none``: every other mode of a valid config resolves to a reference, see :func:`resolve_reference_mode`; and
    ``ref_entropy`` when the family also computes ``entropy``) and the rollout ``structure`` signals. Re-scoring with a
    KV cache differs from a full forward by float rounding, so ``rollout_logp_is_exact`` is False."""
    reference_features = REFERENCE_FEATURES | (REFERENCE_ENTROPY if "entropy" in features else frozenset())
    kl = reference_features if reference != "none" else frozenset()
    return PolicyCapabilities(rollout_logp_is_exact=False, signals=features | kl | structure, group_size=group_size)


#: The guidance keys the token-LM families honour (``PolicyCapabilities.guidance``).
GUIDANCE_KEYS = frozenset({"hint", "prefix", "temperature", "self_hint"})


@dataclass
class LMTreeConfig:
    """Tree rollouts of a causal LM (``policy.tree``); ``algorithm.group_size`` must equal
    ``trees_per_prompt * prod(branching)``."""

    enabled: bool = field(default=False, metadata={"help": "Sample each group as the leaves of shared-prefix trees."})
    split_positions: list[int] = field(
        default_factory=lambda: [8, 16, 24, 32],
        metadata={"help": "Completion positions (>= 1, increasing) where every node splits; earliest in entropy mode."},
    )
    branching: list[int] = field(
        default_factory=lambda: [2, 2, 2, 2],
        metadata={"help": "Children per split, one count >= 2 per split position; leaves = their product."},
    )
    trees_per_prompt: int = field(
        default=1, metadata={"help": "Trees per prompt (Tree-GRPO's inter-tree level needs >= 2)."}
    )
    entropy_threshold: float | None = field(
        default=None,
        metadata={
            "help": "Split at the first token from the split position on with entropy >= this (nats); null = fixed."
        },
    )
    entropy_window: int = field(
        default=8,
        metadata={"help": "Entropy and segment modes: split at the latest this many tokens after the split position."},
    )
    at_segment_boundaries: bool = field(
        default=False,
        metadata={
            "help": "Split at the first token from the split position on that starts a new segment (after a newline "
            "or a sentence end: a new reasoning step)."
        },
    )

    @property
    def num_leaves(self) -> int:
        return math.prod(self.branching)

    @property
    def group_size(self) -> int:
        return self.trees_per_prompt * self.num_leaves

    def plan(self, boundary_table: Tensor | None = None) -> LMTreePlan:
        """The engine's plan; ``boundary_table`` ``[V]`` bool (the tokenizer's segment boundaries) is used in segment
        mode."""
        from genalign.policies.lm.engines.tree import LMTreePlan

        return LMTreePlan(
            split_positions=tuple(self.split_positions),
            branching=tuple(self.branching),
            entropy_threshold=self.entropy_threshold,
            entropy_window=self.entropy_window,
            boundary_table=boundary_table if self.at_segment_boundaries else None,
        )

    def validate(self, *, max_new_tokens: int | None = None, engine: str | None = None) -> None:
        """Raise a ``ValueError`` naming the first bad option, its value and the fix (nothing when disabled); the
        checks against ``policy.max_new_tokens`` and ``policy.engine`` run when they are given (the policy config's
        own ``validate`` gives them)."""
        if not self.enabled:
            return
        positions = self.split_positions
        checks: list[tuple[bool, str]] = [
            (
                engine in (None, "static"),
                f"policy.tree.enabled=true needs policy.engine='static', got {engine!r}; set it.",
            ),
            (
                bool(positions) and positions == sorted(set(positions)) and positions[0] >= 1,
                f"policy.tree.split_positions={positions} must be non-empty, strictly increasing and >= 1 (a split "
                "at 0 shares no token), e.g. [8, 16, 24, 32].",
            ),
            (
                not positions or max_new_tokens is None or positions[-1] < max_new_tokens,
                f"policy.tree.split_positions={positions} must be < policy.max_new_tokens={max_new_tokens}; lower "
                "them or raise max_new_tokens.",
            ),
            (
                len(self.branching) == len(positions) and all(k >= 2 for k in self.branching),
                f"policy.tree.branching={self.branching} needs one count >= 2 per split position ({len(positions)}).",
            ),
            (self.trees_per_prompt >= 1, f"policy.tree.trees_per_prompt={self.trees_per_prompt} must be >= 1."),
            (
                self.entropy_threshold is None or self.entropy_threshold > 0,
                f"policy.tree.entropy_threshold={self.entropy_threshold} must be > 0 (e.g. 1.0) or null.",
            ),
            (self.entropy_window >= 0, f"policy.tree.entropy_window={self.entropy_window} must be >= 0 (e.g. 8)."),
            (
                not (self.at_segment_boundaries and self.entropy_threshold is not None),
                "policy.tree.at_segment_boundaries=true with policy.tree.entropy_threshold set: split at high entropy "
                "or at segment boundaries; unset one.",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


@dataclass
class TokenJudgeOptions:
    """The token judge of a token family (``policy.probes.token_judge`` of causal LMs, ``policy.token_judge`` of
    VLMs): its spans of each completion become the ``token_judgement`` rollout signal
    (:func:`genalign.policies.lm.probes.judge_tokens`)."""

    judge: Option | None = field(
        default=None,
        metadata={
            "help": "Token judge (genalign.rewards.token_judges.TOKEN_JUDGES), e.g. arithmetic_claims or {name: "
            "arithmetic_claims, scope: step}; None: no token_judgement signal."
        },
    )
    votes: int = field(default=1, metadata={"help": "Calls of the judge per completion (its critiques)."})
    vote: Literal["mean", "majority"] = field(
        default="majority",
        metadata={"help": "How the votes combine per token: their mean, or the mean where more than half marked it."},
    )

    def validate(self, where: str = "token_judge") -> None:
        if self.votes < 1:
            raise ValueError(f"{where}.votes={self.votes} must be >= 1 (e.g. 3).")
        if self.judge is None:
            return
        from genalign.rewards.token_judges import token_judge  # the judges' module, read only when one is set

        self.judge = Option.parse(self.judge, f"{where}.judge")
        try:
            token_judge(self.judge.name, self.judge.args)  # its name and arguments, checked now
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}.judge={self.judge.name!r}: {err}") from None


#: Structure fields the rollout-time probes fill (``block_ids`` only with ``block_markers``, ``counterfactual_logp``
#: only with ``counterfactual_column``, ``token_judgement`` only with ``token_judge``; :mod:`genalign.policies.lm.probes`).
PROBED_FIELDS = ("segment_values", "answer_probe", "teacher_logp", "block_ids", "prefix_rewards", "counterfactual_logp",
                 "token_judgement", "attention_entropy", "answer_attention_flow", "answer_saliency",
                 "constraint_relevance")  # fmt: skip


@dataclass
class ProbeOptions:
    """Options of the rollout-time probes (``policy.probes``); used only when a configured method needs them."""

    answer_column: str = field(
        default="answer", metadata={"help": "Row column holding the reference answer (answer_probe, teacher_logp)."}
    )
    answer_prefix: str = field(
        default="\nThe answer is ",
        metadata={"help": "Text placed after a segment state before the reference answer is teacher-forced."},
    )
    teacher_hint: str = field(
        default="\nReference answer: {answer}\n",
        metadata={
            "help": "Appended to the prompt ({answer} = the reference answer) for the self-distillation teacher."
        },
    )
    value_samples: int = field(
        default=4, metadata={"help": "Continuations sampled from each segment state (segment_values, SPO-chain)."}
    )
    block_markers: list[str] = field(
        default_factory=list,
        metadata={"help": "Strings that open the 2nd, 3rd, ... text block of a completion (block_ids, blockwise)."},
    )
    step_markers: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Token texts that also open a new reasoning step of segment_ids (e.g. 'Wait', 'Alternatively'), "
            "besides newlines and sentence ends; each must be one token's text."
        },
    )
    batch_size: int = field(default=16, metadata={"help": "Sequences per probe forward pass or sampling call."})
    counterfactual_column: str | None = field(
        default=None,
        metadata={
            "help": "Row column holding the prompt each completion is re-scored under (counterfactual_logp, e.g. the "
            "prompt without its rubric); None: the probe is off."
        },
    )

    answer_tokens: int = field(
        default=1,
        metadata={
            "help": "The last text tokens of a completion that form its answer (answer_attention_flow, "
            "answer_saliency)."
        },
    )
    token_judge: TokenJudgeOptions = field(
        default_factory=TokenJudgeOptions,
        metadata={"help": "Token judge whose judged spans become the token_judgement signal (off without a judge)."},
    )

    relevance_judges: list[Option] = field(
        default_factory=list,
        metadata={
            "help": "One token judge per rubric constraint: the tokens each marks are relevant to its constraint "
            "(constraint_relevance, e.g. [{name: keyword_spans, column: keyword}]); [] = off."
        },
    )

    def validate(self) -> None:
        self.token_judge.validate("policy.probes.token_judge")
        self.relevance_judges = [
            Option.parse(judge, "policy.probes.relevance_judges") for judge in self.relevance_judges
        ]
        for i, judge in enumerate(self.relevance_judges):
            TokenJudgeOptions(judge=judge).validate(f"policy.probes.relevance_judges[{i}]")
        if self.answer_tokens < 1:
            raise ValueError(f"policy.probes.answer_tokens={self.answer_tokens} must be >= 1 (e.g. 4).")
        if self.value_samples < 1:
            raise ValueError(f"policy.probes.value_samples={self.value_samples} must be >= 1 (e.g. 4).")
        if self.batch_size < 1:
            raise ValueError(f"policy.probes.batch_size={self.batch_size} must be >= 1 (e.g. 16).")
        if not all(self.block_markers):
            raise ValueError(f"policy.probes.block_markers={self.block_markers} contains an empty string; remove it.")
        if not all(marker.strip() for marker in self.step_markers):
            raise ValueError(f"policy.probes.step_markers={self.step_markers} contains a blank string; remove it.")
        if self.counterfactual_column == "":
            raise ValueError("policy.probes.counterfactual_column is empty; name the row column or set it to null.")
        if "{answer}" not in self.teacher_hint:
            raise ValueError(f"policy.probes.teacher_hint={self.teacher_hint!r} must contain '{{answer}}'.")

    def structure(self) -> frozenset[str]:
        """The fields these options let the family fill."""
        off = (set() if self.block_markers else {"block_ids"}) | (
            set() if self.counterfactual_column else {"counterfactual_logp"}
        )
        off |= set() if self.token_judge.judge is not None else {"token_judgement"}
        off |= set() if self.relevance_judges else {"constraint_relevance"}
        return frozenset(PROBED_FIELDS) - off


__all__ = [
    "AUTOREGRESSIVE_FEATURES",
    "AUTOREGRESSIVE_STRUCTURE",
    "GUIDANCE_KEYS",
    "PROBED_FIELDS",
    "REFERENCE_ENTROPY",
    "AttnImplementation",
    "LMTreeConfig",
    "LoRAConfig",
    "ProbeOptions",
    "ReferenceMode",
    "ResolvedReferenceMode",
    "TokenJudgeOptions",
    "lora_reference_mode",
    "resolve_reference_mode",
    "token_capabilities",
]
