"""Tools: typed Python functions the model may call (:class:`Tool`), the :func:`tool` marker, and the ``TOOLS``
registry of built-in tools.

A tool is a plain function (sync or ``async def``) with type hints and a Google-style docstring; its JSON schema comes
from both (:func:`genalign.environments.schema.function_schema`, the ``transformers`` chat-template convention). It
takes JSON values and returns a string, an :class:`~genalign.environments.types.Observation`, a PIL image, a list of
content blocks, or any JSON-serialisable value (shown as JSON). To refuse a call, it raises: the message becomes the
error observation (kind ``tool_error``).

``TOOLS`` holds *factories* ``(**args) -> Tool``, like ``REWARDS`` does, so a config can pass arguments
(``{name: python, timeout_s: 5}``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from genalign.environments.loading import import_target
from genalign.environments.schema import check_arguments, function_schema
from genalign.environments.types import Observation, as_observation
from genalign.registry import Registry

#: name -> factory ``(**args) -> Tool``
TOOLS: Registry[Callable[..., Tool]] = Registry("tool")

_MARK = "__genalign_tool__"


@dataclass(frozen=True)
class Tool:
    """A callable the model may use.

    Args:
        name: the name the model writes in its call.
        fn: the function (a bound method for an environment's tools); may be ``async def``.
        schema: ``{"type": "function", "function": {"name", "description", "parameters"}}``.
        parallel: may run at the same time as the turn's other calls. False (the default for an environment's
            methods) runs the turn's calls to such tools one after the other, in call order, so they never race on
            the environment's state.
        timeout_s: this tool's wall-clock limit (None: the environment's ``ToolLimits.timeout_s``).
        render: turns the return value into what the model sees (default :func:`as_observation`).
        render_error: turns an exception the tool raised into the error observation's text (default:
            ``"Error (tool_error): <Type>: <message>"``).
    """

    name: str
    fn: Callable[..., Any]
    schema: Mapping[str, Any]
    parallel: bool = True
    timeout_s: float | None = None
    render: Callable[[Any], Observation | None] = field(default=as_observation, repr=False)
    render_error: Callable[[BaseException], str] | None = field(default=None, repr=False)

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        parallel: bool | None = None,
        timeout_s: float | None = None,
        render: Callable[[Any], Observation | None] | None = None,
        render_error: Callable[[BaseException], str] | None = None,
    ) -> Tool:
        """A tool from a typed, documented function. Options not given come from its :func:`tool` mark, else the
        defaults (``parallel`` False for a bound method, True otherwise)."""
        mark: Mapping[str, Any] = getattr(fn, _MARK, {})
        name = name or mark.get("name") or fn.__name__
        if parallel is None:
            parallel = mark.get("parallel", not inspect.ismethod(fn))
        if timeout_s is None:
            timeout_s = mark.get("timeout_s")
        if timeout_s is not None and (isinstance(timeout_s, bool) or not timeout_s > 0):
            raise ValueError(f"tool {name!r}: timeout_s={timeout_s!r} must be a positive number of seconds.")
        schema = function_schema(fn, name=name)
        return cls(name, fn, schema, parallel, timeout_s, render or as_observation, render_error)

    def check(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The checked keyword arguments (raises :class:`~genalign.environments.schema.ArgumentError`)."""
        return check_arguments(self.fn, self.schema, arguments)


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    parallel: bool | None = None,
    timeout_s: float | None = None,
) -> Any:
    """Mark a function or an environment method as a tool (``@tool`` or ``@tool(parallel=True, timeout_s=2)``).

    The function is returned unchanged (still callable as before); :meth:`Tool.from_function` and
    :meth:`Environment.tools() <genalign.environments.Environment.tools>` read the mark.
    """

    def mark(target: Callable[..., Any]) -> Callable[..., Any]:
        options = {"name": name, "parallel": parallel, "timeout_s": timeout_s}
        setattr(target, _MARK, {key: value for key, value in options.items() if value is not None})
        return target

    return mark(fn) if fn is not None else mark


def is_marked_tool(obj: Any) -> bool:
    return hasattr(obj, _MARK)


def register_tool(name: str, **meta: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a plain tool function under ``name`` (its factory takes no arguments). A tool that takes config
    arguments registers a factory ``(**args) -> Tool`` with ``TOOLS.register(name, **meta)`` instead."""

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        built = Tool.from_function(fn, name=name)  # fails at import when the schema cannot be built

        def factory() -> Tool:
            return built

        factory.__doc__ = fn.__doc__
        TOOLS.register(name, **meta)(factory)
        return fn

    return decorator


ToolSpec = str | Mapping[str, Any] | Callable[..., Any] | Tool


def resolve_tool(spec: ToolSpec) -> Tool:
    """A :class:`Tool` from a config entry or a Python object.

    ``spec`` is a registered name (``"calculator"``), a mapping ``{name: ..., **args}`` (args go to the registered
    factory), an import path (``"package.module:function"`` or ``"path/to/file.py:function"``) of a tool function, a
    :class:`Tool` object, or of a factory ``(**args) -> Tool`` when the mapping gives args), a Python function, or a
    :class:`Tool`. Importing a module or file runs its code: name
    only code you trust.
    """
    if isinstance(spec, Tool):
        return spec
    args: dict[str, Any] = {}
    if isinstance(spec, Mapping):
        args = {key: value for key, value in spec.items() if key != "name"}
        if "name" not in spec:
            raise ValueError(f"tool {dict(spec)!r}: a mapping needs a 'name' key (a registered tool or import path).")
        spec = spec["name"]
    if isinstance(spec, str):
        if spec in TOOLS:
            return TOOLS.get(spec)(**args)
        target = import_target(spec, kind="tool")
        if target is None:
            TOOLS.get(spec)  # raises UnknownOptionError with the registered names and a did-you-mean hint
        spec = target
    if isinstance(spec, Tool):
        if args:
            raise ValueError(f"tool {spec.name!r} is a Tool object; it takes no arguments ({sorted(args)} given).")
        return spec
    if not callable(spec):
        raise TypeError(f"a tool must be a name, an import path, a function or a Tool, got {type(spec).__name__}")
    if args:
        built = spec(**args)
        if not isinstance(built, Tool):
            raise TypeError(
                f"tool {spec!r} was given arguments {sorted(args)}, so it must be a factory returning a Tool"
            )
        return built
    return Tool.from_function(spec)


def resolve_tools(specs: Sequence[ToolSpec] | None) -> list[Tool]:
    """:func:`resolve_tool` of each entry; two tools with one name are refused."""
    tools = [resolve_tool(spec) for spec in specs or ()]
    seen: set[str] = set()
    for built in tools:
        if built.name in seen:
            raise ValueError(f"two tools are named {built.name!r}; each tool of an environment needs its own name.")
        seen.add(built.name)
    return tools
