"""``remote_reward``: score completions on another machine or process, over HTTP + JSON.

**Protocol.** The client POSTs ``{"prompts": [...], "completions": [...], "columns": {name: [...]}}`` (``B`` entries
each, ``B <= batch_size``) to ``url`` and expects ``200`` with ``{"rewards": [float | null, ...]}`` of length ``B``;
``null`` means "not applicable" (as ``None`` from a local reward). Texts and chat messages travel as JSON; with
``encode_images=True`` an image (RGB PIL image or ``[H, W, 3]`` uint8 array) travels as ``{"$image": "<base64 PNG>"}``
and a video (``[F, H, W, 3]`` uint8) as ``{"$video": ["<base64 PNG>", ...]}``, wherever it appears (completions or
columns); other numpy arrays and tensors travel as nested lists. ``scripts/reward_server.py`` is a reference server
that serves any registered genalign reward this way (and decodes images back).

**Errors.** Each attempt has one deadline, ``timeout_s``, for connect, send and receive together (a server that
trickles bytes fails it as surely as one that never answers), and an answer larger than ``max_response_mb`` is
abandoned; :mod:`genalign.remote_calls` does the HTTP and says what fails how. An attempt fails on a timeout, a
refused or dropped connection, an HTTP status other than 2xx, a redirect to another scheme, host or port (refused, so
an ``Authorization`` header never leaves its origin), an answer too large, an answer that is not JSON (or nests too
deeply to parse), or a malformed one (no ``rewards`` list, wrong length, a value that is not a finite number or null).
Failed attempts are retried ``retries`` times after ``backoff_s * 2**k`` seconds (``k`` = 0, 1, ...; plus up to half
as much again at random), all within ``total_timeout_s`` when set, except HTTP 4xx answers other than 408/425/429, an
answer too large and a refused redirect, which a retry cannot fix. A batch still failing then raises a RuntimeError
(``on_failure="raise"``) or scores ``None`` for its samples (``on_failure="skip"``: excluded from the group
statistics like any not-applicable reward, and counted). A failure never becomes a silent 0.
:meth:`RemoteReward.pop_metrics` reports ``requests``, ``retries``, ``failed_requests``, ``failed_samples``,
``null_rewards`` and the failures by kind (``timeouts``, ``connection_errors``, ``http_errors``,
``redirects_refused``, ``too_large_responses``, ``bad_json_responses``, ``malformed_responses``) since the previous
call.
"""

from __future__ import annotations

import base64
import io
import json
import math
import os
import threading
import typing
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from genalign.remote_calls import CallFailed, call_json, origin
from genalign.rewards.base import register_reward

T = TypeVar("T")
OnFailure = Literal["raise", "skip"]


# ----------------------------------------------------------------------------------------------------------------------
# shared by the HTTP rewards (remote_reward, llm_judge)
# ----------------------------------------------------------------------------------------------------------------------


class Counters:
    """Thread-safe named counts, read and reset by :meth:`pop` (the rewards' ``pop_metrics``)."""

    def __init__(self, keys: Sequence[str]) -> None:
        self._keys = tuple(keys)
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(self._keys, 0)

    def add(self, key: str, amount: int = 1) -> None:
        assert key in self._counts, key
        with self._lock:
            self._counts[key] += amount

    def pop(self) -> dict[str, float]:
        with self._lock:
            counts, self._counts = self._counts, dict.fromkeys(self._keys, 0)
        return {key: float(value) for key, value in counts.items()}


def check_positive(reward: str, field: str, value: Any, *, integer: bool, minimum: float = 0.0) -> None:
    """Raise a ValueError naming ``reward``, ``field`` and ``value`` unless ``value`` is a number (an int when
    ``integer``) that is at least ``minimum``."""
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or value < minimum:
        what = "an integer" if integer else "a number"
        raise ValueError(f"{reward}: {field}={value!r} is not valid; use {what} >= {minimum:g}.")


def is_http_address(url: Any) -> bool:
    """Whether ``url`` is an ``http://`` or ``https://`` address with a host (and a valid port)."""
    try:
        return isinstance(url, str) and bool(origin(url))
    except ValueError:
        return False


def check_choice(reward: str, field: str, value: Any, options: Any) -> None:
    """Raise a ValueError naming the field and the accepted values unless ``value`` is one of the ``Literal``."""
    choices = typing.get_args(options)
    if value not in choices:
        raise ValueError(f"{reward}: {field}={value!r} is not valid; use one of {', '.join(map(repr, choices))}.")


def api_key_headers(reward: str, api_key_env: str | None) -> dict[str, str]:
    """``{"Authorization": "Bearer <key>"}`` from the environment variable ``api_key_env`` (nothing when None)."""
    if api_key_env is None:
        return {}
    key = os.environ.get(api_key_env)
    if not key:
        raise ValueError(
            f"{reward}: api_key_env={api_key_env!r} names an environment variable that is not set; export "
            f"{api_key_env}=<key> before training, or drop api_key_env for a server without authentication."
        )
    return {"Authorization": f"Bearer {key}"}


#: The counter of each failure kind of :mod:`genalign.remote_calls` in the HTTP rewards' metrics.
FAILURE_COUNTERS = {"timeout": "timeouts", "connection": "connection_errors", "http_status": "http_errors",
                    "redirect_refused": "redirects_refused", "too_large": "too_large_responses",
                    "bad_json": "bad_json_responses", "malformed": "malformed_responses"}  # fmt: skip
#: What :meth:`HTTPSettings.post` counts: attempts, retries and failures by kind.
CALL_METRICS = ("requests", "retries", *FAILURE_COUNTERS.values())
_EVENT_COUNTERS = {"request": "requests", "retry": "retries"} | FAILURE_COUNTERS


@dataclass(frozen=True)
class HTTPSettings:
    """How an HTTP reward calls its server (module docstring), checked at construction.

    Args:
        reward: the reward's name, in error messages.
        timeout_s: deadline of one attempt (connect, send and receive).
        total_timeout_s: deadline of all attempts and the waits between them (None: no more than they take).
        retries: further attempts of a failed request.
        backoff_s: wait before retry ``k``: ``backoff_s * 2**k``, plus up to half as much again at random.
        max_response_mb: an answer larger than this many MiB fails (``too_large``) without being read further.
    """

    reward: str
    timeout_s: float
    total_timeout_s: float | None
    retries: int
    backoff_s: float
    max_response_mb: float

    def __post_init__(self) -> None:
        check_positive(self.reward, "timeout_s", self.timeout_s, integer=False, minimum=1e-3)
        if self.total_timeout_s is not None:
            check_positive(self.reward, "total_timeout_s", self.total_timeout_s, integer=False, minimum=1e-3)
        check_positive(self.reward, "retries", self.retries, integer=True)
        check_positive(self.reward, "backoff_s", self.backoff_s, integer=False)
        check_positive(self.reward, "max_response_mb", self.max_response_mb, integer=False, minimum=1e-3)

    def post(self, url: str, payload: Any, parse: Callable[[Any], T], counters: Counters,
             headers: Mapping[str, str]) -> T:  # fmt: skip
        """``parse(answer)`` of a POST of ``payload`` to ``url``, retried; counts :data:`CALL_METRICS` in
        ``counters``. Raises :class:`~genalign.remote_calls.CallFailed` when every attempt failed."""
        return call_json("POST", url, payload, timeout_s=self.timeout_s, retries=self.retries,
                         backoff_s=self.backoff_s, total_timeout_s=self.total_timeout_s,
                         max_response_bytes=int(self.max_response_mb * 2**20), headers=headers, parse=parse,
                         record=lambda event: counters.add(_EVENT_COUNTERS[event]))  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------------
# JSON encoding of batches (images as base64 PNG)
# ----------------------------------------------------------------------------------------------------------------------


def _png_base64(array: Any) -> str:
    from PIL import Image

    image = array if isinstance(array, Image.Image) else Image.fromarray(array, mode="RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def to_json_value(value: Any, *, encode_images: bool = True, where: str = "value") -> Any:
    """``value`` as JSON data: images -> ``{"$image": png}``, videos -> ``{"$video": [png, ...]}`` (module docstring),
    other arrays and tensors -> nested lists. ``where`` names the value in errors."""
    import numpy as np
    from PIL import Image

    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, Mapping):
        return {str(k): to_json_value(v, encode_images=encode_images, where=where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(v, encode_images=encode_images, where=where) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    is_image = isinstance(value, Image.Image)
    if not is_image and hasattr(value, "__array__"):
        array = np.asarray(value.detach().cpu() if hasattr(value, "detach") else value)
        is_image = array.dtype == np.uint8 and array.ndim in (3, 4) and array.shape[-1] == 3
        if not is_image:
            return array.tolist()
        value = array
    if is_image:
        if not encode_images:
            raise TypeError(
                f"remote_reward: {where} holds an image and encode_images is false; set encode_images: true to send "
                "images as base64 PNG."
            )
        if isinstance(value, Image.Image):
            return {"$image": _png_base64(value.convert("RGB"))}
        if value.ndim == 4:
            return {"$video": [_png_base64(frame) for frame in value]}
        return {"$image": _png_base64(value)}
    raise TypeError(
        f"remote_reward: {where} is a {type(value).__name__}, which cannot be sent as JSON; send only JSON data, "
        "images or arrays (or leave that column out with the columns arg)."
    )


def from_json_value(value: Any) -> Any:
    """The inverse of :func:`to_json_value` for images and videos: ``{"$image"}`` -> RGB PIL image, ``{"$video"}`` ->
    ``[F, H, W, 3]`` uint8 array (for servers)."""
    import numpy as np
    from PIL import Image

    if isinstance(value, list):
        return [from_json_value(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {"$image"}:
            return Image.open(io.BytesIO(base64.b64decode(value["$image"]))).convert("RGB")
        if set(value) == {"$video"}:
            frames = [np.asarray(from_json_value({"$image": frame})) for frame in value["$video"]]
            return np.stack(frames)  # [F, H, W, 3]
        return {k: from_json_value(v) for k, v in value.items()}
    return value


def parse_rewards(answer: Any, count: int) -> list[float | None]:
    """The ``rewards`` of a server answer, checked: a list of ``count`` finite numbers or nulls (ValueError else)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("rewards"), list):
        raise ValueError(f'expected {{"rewards": [...]}}, got {json.dumps(answer)[:200]}')
    rewards = answer["rewards"]
    if len(rewards) != count:
        raise ValueError(f"{len(rewards)} rewards for a batch of {count}")
    for i, value in enumerate(rewards):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
        ):
            raise ValueError(f"reward {i} is {value!r}, not a finite number or null")
    return [None if value is None else float(value) for value in rewards]


# ----------------------------------------------------------------------------------------------------------------------
# the reward
# ----------------------------------------------------------------------------------------------------------------------

_METRICS = (*CALL_METRICS, "failed_requests", "failed_samples", "null_rewards")


@register_reward("remote_reward", source="HTTP")
class RemoteReward:
    """Rewards computed by an HTTP server (module docstring for the protocol and the errors).

    Args:
        url: the endpoint the batches are POSTed to, e.g. ``http://reward-host:8000/score``.
        batch_size: samples per request.
        max_concurrency: requests in flight at once (threads).
        timeout_s: deadline of one attempt, connect, send and receive together, in seconds.
        retries: further attempts of a failed request.
        backoff_s: wait before retry ``k`` (0-based): ``backoff_s * 2**k`` seconds, plus up to half as much again.
        total_timeout_s: deadline of a request's attempts and waits together (None: ``retries + 1`` attempts).
        max_response_mb: an answer larger than this (MiB) fails as ``too_large``, read no further.
        on_failure: ``"raise"``: a batch failing after its retries raises RuntimeError; ``"skip"``: its samples score
            None (not applicable) and are counted in ``failed_samples``.
        encode_images: send images and videos as base64 PNG; with false an image in the batch raises.
        columns: the dataset columns to send (default: all of them).
        api_key_env: environment variable holding a key sent as ``Authorization: Bearer <key>``.
    """

    def __init__(
        self,
        *,
        url: str,
        batch_size: int = 32,
        max_concurrency: int = 4,
        timeout_s: float = 60.0,
        retries: int = 2,
        backoff_s: float = 1.0,
        total_timeout_s: float | None = None,
        max_response_mb: float = 16.0,
        on_failure: OnFailure = "raise",
        encode_images: bool = True,
        columns: list[str] | None = None,
        api_key_env: str | None = None,
    ) -> None:
        if not is_http_address(url):
            raise ValueError(f"remote_reward: url={url!r} is not valid; use an http:// or https:// address.")
        check_positive("remote_reward", "batch_size", batch_size, integer=True, minimum=1)
        check_positive("remote_reward", "max_concurrency", max_concurrency, integer=True, minimum=1)
        self.http = HTTPSettings("remote_reward", timeout_s, total_timeout_s, retries, backoff_s, max_response_mb)
        check_choice("remote_reward", "on_failure", on_failure, OnFailure)
        if not isinstance(encode_images, bool):
            raise ValueError(f"remote_reward: encode_images={encode_images!r} must be true or false.")
        if columns is not None and not (isinstance(columns, list) and all(isinstance(c, str) for c in columns)):
            raise ValueError(f"remote_reward: columns={columns!r} must be a list of column names (or null for all).")
        self.url = url
        self.batch_size = batch_size
        self.max_concurrency = max_concurrency
        self.on_failure = on_failure
        self.encode_images = encode_images
        self.columns = columns
        self.headers = api_key_headers("remote_reward", api_key_env)
        self._counters = Counters(_METRICS)

    def _payloads(self, prompts: Sequence[str], completions: Sequence[Any], columns: Mapping[str, Sequence[Any]]):
        """``[(start, payload)]``, one per batch of ``batch_size`` samples."""
        if self.columns is not None:
            missing = [name for name in self.columns if name not in columns]
            if missing:
                raise ValueError(
                    f"remote_reward: columns {missing} are not in the batch (it has {sorted(columns)}); fix the "
                    "columns arg or the data."
                )
            columns = {name: columns[name] for name in self.columns}
        encode = self.encode_images
        payloads = []
        for start in range(0, len(completions), self.batch_size):
            stop = start + self.batch_size
            payload = {
                "prompts": to_json_value(list(prompts[start:stop]), encode_images=encode, where="a prompt"),
                "completions": to_json_value(list(completions[start:stop]), encode_images=encode, where="a completion"),
                "columns": {
                    name: to_json_value(list(values[start:stop]), encode_images=encode, where=f"column {name!r}")
                    for name, values in columns.items()
                },
            }
            payloads.append((start, payload))
        return payloads

    def _request(self, payload: dict[str, Any]) -> list[float | None] | CallFailed:
        count = len(payload["completions"])
        try:
            return self.http.post(self.url, payload, lambda answer: parse_rewards(answer, count), self._counters,
                                  self.headers)  # fmt: skip
        except CallFailed as failure:
            self._counters.add("failed_requests")
            self._counters.add("failed_samples", count)
            return failure

    def __call__(
        self, prompts: Sequence[str], completions: Sequence[Any], **columns: Sequence[Any]
    ) -> list[float | None]:
        if len(prompts) != len(completions):
            raise ValueError(f"remote_reward: {len(prompts)} prompts for {len(completions)} completions.")
        payloads = self._payloads(prompts, completions, columns)
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, max(len(payloads), 1))) as pool:
            results = list(pool.map(self._request, [payload for _, payload in payloads]))
        failures = [result for result in results if isinstance(result, CallFailed)]
        if failures and self.on_failure == "raise":
            raise RuntimeError(
                f"remote_reward: {len(failures)} of {len(payloads)} requests to {self.url} failed after "
                f"retries={self.http.retries} retries; last error ({failures[-1].kind}): {failures[-1]}. Check that the "
                "server runs and answers the protocol (docs/reward_models.md), raise timeout_s or retries, or set "
                "on_failure: skip to score the failed samples None (counted in failed_samples)."
            )
        rewards: list[float | None] = []
        for (_, payload), result in zip(payloads, results, strict=True):
            if isinstance(result, CallFailed):
                rewards.extend([None] * len(payload["completions"]))
            else:
                self._counters.add("null_rewards", sum(value is None for value in result))
                rewards.extend(result)
        return rewards

    def pop_metrics(self) -> dict[str, float]:
        """The request and failure counts since the previous call (module docstring)."""
        return self._counters.pop()
