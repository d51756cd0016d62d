"""Experimental SDE dynamics of flow sampling: registered into the core registry under their own names (the registry imports this
package the first time it is read)."""

from genalign.experimental.dynamics import (  # noqa: F401  (register the options)
    manifold,
)
