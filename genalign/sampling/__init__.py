"""The sample-source stage (``algorithm.sample_sources``): composable, stateful rules between the prompt stream and
the rollout that choose the prompts, the samples per prompt, and which samples the update keeps and trains on.

- :mod:`genalign.sampling.base`: the rule contract (:class:`SampleRule`), the registry :data:`SAMPLE_SOURCES`;
- :mod:`genalign.sampling.stage`: :class:`SampleSourceStage`, called once before the rollout and once after rewards;
- :mod:`genalign.sampling.masking`: overlong filtering (DAPO, [125]);
- :mod:`genalign.experimental.sampling.curricula`: prompt selection (DEPO [151], SPO's value tracker [324]);
- :mod:`genalign.experimental.sampling.boundaries`: selection at the learning boundary (AdaGRPO [62], VAS [110]);
- :mod:`genalign.experimental.sampling.residuals`: raised temperature for residual prompts (ERPO [203]);
- :mod:`genalign.sampling.budgets`: rollout budgets (GFPO [109], D³S sample level [27]);
- :mod:`genalign.experimental.sampling.guidance`, :mod:`~genalign.experimental.sampling.references`: hints, prefixes, reference solutions
  (SAGE [69], AdaPrefix [77], Scaf-GRPO [250], GCPO [253], EDGE-GRPO [99]);
- :mod:`genalign.experimental.sampling.allocation`: extra sampling rounds (DARS [192], AERO [234], XRPO [241]);
- :mod:`~genalign.experimental.sampling.exits`, :mod:`~genalign.experimental.sampling.drafts`,
  :mod:`~genalign.experimental.sampling.reward_goals`, :mod:`~genalign.experimental.sampling.in_context`,
  :mod:`~genalign.experimental.sampling.mixed_prefix`: groups built from the policy's own rollouts (S-GRPO's serial
  exits [14], Step-GRPO's truncation [114], iGRPO's drafts [100], RC-GRPO's goals [128], ICPO's in-context expert
  [44], SOUP's mixed-policy prefixes [134]).
"""

from genalign.sampling import (  # noqa: F401  (register the rules)
    budgets,
    masking,
)
from genalign.sampling.base import (
    SAMPLE_SOURCES,
    Candidate,
    Decision,
    Forced,
    Outcome,
    RuleDefaults,
    SampleRule,
    per_prompt,
)
from genalign.sampling.stage import LocalSamples, SampleChoice, SamplePlan, SampleSourceStage, build_rules

__all__ = [
    "SAMPLE_SOURCES",
    "Candidate",
    "Decision",
    "Forced",
    "LocalSamples",
    "Outcome",
    "RuleDefaults",
    "SampleChoice",
    "SamplePlan",
    "SampleRule",
    "SampleSourceStage",
    "build_rules",
    "per_prompt",
]
