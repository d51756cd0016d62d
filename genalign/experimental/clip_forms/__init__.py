"""Experimental clip forms: registered into the core registry under their own names (the registry imports this
package the first time it is read)."""

from genalign.experimental.clip_forms import (  # noqa: F401  (register the options)
    adaptive,
    masking,
)
