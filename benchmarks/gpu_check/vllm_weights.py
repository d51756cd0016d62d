"""Part b: a vLLM rollout, a weight update pushed to vLLM, and a second rollout that shows the new weights.

The check itself belongs to the vLLM engine: ``genalign.policies.lm.engines.vllm.check.weight_update_roundtrip(model_dir,
device) -> dict`` (figure name -> value, with ``"new_weights_seen"`` true when the second rollout's log-probs follow
the pushed weights). vLLM runs as a server in its own environment (docs/vllm.md), whose Python is named by
``GENALIGN_VLLM_PYTHON``; without it the part reports "skipped" and points to docs/vllm.md (not a failure).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from benchmarks.gpu_check.common import PartResult, gpu_available

TITLE = "vLLM rollout -> weight update -> rollout"
VLLM_PYTHON_ENV = "GENALIGN_VLLM_PYTHON"
NOT_INSTALLED = (
    "skipped: GENALIGN_VLLM_PYTHON does not name the Python of a vLLM environment — see docs/vllm.md "
    "(vLLM runs as a server in its own environment)"
)


def vllm_weight_update(device: str, *, smoke: bool, workdir: Path) -> PartResult:
    """Part b on ``device`` (vLLM is CUDA-only): call the vLLM engine's round-trip check on the arithmetic demo LM."""
    start = time.perf_counter()
    if not os.environ.get(VLLM_PYTHON_ENV):
        return PartResult("b", TITLE, "skipped", notes=[NOT_INSTALLED])
    if not gpu_available(device):
        return PartResult("b", TITLE, "skipped", notes=[f"skipped: vLLM needs a CUDA GPU; device is {device!r}."])
    from genalign.assets import model_location
    from genalign.policies.lm.engines.vllm.check import weight_update_roundtrip as check

    figures = check(model_location("builtin:arith-lm"), device)
    seen = bool(figures.get("new_weights_seen"))
    return PartResult(
        "b",
        TITLE,
        "ok" if seen else "failed",
        header=["figure", "value"],
        rows=[[name, str(value)] for name, value in figures.items()],
        notes=[] if seen else ["the second rollout did not show the pushed weights"],
        seconds=time.perf_counter() - start,
    )
