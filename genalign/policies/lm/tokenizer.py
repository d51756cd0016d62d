"""Loading a tokenizer folder as it was saved.

transformers 5 picks the tokenizer class from the model's ``model_type`` for some architectures (Qwen2, Llama, ...) even
when ``tokenizer_config.json`` names the generic ``TokenizersBackend`` / ``PreTrainedTokenizerFast``; the model-specific
class then rebuilds the pre-tokenizer and decoder (byte-level), which breaks a custom ``tokenizer.json`` such as the
word-level vocabularies of small demo and test models. A folder that declares a generic class is therefore loaded with
that class; every other folder goes through ``AutoTokenizer`` unchanged. A VLM's processor (tokenizer plus image
processor) loads through ``AutoProcessor``.
"""

from __future__ import annotations

import json
from pathlib import Path

GENERIC_TOKENIZER_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")


def load_tokenizer(path: str, *, trust_remote_code: bool = False):
    """The tokenizer saved in ``path`` (a local folder or a hub name); ``trust_remote_code`` runs the folder's own
    tokenizer code (local folders of remote-code checkpoints only)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config_file = Path(path) / "tokenizer_config.json"
    if config_file.is_file() and (Path(path) / "tokenizer.json").is_file():
        declared = json.loads(config_file.read_text()).get("tokenizer_class")
        if declared in GENERIC_TOKENIZER_CLASSES:
            return PreTrainedTokenizerFast.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)


def load_processor(path: str):
    """The processor (tokenizer and image processor) saved in ``path``."""
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(path)
