"""Flow-matching architectures, one module each (``sd3``, ``flux``, ``wan``), registered in
:data:`FLOW_ARCHITECTURES` (:mod:`genalign.pipelines.architectures.base`).

Every module of this package is imported here, so a new architecture is one new file whose class is decorated with
``@FLOW_ARCHITECTURES.register("<name>")``; nothing else in genalign names it.
"""

import importlib
import pkgutil

from genalign.pipelines.architectures.base import (
    FLOW_ARCHITECTURES,
    FlowArchitecture,
    PromptEmbeddings,
    architecture_for,
    architecture_name,
    architecture_of_transformer,
)

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "FLOW_ARCHITECTURES",
    "FlowArchitecture",
    "PromptEmbeddings",
    "architecture_for",
    "architecture_name",
    "architecture_of_transformer",
]
