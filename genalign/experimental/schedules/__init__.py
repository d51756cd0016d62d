"""Experimental update schedules: registered into the core registry under their own names (the registry imports this
package the first time it is read)."""

from genalign.experimental.schedules import (  # noqa: F401  (register the options)
    slow_fast,
)
