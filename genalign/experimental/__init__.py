"""The experimental tier: every option whose form genalign chose from an abstract (the paper leaves it open; the
option's docstring says "Reading chosen" and why), one sub-package per kind of option.

Options here register into the same registries as the published forms, under the same names, so configs never change
when an option moves: a registry imports its sub-package of this tier the first time it is read
(:class:`genalign.registry.Registry`'s ``catalogue``). The tier shown in docs/algorithms.md follows from where an
option lives. An option graduates to the core (``genalign/algorithms`` and the family packages) when it gains a
reference test against a published implementation or formula.
"""

import importlib

#: the sub-packages, one per kind of option (each is the catalogue of one registry)
KINDS = (
    "advantages", "combiners", "shaping", "credit", "objectives", "ratio_levels", "clip_forms", "regularizers",
    "sampling", "schedules", "dynamics", "likelihood", "decoding",
)  # fmt: skip


def load_all() -> None:
    """Register every experimental option (each registry also does this for its own kind when first read)."""
    for kind in KINDS:
        importlib.import_module(f"genalign.experimental.{kind}")
