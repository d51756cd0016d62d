"""Small files shipped with genalign (the demo model ``arith-lm``), addressed as ``"builtin:<name>"``.

Nothing here ever reaches a model hub: a name is either a built-in asset folder or a path on disk.
"""

from __future__ import annotations

import os
from pathlib import Path

from genalign.errors import UserPathError
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
            raise UserPathError(
                f"unknown built-in asset {name_or_path!r}.{did_you_mean(name, names)} "
                f"Available: {', '.join(BUILTIN_PREFIX + n for n in names) or '(none)'}."
            )
        return folder
    path = Path(name_or_path).expanduser()
    if not path.exists():
        raise UserPathError(
            f"path {name_or_path!r} does not exist (resolved to {path.resolve()}). genalign never downloads from a "
            f"model hub: download the model yourself and pass its local folder, or use one of "
            f"{', '.join(BUILTIN_PREFIX + n for n in available_builtins()) or '(no built-ins)'}."
        )
    return path


def _looks_local(value: str) -> bool:
    """A filesystem path rather than a hub id (``org/name``): absolute, relative with ``./``, ``~``, or deeper."""
    return value.startswith(("/", "./", "../", "~", ".\\")) or value.count("/") > 1 or "\\" in value


def model_location(name_or_path: str, *, field: str = "policy.model", marker: str | None = "config.json") -> str:
    """What to hand to ``from_pretrained``: the bundled folder for ``"builtin:<name>"``; a local folder, checked; a hub
    id (``org/name``) unchanged, for the user's own cache or network.

    Args:
        field: the config field that named it (in error messages).
        marker: a file a saved model of the family has in its folder (``config.json``; ``model_index.json`` for a
            diffusers pipeline); None skips that check.

    Raises:
        UserPathError (a FileNotFoundError): a local path or built-in that does not exist, is empty, or holds no
            ``marker`` (a model of another family), or a hub id that is not in the local cache while offline
            (``HF_HUB_OFFLINE``), with the fix.
    """
    path = resolve(name_or_path) if name_or_path.startswith(BUILTIN_PREFIX) else Path(name_or_path).expanduser()
    if not path.exists() and not _looks_local(name_or_path):
        _check_cached_when_offline(name_or_path, field, marker)
        return name_or_path  # a hub id
    if not path.is_dir():
        what = "is a file, not a folder" if path.exists() else "does not exist"
        raise UserPathError(
            f"{field}={name_or_path!r} {what} (resolved to {path.resolve()}). Give the local folder of a saved model "
            f"(save_pretrained) or one of {', '.join(BUILTIN_PREFIX + n for n in available_builtins())}; genalign never "
            "downloads a model by itself."
        )
    if not any(path.iterdir()):
        raise UserPathError(f"{field}={name_or_path!r} is an empty folder; save the model there first.")
    if marker is not None and not (path / marker).exists():
        raise UserPathError(
            f"{field}={name_or_path!r} holds no {marker}: it is not a saved model of this policy.family (write it with "
            "save_pretrained, point at the folder that holds the weights, or set the family the model belongs to)."
        )
    return str(path)


def _check_cached_when_offline(hub_id: str, field: str, marker: str | None) -> None:
    """Offline (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``), a hub id must be in the local cache: say so at once,
    with the command that fills the cache, instead of the loader's error after a start-up."""
    offline = [
        v
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
        if os.environ.get(v, "").upper() in {"1", "ON", "YES", "TRUE"}
    ]
    if not offline or marker is None:
        return
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return
    if isinstance(try_to_load_from_cache(hub_id, marker), str):
        return
    raise UserPathError(
        f"{field}={hub_id!r} is a Hugging Face Hub id, and its {marker} is not in the local cache while "
        f"{offline[0]}={os.environ[offline[0]]} keeps genalign offline. Download it on a machine with internet "
        f"(huggingface-cli download {hub_id}) and copy the cache, or give the local folder of a saved model."
    )
