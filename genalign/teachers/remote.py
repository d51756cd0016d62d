"""A teacher on another machine or process (``source: remote``), over HTTP + JSON.

**Protocol.** For every ``batch_size`` samples the client POSTs ``{"prompts": [...], "completions": [...],
"completion_token_ids": [[...], ...]}`` to ``remote.url``: each sample's prompt as the dataset gives it (a string or
chat messages; the server renders it as its model expects), its decoded completion, and the token ids the student
sampled (its action ids, ``action_ids`` of the rollout, in order). The server answers ``200`` with ``{"logprobs":
[[...], ...]}``: for each sample, the log-probability under the teacher of each of its token ids given the prompt
and the tokens before it, one finite number ``<= 0`` per id. The server must use the policy's tokenizer (the ids are
the student's). ``scripts/teacher_server.py`` serves any causal LM folder this way.

**Failures never stop the run.** A request is bounded and retried as the remote rewards' are
(:class:`genalign.rewards.remote.HTTPSettings`: one deadline per attempt for connect, send and receive, a cap on the
answer's size, retries with backoff). A batch whose every attempt failed (timeout, refused connection, HTTP error,
an answer that is not JSON or not ``{"logprobs": [...]}`` with one entry per sample) leaves its samples unscored; an
entry of the wrong length, or with a value that is not a finite number ``<= 0``, leaves its own sample unscored. An
unscored sample has ``teacher_scored = False`` and gets no teacher term (it still trains on its reward advantage);
:meth:`RemoteTeacher.take_metrics` counts ``teacher/requests``, ``retries``, the failures by kind (``timeouts``,
``connection_errors``, ...), ``failed_requests``, ``failed_samples`` (in failed requests) and ``malformed_samples``.

The server sees each row's prompt as the dataset gives it: privileged context and a sample source's guidance (hints,
prefixes) are the business of local teachers, which render prompts like the policy.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from genalign.policies.base import Rollout, TeacherHost
from genalign.remote_calls import CallFailed
from genalign.rewards.remote import CALL_METRICS, Counters, HTTPSettings, api_key_headers, to_json_value
from genalign.teachers.base import PassCount, Teacher, same_count
from genalign.teachers.config import TeacherConfig

#: a log-probability above this is malformed (0 up to float rounding)
LOGP_TOLERANCE = 1e-4
METRICS = (*CALL_METRICS, "failed_requests", "failed_samples", "malformed_samples")


def parse_logprobs(answer: Any, lengths: list[int]) -> list[list[float] | None]:
    """The per-token log-probs of each sample in ``answer``, ``None`` for an entry that does not fit its sample
    (wrong length, a value that is not a finite number ``<= 0``). Raises ValueError when the answer itself is not
    ``{"logprobs": [...]}`` with one entry per sample (the whole batch is then malformed)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("logprobs"), list):
        raise ValueError(f"the answer must be {{'logprobs': [[...], ...]}}, got {str(answer)[:200]}")
    entries = answer["logprobs"]
    if len(entries) != len(lengths):
        raise ValueError(f"the answer holds {len(entries)} entries for {len(lengths)} samples")
    parsed: list[list[float] | None] = []
    for entry, length in zip(entries, lengths, strict=True):
        fits = isinstance(entry, list) and len(entry) == length and all(_is_logp(value) for value in entry)
        parsed.append([float(value) for value in entry] if fits else None)
    return parsed


def _is_logp(value: Any) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and math.isfinite(value) and value <= LOGP_TOLERANCE


class RemoteTeacher(Teacher):
    """A server's per-token log-probs of the sampled token ids (module docstring)."""

    def __init__(self, config: TeacherConfig, host: TeacherHost, batch_size: int) -> None:
        super().__init__(config, host, batch_size)
        options = config.remote
        self.url = options.url
        self.settings = HTTPSettings("algorithm.teacher.remote", options.timeout_s, options.total_timeout_s,
                                     options.retries, options.backoff_s, options.max_response_mb)  # fmt: skip
        self.headers = api_key_headers("algorithm.teacher.remote", options.api_key_env)
        self.counters = Counters(METRICS)

    def judge(
        self, rollout: Rollout, wanted: frozenset[str], *, passes_everywhere: PassCount = same_count
    ) -> dict[str, Tensor]:
        """``teacher_scored`` and ``teacher_action_logp`` ``[n, T]`` (0 where unscored) from the server."""
        mask = rollout.action_mask
        valid = (mask > 0).cpu()  # [n, T]
        ids = rollout.structure["action_ids"].cpu()  # [n, T] (requested by the config: AlgorithmConfig.needs)
        logp = torch.zeros(mask.shape, dtype=torch.float32)
        scored = torch.zeros(len(rollout), dtype=torch.bool)
        for block in self.batches(len(rollout)):
            tokens = [ids[i][valid[i]].tolist() for i in block]
            for i, values in zip(block, self._request(rollout, block, tokens), strict=True):
                if values is not None:
                    logp[i, valid[i]] = torch.tensor(values, dtype=torch.float32)
                    scored[i] = True
        return {"teacher_scored": scored.to(mask.device), "teacher_action_logp": logp.to(mask.device)}

    def _request(self, rollout: Rollout, block: list[int], tokens: list[list[int]]) -> list[list[float] | None]:
        """The parsed answer for the samples ``block`` (all ``None`` when the request failed)."""
        payload = {
            "prompts": [to_json_value(rollout.rows[i]["prompt"], encode_images=False) for i in block],
            "completions": [str(rollout.outputs[i]) for i in block],
            "completion_token_ids": tokens,
        }
        lengths = [len(t) for t in tokens]
        try:
            answer = self.settings.post(
                self.url, payload, lambda raw: parse_logprobs(raw, lengths), self.counters, self.headers
            )
        except CallFailed:
            self.counters.add("failed_requests")
            self.counters.add("failed_samples", len(block))
            return [None] * len(block)
        self.counters.add("malformed_samples", sum(values is None for values in answer))
        return answer

    def take_metrics(self) -> dict[str, float]:
        return {f"teacher/{key}": value for key, value in self.counters.pop().items()}


__all__ = ["LOGP_TOLERANCE", "RemoteTeacher", "parse_logprobs"]
