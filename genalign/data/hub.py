"""Hugging Face Hub datasets by name (``hf:ORG/NAME``), offline-aware and fast to fail.

``load_hub_splits(name, subset, split, advice=...)`` returns ``{split: [row dict, ...]}`` through
``datasets.load_dataset``. Before touching the Hub it decides whether the Hub can be reached: offline mode is on when
``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` is set, or when a TCP connection to the Hub
endpoint (or the HTTPS proxy) does not open within ``PROBE_TIMEOUT_S``. Offline, ``datasets`` and
``huggingface_hub`` are switched to offline mode for the call, so only the local datasets cache is read and a dataset
that is not there fails at once (instead of ~25-50 s of HTTP retries) with a :class:`DataError` that says why the Hub
is out of reach and how to pre-download the data (``advice``).
"""

from __future__ import annotations

import os
import re
import socket
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlparse

from genalign.data.errors import DataError

HUB_PREFIX = "hf:"
#: ``NAME`` or ``ORG/NAME`` as the Hub spells repository ids
HUB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
PROBE_TIMEOUT_S = 2.0
DEFAULT_ENDPOINT = "https://huggingface.co"


def describe(name: str, subset: str | None, split: str | None) -> str:
    """``hf:ORG/NAME (subset 'x', split 'y')``: how error messages name a Hub source."""
    details = [f"subset {subset!r}"] * (subset is not None) + [f"split {split!r}"] * (split is not None)
    return f"{HUB_PREFIX}{name}" + (f" ({', '.join(details)})" if details else "")


def save_to_disk_command(name: str, subset: str | None, split: str | None, folder: str) -> str:
    """The one-line command that downloads ``name`` on a machine with internet and saves it to ``folder``."""
    args = ", ".join([repr(name), *([repr(subset)] if subset else []), *([f"split={split!r}"] if split else [])])
    return f"python -c \"import datasets; datasets.load_dataset({args}).save_to_disk('{folder}')\""


def env_offline_reason() -> str | None:
    """Which offline variable is set (``HF_HUB_OFFLINE=1`` ...), or None."""
    for variable in OFFLINE_VARIABLES:
        if os.environ.get(variable, "").strip().upper() in {"1", "ON", "YES", "TRUE"}:
            return f"{variable}={os.environ[variable]} is set"
    return None


def probe(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """``None`` when a TCP connection to ``url``'s host (or the HTTPS proxy) opens within ``timeout_s``; else why not.

    The connection (name lookup included) runs in a daemon thread so a hanging DNS lookup cannot block longer than
    ``timeout_s``.
    """
    proxy = urllib.request.getproxies().get(urlparse(url).scheme or "https")
    target = urlparse(proxy if proxy else url)
    host, port = target.hostname or "", target.port or (443 if target.scheme == "https" else 80)
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            outcome.append(None)
        except OSError as error:
            outcome.append(f"{host}:{port} is unreachable ({error.strerror or error})")

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout_s + 0.5)
    return outcome[0] if outcome else f"{host}:{port} did not answer within {timeout_s:g} s"


def offline_reason() -> str | None:
    """Why genalign treats the Hub as unreachable now (an offline variable, or the endpoint does not answer)."""
    reason = env_offline_reason()
    if reason is not None:
        return reason
    try:
        from huggingface_hub import constants

        endpoint = constants.ENDPOINT
        if constants.HF_HUB_OFFLINE:
            return "huggingface_hub is in offline mode"
    except ImportError:
        endpoint = os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT)
    return probe(endpoint)


@contextmanager
def forced_offline(enabled: bool) -> Iterator[None]:
    """Switch ``datasets`` and ``huggingface_hub`` to offline mode for the block (they read the variables at import,
    so setting the environment later is not enough); restore the previous values afterwards."""
    if not enabled:
        yield
        return
    import datasets
    from huggingface_hub import constants

    saved = datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = saved


def load_hub_splits(name: str, subset: str | None, split: str | None, *, advice: str) -> dict[str, list[dict]]:
    """Rows of ``name`` (a Hub dataset id) as ``{split: [row, ...]}``: one split when ``split`` is given, else all.

    Args:
        name: ``ORG/NAME`` or ``NAME``.
        subset: the dataset's configuration (``datasets.load_dataset``'s second argument), e.g. ``"main"``.
        split: a split name (slices such as ``"train[:100]"`` work too), or None for every split.
        advice: what the user can do when the dataset is out of reach (appended to the error message).

    Raises:
        DataError: offline and not in the local cache, or the Hub/cache rejects the name, subset or split.
        ImportError: the ``datasets`` package is missing.
    """
    try:
        import datasets
    except ImportError as error:
        raise ImportError(f"reading {HUB_PREFIX}{name} needs the datasets package: pip install datasets") from error
    where = describe(name, subset, split)
    reason = offline_reason()
    try:
        with forced_offline(reason is not None):
            loaded = datasets.load_dataset(name, subset, split=split)
    except (OSError, ValueError) as error:  # ConnectionError, FileNotFoundError, HTTP errors, bad subset/split
        said = " ".join(str(error).split())
        if reason is not None:
            cause = "" if isinstance(error, ConnectionError) else f" (the cache says: {said})"
            raise DataError(
                f"{where}: not in the local datasets cache ({datasets.config.HF_DATASETS_CACHE}){cause}, and genalign "
                f"runs offline here ({reason}), so the Hub is not contacted. {advice}"
            ) from error
        raise DataError(f"{where}: {type(error).__name__}: {said}") from error
    if isinstance(loaded, datasets.DatasetDict):
        return {key: [dict(row) for row in part] for key, part in loaded.items()}
    return {split or "train": [dict(row) for row in loaded]}


def rows_of_split(splits: dict[str, list[dict[str, Any]]], split: str | None, where: str) -> list[dict[str, Any]]:
    """The rows of ``split``, or of the only split when ``split`` is None; a :class:`DataError` lists the splits."""
    if split is None and len(splits) == 1:
        return next(iter(splits.values()))
    if split not in splits:
        raise DataError(f"{where}: holds splits {sorted(splits)}; set data.split to one of them (got {split!r}).")
    return splits[split]
