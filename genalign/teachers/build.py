"""Build the configured teacher for a policy: :func:`build_teacher`."""

from __future__ import annotations

from dataclasses import replace

from genalign.policies.base import Policy, TeacherHost
from genalign.teachers.base import Teacher
from genalign.teachers.config import TeacherConfig
from genalign.teachers.local import LocalTeacher, WeightsRunner
from genalign.teachers.remote import RemoteTeacher
from genalign.teachers.routed import RoutedTeacher
from genalign.teachers.routing_options import RoutingOptions
from genalign.teachers.vocabulary import check_same_vocabulary


def build_teacher(config: TeacherConfig, policy: Policy, *, batch_size: int) -> Teacher:
    """The teacher ``config`` describes, hosted by ``policy``'s family (config load has checked that it hosts that
    kind). A ``model`` teacher is loaded now, and its tokenizer checked against the policy's
    (:func:`~genalign.teachers.vocabulary.check_same_vocabulary`: a mismatch raises before the run starts)."""
    host = policy.teacher_host()
    size = config.batch_size or batch_size
    if config.source == "remote":
        return RemoteTeacher(config, host, size)
    if config.routing.enabled:
        return _routed(config, policy, size)
    anchor = _anchor(config, host)
    if config.source == "self":
        run = host.under_reference if config.weights == "base" else host.under_current_weights
        return LocalTeacher(config, host, size, run, shares_policy_modules=True, anchor=anchor)
    peer = host.load_peer(config.model, tokenizer=config.tokenizer, dtype=config.dtype, field="algorithm.teacher.model")
    check_same_vocabulary(host.vocabulary(), peer, field=f"algorithm.teacher.model = {config.model!r}")
    return LocalTeacher(config, host, size, lambda fn: fn(peer.module), shares_policy_modules=False, anchor=anchor)


def _routed(config: TeacherConfig, policy: Policy, size: int) -> RoutedTeacher:
    """One model teacher per expert of ``routing`` (and the default ``model``), built from the same settings."""
    alone = replace(config, routing=RoutingOptions())
    experts = {
        key: build_teacher(replace(alone, model=model), policy, batch_size=size)
        for key, model in config.routing.experts.items()
    }
    default = build_teacher(alone, policy, batch_size=size) if config.model else None
    return RoutedTeacher(config, policy.teacher_host(), size, experts, default)


def _anchor(config: TeacherConfig, host: TeacherHost) -> WeightsRunner | None:
    """The runner of ``distribution.anchor``: the policy's reference weights, or a model loaded (and its tokenizer
    checked) like a teacher model; None without one."""
    where = config.distribution.anchor
    if where is None:
        return None
    if where == "reference":
        return host.under_reference
    field = "algorithm.teacher.distribution.anchor"
    peer = host.load_peer(where, tokenizer=None, dtype=config.dtype, field=field)
    check_same_vocabulary(host.vocabulary(), peer, field=f"{field} = {where!r}")
    return lambda fn: fn(peer.module)


__all__ = ["build_teacher"]
