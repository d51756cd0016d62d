"""The base classes of the failures a user can fix: a bad config, data file, path, run folder or checkpoint.

Every such error inherits :class:`UserError`; its message is one paragraph that names what is wrong, where (the field,
the file and line, the folder) and the fix. ``genalign`` prints that paragraph and exits with code 2, without a
traceback (``--debug`` shows it); any other exception is a bug and keeps its traceback. This module imports nothing,
so that every package can raise these.
"""

from __future__ import annotations


class UserError(Exception):
    """A failure caused by the user's input, with a message that says what, where and the fix (CLI exit code 2)."""


class UserPathError(UserError, FileNotFoundError):
    """A path the user gave (a model folder, a data file, a checkpoint) does not exist or does not hold what it
    should; still a :class:`FileNotFoundError` for callers that catch that."""


__all__ = ["UserError", "UserPathError"]
