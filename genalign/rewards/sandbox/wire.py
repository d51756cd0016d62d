"""Plain data between the processes of a test session (:mod:`genalign.rewards.sandbox.protocol`): the encoding of
values (:func:`to_data` / :func:`from_data`), JSON text (:func:`dumps` / :func:`loads`) and JSON lines on a
descriptor (:class:`Channel`).

A value crosses as JSON of plain data (:func:`to_data`): ``None``, booleans, integers, floats, strings and lists as
themselves; tuples, dicts (any plain keys), sets, frozensets, bytes, bytearrays, complex numbers, ranges, big integers
and iterators (materialised, at most :data:`MAX_ITEMS` items; they arrive as an iterator over a list) tagged as
one-key objects. :func:`from_data` rebuilds *exactly* the built-in types from that data and refuses anything else, so
no object, method or code of the sender reaches the receiver: an object whose ``__eq__`` says yes arrives as whatever
plain value it encodes to, or not at all. No pickle, no ``eval``: what the program sends is parsed as JSON and walked.

Standard library only, nothing imported from genalign: this file's source also runs inside the sandbox, where genalign
is not importable (:func:`genalign.rewards.sandbox.run_test_session` ships it).
"""

from __future__ import annotations

import os
from typing import Any

try:  # json's C half: ``import json`` costs ~16 ms of CPU per process (it compiles regular expressions)
    import _json
except ImportError:  # another Python than CPython
    _json = None  # type: ignore[assignment]

#: deepest nesting of a value that crosses
MAX_DEPTH = 100
#: most items materialised from a returned iterator
MAX_ITEMS = 100_000


class Unencodable(Exception):
    """A value that is not plain data (see the module docstring)."""


class ProtocolError(Exception):
    """Data that :func:`from_data` refuses, or a message that is not what the protocol expects."""


# ----------------------------------------------------------------------------------------------------------------------
# the data
# ----------------------------------------------------------------------------------------------------------------------


def to_data(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON-ready plain data (module docstring); raises :class:`Unencodable`."""
    if depth > MAX_DEPTH:
        raise Unencodable(f"a value nested deeper than {MAX_DEPTH} levels")
    deeper = depth + 1
    if value is None or isinstance(value, bool):
        return None if value is None else bool(value)
    if isinstance(value, int):
        number = int(value)
        return number if -(1 << 63) <= number < (1 << 63) else {"int": hex(number)}
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, list):
        return [to_data(item, deeper) for item in value]
    if isinstance(value, tuple):
        return {"tuple": [to_data(item, deeper) for item in value]}
    if isinstance(value, dict):
        return {"dict": [[to_data(key, deeper), to_data(item, deeper)] for key, item in value.items()]}
    if isinstance(value, (set, frozenset)):
        return {"frozenset" if isinstance(value, frozenset) else "set": [to_data(item, deeper) for item in value]}
    if isinstance(value, (bytes, bytearray)):
        return {"bytearray" if isinstance(value, bytearray) else "bytes": bytes(value).hex()}
    if isinstance(value, complex):
        return {"complex": [value.real, value.imag]}
    if isinstance(value, range):
        return {"range": [value.start, value.stop, value.step]}
    if hasattr(type(value), "__next__") and hasattr(type(value), "__iter__"):
        items = []
        for item in value:
            if len(items) == MAX_ITEMS:
                raise Unencodable(f"an iterator ({type(value).__name__}) of more than {MAX_ITEMS} items")
            items.append(to_data(item, deeper))
        return {"iterator": items}
    raise Unencodable(f"a {type(value).__module__}.{type(value).__qualname__} object")


def _items(body: Any, depth: int) -> list[Any]:
    if type(body) is not list:
        raise ProtocolError(f"expected a list, got {type(body).__name__}")
    return [from_data(item, depth + 1) for item in body]


def from_data(node: Any, depth: int = 0) -> Any:
    """The built-in value that :func:`to_data` made ``node`` from; raises :class:`ProtocolError` for anything else
    (only exact built-in types come out)."""
    if depth > MAX_DEPTH:
        raise ProtocolError(f"a value nested deeper than {MAX_DEPTH} levels")
    if node is None or type(node) in (bool, int, float, str):
        return node
    if type(node) is list:
        return _items(node, depth)
    if type(node) is not dict or len(node) != 1:
        raise ProtocolError(f"not plain data: {node!r:.80}")
    ((tag, body),) = node.items()
    try:
        if tag == "tuple":
            return tuple(_items(body, depth))
        if tag == "set":
            return set(_items(body, depth))
        if tag == "frozenset":
            return frozenset(_items(body, depth))
        if tag == "iterator":
            return iter(_items(body, depth))
        if tag == "dict":
            pairs = _items(body, depth)
            if not all(type(pair) is list and len(pair) == 2 for pair in pairs):
                raise ProtocolError("a dict is a list of [key, value] pairs")
            return {key: item for key, item in pairs}
        if tag == "int" and type(body) is str:
            return int(body, 16)
        if tag in ("bytes", "bytearray") and type(body) is str:
            return bytes.fromhex(body) if tag == "bytes" else bytearray.fromhex(body)
        if tag == "complex" and type(body) is list and len(body) == 2 and all(type(x) in (int, float) for x in body):
            return complex(body[0], body[1])
        if tag == "range" and type(body) is list and len(body) == 3 and all(type(x) is int for x in body):
            return range(body[0], body[1], body[2])
    except (TypeError, ValueError) as error:  # unhashable set items or keys, bad hex, a zero range step
        raise ProtocolError(f"{tag}: {error}") from None
    raise ProtocolError(f"not plain data: {node!r:.80}")


# ----------------------------------------------------------------------------------------------------------------------
# JSON lines on a descriptor
# ----------------------------------------------------------------------------------------------------------------------


class _ScannerSettings:  # what json's C scanner reads from a json.JSONDecoder
    strict = True
    object_hook = object_pairs_hook = None
    parse_float, parse_int = float, int
    parse_constant = staticmethod({"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}.get)


_SCANNER = _json.make_scanner(_ScannerSettings()) if _json is not None else None


def dumps(value: Any) -> str:
    """JSON text of ``value``, made of None, booleans, ints, floats (NaN and infinities as ``json`` writes them), strings,
    lists and dicts with string keys; raises TypeError for anything else."""
    if _json is None:
        import json

        return json.dumps(value, separators=(",", ":"))
    parts: list[str] = []
    _write(value, parts)
    return "".join(parts)


def _write(value: Any, parts: list[str]) -> None:
    kind = type(value)
    if value is None or kind is bool:
        parts.append("null" if value is None else "true" if value else "false")
    elif kind is int:
        parts.append(int.__repr__(value))
    elif kind is float:
        if value != value:
            parts.append("NaN")
        elif value in (float("inf"), float("-inf")):
            parts.append("Infinity" if value > 0 else "-Infinity")
        else:
            parts.append(float.__repr__(value))
    elif kind is str:
        parts.append(_json.encode_basestring_ascii(value))
    elif kind is list:
        parts.append("[")
        for position, item in enumerate(value):
            if position:
                parts.append(",")
            _write(item, parts)
        parts.append("]")
    elif kind is dict:
        parts.append("{")
        for position, (key, item) in enumerate(value.items()):
            if type(key) is not str:
                raise TypeError(f"a JSON key must be a string, not {type(key).__name__}")
            parts.append(("," if position else "") + _json.encode_basestring_ascii(key) + ":")
            _write(item, parts)
        parts.append("}")
    else:
        raise TypeError(f"not JSON data: {kind.__name__}")


def loads(text: bytes) -> Any:
    """The value of one JSON text (what :func:`dumps` writes); raises :class:`ProtocolError`."""
    try:
        string = text.decode("utf-8")
        if _SCANNER is None:
            import json

            return json.loads(string)
        value, end = _SCANNER(string, 0)
    except (ValueError, RecursionError, StopIteration) as error:  # UnicodeDecodeError and JSONDecodeError included
        raise ProtocolError(f"unreadable message: {error!r:.200}") from None
    if string[end:].strip():
        raise ProtocolError(f"unreadable message: extra data at {end}")
    return value


class TooLong(Exception):
    """A line longer than the channel's limit."""


class Channel:
    """One JSON object a line, read from and written to the descriptor ``fd`` (a socket or a pipe)."""

    def __init__(self, fd: int, limit: int, write_fd: int | None = None) -> None:
        self.fd, self.write_fd, self.limit = fd, fd if write_fd is None else write_fd, limit
        self.pending = bytearray()
        self.searched = 0

    def send(self, message: dict[str, Any]) -> None:
        view = memoryview((dumps(message) + "\n").encode())
        while view:
            view = view[os.write(self.write_fd, view) :]

    def receive(self) -> dict[str, Any] | None:
        """The next message; None at the end of the stream. Raises :class:`TooLong` or :class:`ProtocolError`."""
        while True:
            end = self.pending.find(b"\n", self.searched)
            if end >= 0:
                line = bytes(self.pending[:end])
                del self.pending[: end + 1]
                self.searched = 0
                message = loads(line)
                if type(message) is not dict:
                    raise ProtocolError(f"not a message: {line[:80]!r}")
                return message
            self.searched = len(self.pending)
            if len(self.pending) > self.limit:
                raise TooLong(f"a message longer than {self.limit} bytes")
            try:
                chunk = os.read(self.fd, 1 << 16)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return None
            self.pending += chunk


def text_of(error: BaseException) -> str:
    """``str(error)``, at most 1000 characters; empty when that raises (the program's ``__str__``)."""
    try:
        return str(error)[:1000]
    except BaseException:  # a str() that raises is the program's; say nothing
        return ""
