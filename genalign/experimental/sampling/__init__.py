"""Experimental sample-source rules: registered into the core registry under their own names (the registry imports this
package the first time it is read)."""

from genalign.experimental.sampling import (  # noqa: F401  (register the options)
    allocation,
    boundaries,
    budgets,
    curricula,
    difficulty_shift,
    drafts,
    exits,
    expert_warmup,
    explorer_rollouts,
    guidance,
    in_context,
    masking,
    mixed_prefix,
    references,
    replay,
    replay_buffer,
    residuals,
    reward_goals,
    sentence_edits,
    teacher_continuations,
    teacher_injection,
    teacher_rollouts,
    temperature,
    value_budget,
)
