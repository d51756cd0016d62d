"""Loading a tokenizer (or a VLM's processor) folder as it was saved, so that token ids and class round-trip.

transformers 5 may pick a tokenizer class from the model's ``model_type`` rather than from the folder: for Qwen2,
Phi-3 and a few others ``AutoTokenizer`` always builds the model-specific class, and any model-specific class rebuilds
the pre-tokenizer and decoder from its own code, taking only the vocabulary from ``tokenizer.json``. A GPT-2 BPE
folder next to a Qwen2 model then becomes a ``Qwen2Tokenizer`` (different splits, so different ids), and a word-level
``tokenizer.json`` of a small demo model breaks. :func:`load_tokenizer` therefore reads ``tokenizer_config.json``:

1. a generic class (``TokenizersBackend`` / ``PreTrainedTokenizerFast``) loads ``tokenizer.json`` as it is;
2. another declared transformers class is loaded as that class, and kept when its pipeline (normaliser,
   pre-tokenizer, model type, decoder) is the one in ``tokenizer.json`` (or when the folder has no ``tokenizer.json``);
3. everything else (no declaration, remote code through ``auto_map``, a declared class that does not reproduce the
   file, a hub name) goes through ``AutoTokenizer`` as before.

Saving writes the loaded class back (``save_pretrained``), so a saved checkpoint declares what it was loaded with. A
VLM's processor loads through ``AutoProcessor``, with its tokenizer replaced by :func:`load_tokenizer`'s when the two
differ in class.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from genalign.errors import UserPathError

GENERIC_TOKENIZER_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")
#: The parts of ``tokenizer.json`` that a tokenizer class may rebuild from its own code.
PIPELINE_PARTS = ("normalizer", "pre_tokenizer", "decoder")


def load_tokenizer(path: str, *, trust_remote_code: bool = False):
    """The tokenizer saved in ``path`` (a local folder or a hub name), of the class the folder declares when that class
    reproduces the folder's ``tokenizer.json`` (module docstring); ``trust_remote_code`` runs the folder's own
    tokenizer code (local folders of remote-code checkpoints only)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    folder = Path(path)
    settings = _tokenizer_settings(folder)
    declared = settings.get("tokenizer_class")
    tokenizer_file = folder / "tokenizer.json"
    if declared in GENERIC_TOKENIZER_CLASSES and tokenizer_file.is_file():
        return PreTrainedTokenizerFast.from_pretrained(path)
    declared_class = _transformers_class(declared) if declared and "auto_map" not in settings else None
    if declared_class is not None:
        tokenizer = declared_class.from_pretrained(path)
        if not tokenizer_file.is_file() or reproduces_tokenizer_file(tokenizer, tokenizer_file):
            return tokenizer
    return AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)


def reproduces_tokenizer_file(tokenizer, tokenizer_file: Path) -> bool:
    """Whether ``tokenizer`` runs the normaliser, pre-tokenizer, model type and decoder of ``tokenizer_file``."""
    from transformers import PreTrainedTokenizerFast

    if not isinstance(tokenizer, PreTrainedTokenizerFast):
        return False
    loaded, saved = json.loads(tokenizer.backend_tokenizer.to_str()), json.loads(tokenizer_file.read_text())
    same_parts = all(loaded.get(part) == saved.get(part) for part in PIPELINE_PARTS)
    return same_parts and loaded["model"].get("type") == saved["model"].get("type")


def _tokenizer_settings(folder: Path) -> dict[str, Any]:
    path = folder / "tokenizer_config.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _transformers_class(name: str):
    """The transformers tokenizer class called ``name`` (``XxxFast`` names of older folders too), or None."""
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    found = tokenizer_class_from_name(name)
    if found is None and name.endswith("Fast"):
        found = tokenizer_class_from_name(name.removesuffix("Fast"))
    return found


def load_processor(path: str):
    """The processor (tokenizer and image processor) saved in ``path``, its tokenizer as :func:`load_tokenizer`
    loads it."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(path)
    if not hasattr(processor, "image_processor"):  # AutoProcessor falls back to the tokenizer of a text-only model
        raise UserPathError(
            f"{path}: holds a {type(processor).__name__} but no image processor, so it is not a vision-language "
            "model's folder; for policy.family=vlm give a VLM folder as policy.model (or policy.processor), or use "
            "policy.family=causal_lm for a text model."
        )
    tokenizer = load_tokenizer(path) if (Path(path) / "tokenizer_config.json").is_file() else None
    if tokenizer is not None and type(tokenizer) is not type(processor.tokenizer):
        processor = AutoProcessor.from_pretrained(path, tokenizer=tokenizer)
    return processor
