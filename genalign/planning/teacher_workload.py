"""What a configured teacher (``algorithm.teacher``, :mod:`genalign.teachers`) adds to a token family's workload.

* Weights: every teacher model the run loads, whole on every GPU (a teacher is never sharded): ``model``, each
  ``routing`` expert, a ``distribution.anchor`` folder; a ``self`` teacher with ``weights: base`` and a ``reference``
  anchor use the policy's reference (free with LoRA, a frozen copy otherwise, as a KL does).
* The teacher pass: one no-grad scoring pass of ``batch_size`` samples (``algorithm.teacher.batch_size``, default the
  micro-batch) through the teacher's backbone and the chunked head, traced like the reference pass; a ``context``
  lengthens the prompt by :data:`CONTEXT_TOKENS` (an assumption: the plan does not read the rows). With the
  full-distribution pass (:mod:`genalign.teachers.distribution`: a vocabulary KL read, or an extrapolation) the
  hidden states ``[b, C, H]`` of the student, the teacher (and the anchor) stay alive while
  :data:`DISTRIBUTION_CHUNK_BUFFERS` float32 ``[chunk, V]`` buffers per model are computed.

The pass runs between the rollout and the update, so the plan puts it in its own phase (``teacher``).
"""

from __future__ import annotations

import torch
from torch import nn

from genalign.planning.depth import cached_builds
from genalign.planning.meta_models import build_on_meta
from genalign.planning.model_specs import resolve_model_spec
from genalign.planning.workload import BatchShape, Workload

#: prompt tokens a teacher ``context`` is assumed to add
CONTEXT_TOKENS = 128
#: float32 ``[chunk, V]`` buffers per model alive at once in the full-distribution pass (logits, log-softmax,
#: probabilities, the log-ratio)
DISTRIBUTION_CHUNK_BUFFERS = 4
_VOCABULARY_SIGNALS = frozenset({"teacher_vocab_reverse_kl", "teacher_vocab_forward_kl"})
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def teacher_models(teacher) -> dict[str, str]:
    """The model folders a teacher config loads besides the policy, by the config key that names each."""
    models: dict[str, str] = {}
    if teacher.source == "model" and teacher.model:
        models["algorithm.teacher.model"] = teacher.model
    if teacher.source == "model":
        for key, model in teacher.routing.experts.items():
            models[f"algorithm.teacher.routing.experts[{key!r}]"] = model
    if teacher.distribution.anchor not in (None, "reference"):
        models["algorithm.teacher.distribution.anchor"] = teacher.distribution.anchor
    return models


def uses_policy_reference(teacher) -> bool:
    """The teacher (or its anchor) runs the policy's reference weights."""
    return (teacher.source == "self" and teacher.weights == "base") or teacher.distribution.anchor == "reference"


def add_teacher(
    workload: Workload, config, shape: BatchShape, *, prompt: int, completion: int, policy_spec, policy_build,
    score, reference_copy, trace,
) -> None:  # fmt: skip
    """Add ``config.algorithm.teacher``'s weights and pass to ``workload`` (module docstring).

    Args:
        prompt, completion: the token lengths of the update's micro-batch.
        policy_spec, policy_build: the policy's architecture and its (cached) meta builder.
        score: ``score(module, batch, prompt, completion) -> scalar``: the family's no-grad scoring pass.
        reference_copy: ``() -> module or None``: the policy's frozen reference copy (None: LoRA adapters disabled).
        trace: ``trace(spec, build, compute) -> TracedPeak``: ``compute(model)`` traced without backward.
    """
    teacher = config.algorithm.teacher
    if teacher is None or teacher.source == "remote":
        return
    dtype = _DTYPES[teacher.dtype or config.policy.dtype]
    builds = {}
    for key, folder in teacher_models(teacher).items():
        spec = resolve_model_spec(folder, field=key).components["model"]
        build = cached_builds(lambda variant: build_on_meta(variant, dtype).requires_grad_(False))
        workload.frozen[f"teacher {key.removeprefix('algorithm.teacher.')} ({folder})"] = build(spec)
        builds[key] = (spec, build)
    if uses_policy_reference(teacher) and workload.reference_copy is None:
        workload.reference_copy = reference_copy()
    batch = min(teacher.batch_size or config.algorithm.micro_batch_size, shape.samples)
    length = prompt + (CONTEXT_TOKENS if teacher.context is not None else 0)
    passes = list(builds.values()) or [(policy_spec, policy_build)]  # a self-teacher scores with the policy's model
    peak = max(trace(spec, build, lambda m: score(m, batch, length, completion)).peak for spec, build in passes)
    extra = 0
    needs = set(config.algorithm.needs())
    if needs & _VOCABULARY_SIGNALS or teacher.distribution.extrapolates:
        extra = _distribution_bytes(policy_build(policy_spec), batch, completion, teacher)
    workload.teacher_pass = peak + extra
    models = f"{len(builds)} teacher model(s)" if builds else "the policy's own weights"
    workload.assumptions.append(
        f"teacher pass: {batch} samples of {length} prompt + {completion} completion tokens through {models}"
        + (f", prompt + {CONTEXT_TOKENS} context tokens" if teacher.context is not None else "")
        + (f", full-distribution pass: {extra / 1e9:.3f} GB of hidden states and [chunk, V] buffers" if extra else "")
    )


def _distribution_bytes(model: nn.Module, batch: int, completion: int, teacher) -> int:
    """Hidden states ``[b, C, H]`` of every model of the full-distribution pass and their ``[chunk, V]`` buffers."""
    text = model.config.get_text_config()
    models = 3 if teacher.distribution.anchor is not None else 2
    itemsize = next(model.parameters()).element_size()
    hidden = models * batch * completion * text.hidden_size * itemsize
    chunks = models * DISTRIBUTION_CHUNK_BUFFERS * teacher.distribution.chunk_size * text.vocab_size * 4
    return hidden + chunks


__all__ = ["CONTEXT_TOKENS", "DISTRIBUTION_CHUNK_BUFFERS", "add_teacher", "teacher_models", "uses_policy_reference"]
