"""Small files shipped with genalign (the demo model ``arith-lm``), addressed as ``"builtin:<name>"``.

Nothing here ever reaches a model hub: a name is either a built-in asset folder or a path on disk.
"""

from __future__ import annotations

from pathlib import Path

from genalign.registry import did_you_mean

ASSETS_DIR = Path(__file__).resolve().parent
BUILTIN_PREFIX = "builtin:"


def available_builtins() -> list[str]:
    """Names of the built-in assets (sub-folders of ``genalign/assets``)."""
    return sorted(p.name for p in ASSETS_DIR.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def resolve(name_or_path: str) -> Path:
    """Turn ``"builtin:<name>"`` or a filesystem path into an existing local path.

    Args:
        name_or_path: ``"builtin:arith-lm"`` for a folder shipped in ``genalign/assets``, or any local path
            (``~`` is expanded). Hub ids such as ``"Qwen/Qwen2.5-0.5B"`` are treated as paths and must exist locally.

    Raises:
        FileNotFoundError: the built-in does not exist (the message lists the available ones) or the path does not
            exist (the message names it).
    """
    if name_or_path.startswith(BUILTIN_PREFIX):
        name = name_or_path[len(BUILTIN_PREFIX) :]
        folder = ASSETS_DIR / name
        names = available_builtins()
        if not name or name not in names:
            raise FileNotFoundError(
                f"unknown built-in asset {name_or_path!r}.{did_you_mean(name, names)} "
                f"Available: {', '.join(BUILTIN_PREFIX + n for n in names) or '(none)'}."
            )
        return folder
    path = Path(name_or_path).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"path {name_or_path!r} does not exist (resolved to {path.resolve()}). genalign never downloads from a "
            f"model hub: download the model yourself and pass its local folder, or use one of "
            f"{', '.join(BUILTIN_PREFIX + n for n in available_builtins()) or '(no built-ins)'}."
        )
    return path


def model_location(name_or_path: str) -> str:
    """What to hand to ``from_pretrained``: the bundled folder for ``"builtin:<name>"``, anything else unchanged
    (a local folder, or a hub id that the user's own cache or network can serve)."""
    return str(resolve(name_or_path)) if name_or_path.startswith(BUILTIN_PREFIX) else name_or_path
