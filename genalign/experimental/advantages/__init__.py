"""Experimental advantage estimators: registered into the core registry under their own names (the registry imports this
package the first time it is read)."""

from genalign.experimental.advantages import (  # noqa: F401  (register the options)
    difficulty,
    fusion,
    risk,
    shaped,
    value_anchored,
)
