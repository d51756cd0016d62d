"""Reward functions: plain callables ``f(prompts, completions, **columns) -> list[float | None]``.

``prompts`` are the prompt strings of the batch (``[N]``), ``completions`` what the policy produced (``[N]``: strings,
PIL images, videos as ``[F, H, W, 3]`` uint8 arrays), and ``columns`` every other dataset column, each a list of
length ``N``. ``None`` means "not applicable to this sample": it is excluded from group statistics and the sample gets
zero advantage from that reward.

The registry holds *factories*: ``REWARDS.get(name)(**args)`` returns the callable, so a config can pass arguments
(a weights path, a regex, a target length). Heavy dependencies are imported inside the factory, never at module import.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from genalign.registry import Registry


class RewardFn(Protocol):
    def __call__(
        self, prompts: Sequence[str], completions: Sequence[Any], **columns: Sequence[Any]
    ) -> list[float | None]: ...


#: name -> factory ``(**args) -> RewardFn``
REWARDS: Registry[Callable[..., RewardFn]] = Registry("reward function")


def register_reward(name: str, **meta) -> Callable:
    """Register a reward.

    Decorating a plain reward function registers a factory that binds config ``args`` as keyword arguments::

        @register_reward("exact_match")
        def exact_match(prompts, completions, answer, *, strip=True): ...

    Decorating a class registers the class itself (its ``__init__`` takes the args, its ``__call__`` scores).

    Meta ``path_args``: the arguments that name local files or folders (weights, model folders); in a config file they
    are read from the file's folder, like every path there (:mod:`genalign.config.paths`). Meta ``inner_rewards``: where
    a reward built from other rewards finds them in its arguments, so that their path arguments are read so too; a
    list of ``{"name": ARG, "args": ARG}`` (one reward and its arguments), ``{"spec": ARG}`` (a name or ``{fn, args}``)
    or ``{"by_name": ARG}`` (``{name: {weight, args}}``).
    """

    def decorator(obj):
        if isinstance(obj, type):
            REWARDS.register(name, **meta)(obj)
            return obj

        @functools.wraps(obj)
        def factory(**args):
            return functools.partial(obj, **args) if args else obj

        REWARDS.register(name, **meta)(factory)
        return obj

    return decorator


#: How a reward may be named besides its registered name (error messages).
IMPORT_FORMS = "'package.module:function', 'package.module.function' or 'path/to/file.py:function'"


def reward_factory(fn: str | Callable[..., Any]) -> Callable[..., RewardFn]:
    """The factory ``(**args) -> reward`` of ``fn``: a registered name, an import path (:data:`IMPORT_FORMS`; a file
    path is absolute or relative to the working directory: loading a config file has made its relative files the config
    folder's, :mod:`genalign.config.paths`) or a Python callable / class.

    A plain function becomes a factory that binds ``args`` as keyword arguments (as :func:`register_reward` does); a
    class is its own factory. Importing a module or file runs that code: name only code you trust (your own).
    """
    if not isinstance(fn, str):
        if not callable(fn):
            raise TypeError(f"a reward must be a name, an import path or a callable, got {type(fn).__name__}")
        return fn if isinstance(fn, type) else _binding_factory(fn)
    if fn in REWARDS:
        return REWARDS.get(fn)
    if fn.startswith("<unsaved callable"):
        raise ValueError(
            f"reward {fn}: a Python function passed to train() cannot be loaded again from a saved config; name it "
            f"by import path ({IMPORT_FORMS}) or register it with genalign.rewards.register_reward."
        )
    target = _import_target(fn)
    if target is None:
        REWARDS.get(fn)  # raises UnknownOptionError with the registered names and a did-you-mean hint
    return target if isinstance(target, type) else _binding_factory(target)


def _binding_factory(fn: Callable[..., Any]) -> Callable[..., RewardFn]:
    @functools.wraps(fn)
    def factory(**args):
        return functools.partial(fn, **args) if args else fn

    return factory


def _import_target(spec: str) -> Callable[..., Any] | None:
    """The callable an import path names, or None when ``spec`` is not an import path."""
    import importlib
    import importlib.util
    import sys
    from pathlib import Path

    if ":" in spec:
        where, name = spec.rsplit(":", 1)
    elif "." in spec and " " not in spec:
        where, name = spec.rsplit(".", 1)
    else:
        return None
    if where.endswith(".py"):
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise FileNotFoundError(
                f"reward {spec!r}: {path} does not exist (file paths are relative to the config file)"
            )
        module_name = f"genalign_user_rewards.{path.stem}_{abs(hash(str(path))):x}"
        if module_name not in sys.modules:
            loader = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(loader)
            sys.modules[module_name] = module
            loader.loader.exec_module(module)
        module = sys.modules[module_name]
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as err:
            raise ModuleNotFoundError(
                f"reward {spec!r}: cannot import module {where!r} ({err}); it must be importable (installed, or on "
                f"PYTHONPATH), or name a file: {IMPORT_FORMS}"
            ) from None
    target = getattr(module, name, None)
    if not callable(target) and where == "__main__":
        raise AttributeError(
            f"reward {spec!r} is a function of the script that started the run (recorded by name); it cannot be "
            f"loaded outside that script. Move it into a file and name it there, e.g. "
            f"rewards.0.fn=path/to/my_rewards.py:{name} (genalign sample and export never need the rewards; "
            "genalign eval and sample --score do)"
        )
    if not callable(target):
        raise AttributeError(f"reward {spec!r}: {where} has no callable {name!r}")
    return target


def callable_reference(fn: Callable[..., Any]) -> str:
    """How a callable is written into a saved config: ``module:qualname`` when that import finds it again, else a
    marker that a later load rejects with an explanation."""
    import importlib

    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", repr(fn))
    try:
        if module and getattr(importlib.import_module(module), name, None) is fn:
            return f"{module}:{name}"
    except ImportError:
        pass
    return f"<unsaved callable {name}>"
