"""Experimental trainable decoding policies of masked diffusion LMs: registered into the core registry under their own names (the registry imports this
package the first time it is read)."""

from genalign.experimental.decoding import (  # noqa: F401  (register the options)
    order,
    schedule,
)
