"""A reward for the adapter contract test that scores any output (text, image, video) deterministically and can kill
its own process with SIGKILL at a given call (``GENALIGN_TEST_KILL_AT_CALL``): a real crash at a known point."""

from __future__ import annotations

import os
import signal
import zlib

import numpy as np

from genalign.rewards import register_reward

_CALLS = {"n": 0}


def output_score(output) -> float:
    """Text: a hash of the string in [0, 1); images / videos: the mean pixel value in [0, 1]."""
    if isinstance(output, str):
        return (zlib.crc32(output.encode()) % 1000) / 1000.0
    return float(np.asarray(output, dtype=np.float32).mean() / 255.0)


@register_reward("contract_reward")
def contract_reward(prompts, completions, **unused_columns):
    _CALLS["n"] += 1
    if _CALLS["n"] == int(os.environ.get("GENALIGN_TEST_KILL_AT_CALL", "0")):
        os.kill(os.getpid(), signal.SIGKILL)
    return [output_score(c) for c in completions]
