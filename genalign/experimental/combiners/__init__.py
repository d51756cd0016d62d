"""Experimental reward combiners: registered into the core registry under their own names (the registry imports this
package the first time it is read)."""

from genalign.experimental.combiners import (  # noqa: F401  (register the options)
    domains,
    gated,
    hierarchical,
    paced,
    process,
    tightening,
    variance,
    views,
)
