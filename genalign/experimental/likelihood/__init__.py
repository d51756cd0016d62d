"""Experimental likelihood proxies of masked diffusion LMs: registered into the core registry under their own names (the registry imports this
package the first time it is read)."""

from genalign.experimental.likelihood import (  # noqa: F401  (register the options)
    left_to_right,
    quadrature,
)
