"""Experimental reward shapers: registered into the core registry under their own names (the registry imports this
package the first time it is read)."""

from genalign.experimental.shaping import (  # noqa: F401  (register the options)
    diversity,
    early_exit,
    expert,
    length_budget,
    length_gate,
    polychromic,
    probe,
    segments,
    self_reward,
    tracked,
)
