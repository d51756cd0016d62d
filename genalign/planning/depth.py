"""Tracing a deep model through shallow copies of it: the same architecture with fewer blocks of each kind.

Running a full-depth model on the meta device costs about a millisecond per operator (meta kernels are Python), so a
57-block FLUX forward and backward takes seconds. Activation memory is linear in the number of blocks of each kind
(every block saves the same tensors), so :func:`traced_by_depth` traces a copy with one block of each kind and copies
with one more block of one kind, and extends the result to the real depth:

* ``kept(n) = kept(1) + sum_k (n_k - 1) x (kept(1 + e_k) - kept(1))``: exact for identical blocks;
* ``peak(n) = max(peaks of the traces, kept(n) + overhead)``, ``overhead`` the largest ``peak - kept`` of the
  traces: the working set on top of the saved activations (the recomputed block, gradients of one block's
  activations, the head's chunk) does not grow with depth.

Models with at most :data:`FULL_TRACE_BLOCKS` blocks, and architectures without a depth knob here, are traced whole.

Checked against full-depth traces (tests/planning/test_depth.py): exact with gradient checkpointing; without it the
backward of a transformers decoder keeps one more ``[batch, tokens, hidden]`` tensor per block from the third block on,
which the extension leaves out (3.7 % of the peak of a 12-layer Llama; about 3 % for the diffusion-LM presets, the only
deep models planned without checkpointing).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

from torch import nn

from genalign.planning.architectures import ComponentSpec
from genalign.planning.tracing import TracedPeak

#: Models with at most this many blocks are traced at full depth (fast enough, and exact).
FULL_TRACE_BLOCKS = 8


def _text_config(config: dict) -> dict:
    return config.get("text_config", config)


def _flow_architecture(spec: ComponentSpec):
    """The flow architecture whose transformer ``spec`` is (None for every other model)."""
    if spec.library != "diffusers":
        return None
    from genalign.pipelines.architectures import architecture_of_transformer

    return architecture_of_transformer(spec.class_name)


def block_counts(spec: ComponentSpec) -> dict[str, int] | None:
    """Blocks of each kind of ``spec`` (None when the planner has no depth knob for its class)."""
    config = spec.config
    if spec.library == "transformers" and "num_hidden_layers" in _text_config(config):
        return {"layers": _text_config(config)["num_hidden_layers"]}
    architecture = _flow_architecture(spec)
    return None if architecture is None else architecture.block_counts(config)


def with_block_counts(spec: ComponentSpec, counts: dict[str, int]) -> ComponentSpec:
    """``spec`` with ``counts`` blocks of each kind (per-layer lists such as ``layer_types`` cut to match)."""
    architecture = _flow_architecture(spec)
    if architecture is not None:
        return ComponentSpec(spec.library, spec.class_name, architecture.with_block_counts(spec.config, counts))
    config = copy.deepcopy(spec.config)
    if "layers" in counts:
        text = _text_config(config)
        old = text["num_hidden_layers"]
        text["num_hidden_layers"] = counts["layers"]
        for key, value in list(text.items()):
            if isinstance(value, list) and len(value) == old:
                text[key] = value[: counts["layers"]]
        if "max_window_layers" in text:
            text["max_window_layers"] = min(text["max_window_layers"], counts["layers"])
    return ComponentSpec(spec.library, spec.class_name, config)


def cached_builds(build: Callable[[ComponentSpec], nn.Module]) -> Callable[[ComponentSpec], nn.Module]:
    """``build`` that builds each architecture once (the traces of one workload share their shallow copies)."""
    built: dict[str, nn.Module] = {}

    def get(spec: ComponentSpec) -> nn.Module:
        key = json.dumps([spec.library, spec.class_name, spec.config], sort_keys=True, default=str)
        if key not in built:
            built[key] = build(spec)
        return built[key]

    return get


def traced_by_depth(
    spec: ComponentSpec, build: Callable[[ComponentSpec], nn.Module], trace: Callable[[nn.Module], TracedPeak]
) -> tuple[TracedPeak, str]:
    """``trace`` of the model ``build(spec)`` at full depth, through shallow copies when it is deep (module docstring).

    Returns:
        the traced peak and a note on how it was obtained (for the plan's assumptions).
    """
    counts = block_counts(spec)
    if counts is None or sum(counts.values()) <= FULL_TRACE_BLOCKS:
        return trace(build(spec)), "traced at full depth"
    present = {kind: n for kind, n in counts.items() if n > 0}
    base_counts = dict.fromkeys(present, 1)
    base = trace(build(with_block_counts(spec, base_counts)))
    traces, kept = [base], base.kept
    for kind, n in present.items():
        more = trace(build(with_block_counts(spec, {**base_counts, kind: 2})))
        traces.append(more)
        kept += (n - 1) * (more.kept - base.kept)
    overhead = max(t.peak - t.kept for t in traces)
    peak = max(max(t.peak for t in traces), kept + overhead)
    shallow = ", ".join(f"{kind} {n}" for kind, n in present.items())
    return TracedPeak(peak=peak, kept=kept), f"traced with 1-2 blocks per kind, extended to {shallow}"


__all__ = ["FULL_TRACE_BLOCKS", "block_counts", "cached_builds", "traced_by_depth", "with_block_counts"]
