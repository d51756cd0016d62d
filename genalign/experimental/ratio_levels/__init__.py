"""Experimental ratio levels: registered into the core registry under their own names (the registry imports this
package the first time it is read)."""

from genalign.experimental.ratio_levels import (  # noqa: F401  (register the options)
    grouped,
    macro,
    means,
    phases,
    segments,
    turns,
)
