"""Tiny random models of every VLM architecture, built once per machine into the temporary folder.

:func:`tiny_model_dir` returns the folder of ``model_type``'s tiny model
(:func:`genalign.policies.vlm.architectures.build_tiny_model`), building it on first use. The folder's name holds
a fingerprint of the transformers version and the builders' source, so a changed builder or library gets a fresh
model; concurrent test processes build into private folders and the first rename wins.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import uuid
from importlib.metadata import version
from pathlib import Path

ARCHITECTURES_DIR = Path(__file__).resolve().parents[3] / "genalign" / "policies" / "vlm" / "architectures"


def fingerprint() -> str:
    """12 hex digits of the transformers version and the source of the architecture modules."""
    digest = hashlib.sha256(version("transformers").encode())
    for path in sorted(ARCHITECTURES_DIR.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def tiny_model_dir(model_type: str) -> str:
    """The folder of the tiny ``model_type`` model (built on first use)."""
    root = Path(tempfile.gettempdir()) / f"genalign-tiny-vlm-{os.getuid()}"
    folder = root / f"{model_type}-{fingerprint()}"
    if not (folder / "config.json").is_file():
        from genalign.policies.vlm.architectures import build_tiny_model

        private = root / f".{model_type}-{uuid.uuid4().hex}"
        build_tiny_model(model_type, private)
        try:
            private.rename(folder)
        except OSError:  # another process built it first
            shutil.rmtree(private, ignore_errors=True)
    return str(folder)
