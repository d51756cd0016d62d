"""Naming code in a config: the object an import path names (:func:`import_target`).

An environment or a tool is named like a reward (``genalign.rewards.base``): a registered name, or an import path
``package.module:Name``, ``package.module.Name`` or ``path/to/file.py:Name`` (a file path is absolute or relative to
the working directory; loading a config file has already made its relative files the config folder's:
:mod:`genalign.config.paths`). This is the same convention written once more, on purpose: ``genalign.environments`` depends
on no other genalign package but the registry and the sandbox, and the reward resolver's messages speak of rewards.
Keep the two in step (the forms, and that a file is imported once under a private module name).

Importing a module or file runs its code: name only code you trust (your own). That code is configuration, not
model output: nothing the model writes is ever imported or evaluated.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

#: how code may be named besides a registered name (error messages)
IMPORT_FORMS = "'package.module:Name', 'package.module.Name' or 'path/to/file.py:Name'"


def import_target(spec: str, *, kind: str) -> Any | None:
    """The object ``spec`` names, or None when ``spec`` is not an import path (no ``:``, no ``.``).

    Args:
        spec: the import path.
        kind: what is being loaded (``"environment"``, ``"tool"``), for error messages.

    Raises:
        FileNotFoundError, ModuleNotFoundError, AttributeError: the path names nothing, with the forms accepted.
    """
    if ":" in spec:
        where, name = spec.rsplit(":", 1)
    elif "." in spec and " " not in spec and "/" not in spec:
        where, name = spec.rsplit(".", 1)
    else:
        return None
    if where.endswith(".py"):
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise FileNotFoundError(f"{kind} {spec!r}: {path} does not exist (name a file as {IMPORT_FORMS})")
        module_name = f"genalign_user_environments.{path.stem}_{abs(hash(str(path))):x}"
        if module_name not in sys.modules:
            loader = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(loader)
            sys.modules[module_name] = module
            try:
                loader.loader.exec_module(module)
            except BaseException:
                del sys.modules[module_name]
                raise
        module = sys.modules[module_name]
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as err:
            raise ModuleNotFoundError(
                f"{kind} {spec!r}: cannot import module {where!r} ({err}); it must be importable (installed, or on "
                f"PYTHONPATH), or name a file: {IMPORT_FORMS}"
            ) from None
    if not hasattr(module, name):
        raise AttributeError(f"{kind} {spec!r}: {where} has no attribute {name!r}")
    return getattr(module, name)
