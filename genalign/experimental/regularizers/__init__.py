"""Experimental regularisers: registered into the core registry under their own names (the registry imports this
package the first time it is read)."""

from genalign.experimental.regularizers import (  # noqa: F401  (register the options)
    auxiliary,
    candidate_suppression,
    entropy_shaping,
    expert,
    previous_policy,
    promising,
    self_reward,
    trust,
    vocabulary,
)
