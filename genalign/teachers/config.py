"""``algorithm.teacher``: which teacher judges the student's sampled actions, configured like the policy's reference.

Three sources (:data:`TeacherSource`):

* ``model`` — another model of the policy's family (``model``, optionally ``tokenizer`` and ``dtype``), loaded like
  the frozen reference copy and scored through the family's own chunked head pass. Its tokenizer must map every token
  to the same id as the policy's (:mod:`genalign.teachers.vocabulary`): the teacher scores the student's token ids.
* ``self`` — the policy's own weights: ``weights: base`` (the reference: adapters disabled or the frozen original)
  or ``weights: current`` (the weights being trained), usually with privileged ``context`` (the row's reference
  answer, a hint) that the student never sees ([107] COPSD, [43] hindsight OPD, [262] SDPO's self-teacher).
* ``remote`` — a server that returns the log-probability of every sampled token (:mod:`genalign.teachers.remote`);
  a failed or malformed answer skips the samples it was for (counted), never the run.

Teachers without logits ([130]): a teacher that only writes text is used through a ``self`` teacher whose ``context``
quotes a row column holding that text (a dataset column filled by the black-box teacher beforehand, e.g.
``context: "\\nA strong solution: {teacher_solution}\\n"``, the self-context reading of [72] TREK); a teacher that only
scores is a reward (``remote_reward``, ``llm_judge``), not a teacher. Neither needs logits.

``context`` and ``contrast_context`` are templates appended to the prompt (to the last user message of a chat
prompt): ``{column}`` is the row's column, and in ``contrast_context`` ``{other.column}`` is that column of another
prompt of the batch (a wrong hint, [135] RLCSD; :mod:`genalign.teachers.context`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from genalign.teachers.context import Template
from genalign.teachers.distribution_options import DistributionOptions
from genalign.teachers.routing_options import RoutingOptions

TeacherSource = Literal["model", "self", "remote"]

#: The teacher signals (genalign.algorithms.signals, producer ``teacher``) each source can supply; the contrast
#: log-probs need a ``contrast_context`` too.
SUPPLIED: dict[str, frozenset[str]] = {
    "model": frozenset({"teacher_scored", "teacher_action_logp", "teacher_entropy", "teacher_contrast_logp"}),
    "self": frozenset({"teacher_scored", "teacher_action_logp", "teacher_entropy", "teacher_contrast_logp"}),
    "remote": frozenset({"teacher_scored", "teacher_action_logp"}),
}
#: the signals of the full-distribution pass (genalign.teachers.distribution) and of an anchor
DISTRIBUTION_SUPPLIED = frozenset({"teacher_vocab_reverse_kl", "teacher_vocab_forward_kl"})


def _help(text: str, default=None, *, path: bool = False, factory=None):
    # a path field may also hold a hub id (genalign.config.paths)
    metadata = {"help": text} | ({"path": True, "hub_id": True} if path else {})
    return field(default_factory=factory, metadata=metadata) if factory else field(default=default, metadata=metadata)


@dataclass
class RemoteTeacherOptions:
    """How a ``remote`` teacher is called (the HTTP settings of the remote rewards, :mod:`genalign.remote_calls`)."""

    url: str = _help("POST address of the teacher server (protocol: genalign.teachers.remote).", "")
    timeout_s: float = _help("Deadline of one attempt: connect, send and receive.", 30.0)
    total_timeout_s: float | None = _help("Deadline of all attempts of one batch and the waits between them.")
    retries: int = _help("Further attempts of a failed batch (4xx answers other than 408/425/429 are not retried).", 1)
    backoff_s: float = _help("Wait before retry k: backoff_s * 2**k, plus up to half as much again at random.", 1.0)
    max_response_mb: float = _help("An answer larger than this many MiB fails without being read further.", 16.0)
    api_key_env: str | None = _help("Environment variable holding a bearer token (sent as Authorization).")


@dataclass
class TeacherConfig:
    """The teacher of on-policy distillation (module docstring); read by the options whose needs name a teacher signal
    (``teacher_action_logp``, ``teacher_entropy``, ``teacher_contrast_logp``, ``teacher_scored``)."""

    source: TeacherSource = _help(
        "model: another model of the policy's family (same tokenizer); self: the policy's own base or current weights; "
        "remote: a server returning per-token log-probs.",
        "model",
    )
    model: str | None = _help(
        "source: model: the teacher's model folder, or 'builtin:<name>' (with routing: the teacher of the prompts "
        "whose domain has no expert; null: those are not scored).",
        path=True,
    )
    family: str | None = _help(
        "source: model: the teacher's family; it must be the policy's (the teacher is scored through the student's "
        "pass); null: the policy's."
    )
    tokenizer: str | None = _help("source: model: the teacher's tokenizer folder; null: the model folder.", path=True)
    dtype: Literal["float32", "bfloat16", "float16"] | None = _help(
        "source: model: the teacher's weight dtype; null: the policy's."
    )
    weights: Literal["base", "current"] = _help(
        "source: self: 'base' (the reference: adapters disabled or the frozen original) or 'current' (the weights "
        "being trained; needs a context, else the teacher is the student).",
        "base",
    )
    context: str | None = _help(
        "source: model or self: privileged context appended to the prompt as the teacher sees it; '{column}' is the "
        "row's column, e.g. '\\nReference answer: {answer}\\n'. null: the student's prompt."
    )
    contrast_context: str | None = _help(
        "source: model or self: the context of the contrast pass (teacher_contrast_logp, [135]); '{other.column}' is "
        "the column of another prompt of the batch, e.g. '\\nReference answer: {other.answer}\\n' (a wrong hint)."
    )
    batch_size: int | None = _help("Samples per teacher pass (or remote request); null: algorithm.micro_batch_size.")
    remote: RemoteTeacherOptions = _help("source: remote: the server and how it is called.",
                                         factory=RemoteTeacherOptions)  # fmt: skip
    distribution: DistributionOptions = _help(
        "source: model or self: an anchor model and the logit extrapolation of the teacher "
        "(genalign.teachers.distribution; [85], [89]).",
        factory=DistributionOptions,
    )
    routing: RoutingOptions = _help(
        "source: model: domain-expert teacher models routed per prompt by a row column ([317] MOPD; "
        "genalign.teachers.routed).",
        factory=RoutingOptions,
    )

    def validate(self) -> None:
        """Each field belongs to its source; templates parse; sizes and deadlines are positive."""
        set_fields = {
            "model": self.model is not None, "family": self.family is not None, "tokenizer": self.tokenizer is not None,
            "dtype": self.dtype is not None, "weights": self.weights != "base", "context": self.context is not None,
            "contrast_context": self.contrast_context is not None, "remote.url": bool(self.remote.url),
        }  # fmt: skip
        stray = [name for name, given in set_fields.items() if given and name not in _OWNERS[self.source]]
        if stray:
            owners = {name: [s for s, fields in _OWNERS.items() if name in fields] for name in stray}
            raise ValueError(
                f"{stray[0]} is set, but it belongs to source {' or '.join(map(repr, owners[stray[0]]))}, not source "
                f"{self.source!r}; remove it or set source."
            )
        if self.routing.enabled and self.source != "model":
            raise ValueError(
                f"routing routes prompts to expert teacher models; it needs source 'model', not {self.source!r}."
            )
        if self.source == "model" and not self.model and not self.routing.enabled:
            raise ValueError("source 'model' needs model (the teacher's model folder, or 'builtin:<name>').")
        if self.source == "remote":
            self._check_remote()
        if self.source == "self" and self.weights == "current" and self.context is None:
            raise ValueError(
                "source 'self' with weights 'current' and no context is the student itself (every distillation term "
                "would be 0); give a context (privileged context such as '\\nReference answer: {answer}\\n') or use "
                "weights 'base'."
            )
        if self.context is not None:
            Template.parse(self.context, "context", others=False)
        if self.contrast_context is not None:
            Template.parse(self.contrast_context, "contrast_context", others=True)
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size = {self.batch_size} must be >= 1, or null.")
        self.distribution.validate()
        self.distribution.check_source(self.source)

    def _check_remote(self) -> None:
        from genalign.rewards.remote import HTTPSettings, is_http_address

        options = self.remote
        if not is_http_address(options.url):
            raise ValueError(
                f"remote.url = {options.url!r} must be an http:// or https:// address of the teacher server "
                "(protocol: genalign.teachers.remote)."
            )
        HTTPSettings("remote", options.timeout_s, options.total_timeout_s, options.retries,
                     options.backoff_s, options.max_response_mb)  # fmt: skip

    def supplies(self) -> frozenset[str]:
        """The teacher signals this teacher computes (the contrast pass needs ``contrast_context``)."""
        names = SUPPLIED[self.source]
        names = names if self.contrast_context is not None else names - {"teacher_contrast_logp"}
        if self.source != "remote":
            names |= DISTRIBUTION_SUPPLIED
            names |= {"teacher_anchor_logp"} if self.distribution.anchor is not None else frozenset()
            names |= {"teacher_extrapolation"} if self.distribution.extrapolates else frozenset()
        return names

    def kinds(self) -> frozenset[str]:
        """What the policy family must host for it (:attr:`genalign.policies.base.PolicyCapabilities.teachers`)."""
        kinds = {self.source}
        if self.context is not None or self.contrast_context is not None:
            kinds.add("context")
        if self.distribution.extrapolates:
            kinds.add("distribution")
        if self.distribution.anchor == "reference":
            kinds.add("reference")
        return frozenset(kinds)


#: the fields each source takes (for the error naming a stray one)
_OWNERS = {
    "model": {"model", "family", "tokenizer", "dtype", "context", "contrast_context"},
    "self": {"weights", "context", "contrast_context"},
    "remote": {"remote.url"},
}

__all__ = ["DISTRIBUTION_SUPPLIED", "SUPPLIED", "RemoteTeacherOptions", "TeacherConfig", "TeacherSource"]
