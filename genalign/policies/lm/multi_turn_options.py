"""``policy.multi_turn``: the environments of a multi-turn run and the limits of its trajectories.

The environments are named like rewards (docs/environments.md): a registered name (``guess_number``), a mapping
``{name: ..., **args}``, an import path (``package.module:Class``, ``path/to/file.py:Class``), or, from Python, a class
or factory; one entry (every row uses it), a list (rows choose by ``column``) or ``{name: entry}``. Unset: the policy
samples one turn, exactly as without this section.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from genalign.environments import EnvironmentSet, ToolLimits
from genalign.environments.judges import SegmentJudge, segment_judge
from genalign.policies.lm.turn_control import ThinkingIntervention, TurnResampling
from genalign.policies.lm.turn_tree_options import TurnTreeOptions

#: Rollout structure a multi-turn rollout records: ``prefix_tree`` is the turn-level sampling tree with
#: ``policy.multi_turn.tree``, else the token prefix tree of each group; ``turn_roles`` the segment judge's roles.
MULTI_TURN_STRUCTURE = frozenset(
    {"truncated", "action_ids", "turn_ids", "turn_rewards", "tool_calls", "prefix_tree", "turn_roles"}
)

#: The guidance keys a multi-turn rollout honours (``PolicyCapabilities.guidance``): a ``hint`` added to the user
#: prompt (e.g. RC-GRPO's reward-goal token [128]); a forced ``prefix``, a per-row temperature and a self-hint assume
#: one completion.
MULTI_TURN_GUIDANCE = frozenset({"hint"})


@dataclass
class MultiTurnOptions:
    """Multi-turn rollouts with environments and tools (``policy.multi_turn``)."""

    environments: Any = field(
        default=None,
        metadata={
            "help": "The environments: a registered name, {name, **args}, 'module:Class' or 'file.py:Class'; a list "
            "or {name: entry} to route rows by `column`. null: single-turn rollouts."
        },
    )
    column: str = field(
        default="env", metadata={"help": "Row column naming each row's environment (TRL: environment)."}
    )
    max_turns: int = field(default=4, metadata={"help": "Model turns per trajectory; reaching it marks it truncated."})
    max_observation_tokens: int = field(
        default=1024,
        metadata={"help": "Longest environment answer in tokens; a longer one ends the trajectory, truncated."},
    )
    max_total_tokens: int | None = field(
        default=None,
        metadata={"help": "Longest trajectory (prompt + every turn and answer) in tokens; null = no limit."},
    )
    keep_kv_cache: bool = field(
        default=True,
        metadata={
            "help": "Static engine: keep each trajectory's KV cache between turns, so a turn encodes only its new "
            "tokens; false re-encodes the whole conversation every turn (the reference; hf and vllm always do)."
        },
    )
    tool_limits: dict[str, Any] | None = field(
        default=None,
        metadata={"help": "ToolLimits for every environment (timeout_s, max_output_chars, max_calls, ...)."},
    )
    tree: TurnTreeOptions = field(
        default_factory=TurnTreeOptions,
        metadata={"help": "Training groups as trees that branch at turn boundaries (Tree-GRPO); group_size = "
                  "trees_per_prompt × prod(branching)."},
    )  # fmt: skip
    thinking_intervention: ThinkingIntervention = field(
        default_factory=ThinkingIntervention,
        metadata={"help": "T²PO's token-level intervention: text inserted where a turn's uncertainty stops changing."},
    )
    resample_turns: TurnResampling = field(
        default_factory=TurnResampling,
        metadata={"help": "T²PO's turn level: turns without progress (repeated answer, flat uncertainty) resampled."},
    )
    segment_judge: Any = field(
        default="tool_outcomes",
        metadata={"help": "The judge of each turn's role (turn_roles, read by credit triage): a registered name or "
                  "{name, **args}."},
    )  # fmt: skip

    @property
    def enabled(self) -> bool:
        return self.environments is not None

    def validate(self) -> None:
        """Check the limits and build the environments once (a wrong name or argument fails here, at config load)."""
        if not self.enabled:
            return
        checks = [
            (self.max_turns >= 1, f"policy.multi_turn.max_turns={self.max_turns} must be >= 1 (e.g. 4)."),
            (
                self.max_observation_tokens >= 1,
                f"policy.multi_turn.max_observation_tokens={self.max_observation_tokens} must be >= 1 (e.g. 1024).",
            ),
            (bool(self.column), "policy.multi_turn.column is empty; name the row column that routes (e.g. env)."),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        self.tree.validate(max_turns=self.max_turns)
        self.thinking_intervention.validate()
        self.resample_turns.validate()
        self.judge()
        self.environment_set()

    @property
    def group_size(self) -> int | None:
        """The group size the turn-level trees fix (None: any)."""
        return self.tree.group_size if self.enabled and self.tree.enabled else None

    def judge(self) -> SegmentJudge:
        """The segment judge (``segment_judge``), built (a wrong name or argument fails here)."""
        return segment_judge(self.segment_judge)

    def check_lengths(self, *, max_new_tokens: int) -> None:
        """``max_total_tokens`` leaves room for a prompt and one turn of ``policy.max_new_tokens``."""
        if self.enabled and self.max_total_tokens is not None and self.max_total_tokens <= max_new_tokens:
            raise ValueError(
                f"policy.multi_turn.max_total_tokens={self.max_total_tokens} must exceed policy.max_new_tokens="
                f"{max_new_tokens} (the prompt and one turn must fit), or be null."
            )

    def limits(self) -> ToolLimits | None:
        try:
            return ToolLimits.of(self.tool_limits) if self.tool_limits is not None else None
        except (TypeError, ValueError) as err:
            raise ValueError(f"policy.multi_turn.tool_limits: {err}") from None

    def environment_set(self) -> EnvironmentSet:
        """The run's environments, with ``tool_limits`` given to every entry that sets none itself."""
        limits = self.limits()
        entries = self.environments
        if isinstance(entries, Mapping) and "name" not in entries:
            entries = {key: self._with_limits(entry, limits) for key, entry in entries.items()}
        elif isinstance(entries, list | tuple):
            entries = [self._with_limits(entry, limits) for entry in entries]
        else:
            entries = self._with_limits(entries, limits)
        try:
            return EnvironmentSet(entries, column=self.column)
        except (KeyError, ValueError, TypeError, ImportError, AttributeError) as err:
            raise ValueError(f"policy.multi_turn.environments: {err}") from None

    @staticmethod
    def _with_limits(entry: Any, limits: ToolLimits | None) -> Any:
        if limits is None:
            return entry
        if isinstance(entry, Mapping):
            return entry if "tool_limits" in entry else {**entry, "tool_limits": limits}
        return {"name": entry, "tool_limits": limits}


__all__ = ["MULTI_TURN_GUIDANCE", "MULTI_TURN_STRUCTURE", "MultiTurnOptions"]
