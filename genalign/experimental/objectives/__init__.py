"""Experimental objectives: registered into the core registry under their own names (the registry imports this
package the first time it is read)."""

from genalign.experimental.objectives import (  # noqa: F401  (register the options)
    anchored_preference,
    contrastive,
    optimal_policy_imitation,
    pairwise_ppo,
    regression,
    semantic_preference,
    token_preference,
    token_reward_preference,
    trajectory_softmax,
)
