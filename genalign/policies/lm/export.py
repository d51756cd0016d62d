"""What a token-LM checkpoint folder carries besides weights and tokenizer, so that it is usable without genalign.

* ``generation_config.json``: the model's generation config with the end tokens, pad token and completion length
  genalign samples with (:func:`sampling_generation_config`), so ``model.generate`` stops where the policy's rollouts
  stop;
* ``README.md``: a short model card (:func:`model_card`): base model, family, LoRA or full weights, and the lines that
  load the folder with transformers / peft.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genalign.policies.lm.lora import ADAPTER_FILE
from genalign.policies.lora import LoRAConfig

MODEL_CARD_FILE = "README.md"


@dataclass(frozen=True)
class CheckpointFacts:
    """What the model card of a token family's checkpoint says.

    Attributes:
        family: the policy family (``causal_lm``, ``vlm``, ``diffusion_lm``).
        base_model: ``policy.model`` as configured (a folder, a hub name or ``builtin:<name>``).
        base_path: where the base weights were loaded from (what ``from_pretrained`` takes).
        auto_class: the transformers auto class that loads the model, e.g. ``AutoModelForCausalLM``.
        lora: the LoRA options (``rank == 0``: the folder holds all weights).
        processor: the folder holds a processor (``AutoProcessor``) rather than a tokenizer alone.
        trust_remote_code: the model class is the checkpoint's own code.
    """

    family: str
    base_model: str
    base_path: str
    auto_class: str
    lora: LoRAConfig
    processor: bool = False
    trust_remote_code: bool = False


def sampling_generation_config(
    generation_config: Any,
    *,
    eos_token_ids: tuple[int, ...],
    pad_token_id: int,
    max_new_tokens: int,
    suppress_tokens: tuple[int, ...] = (),
) -> Any:
    """A copy of the model's ``GenerationConfig`` (a default one when it has none) with genalign's end tokens, pad
    token, completion length and never-sampled tokens; the model's own config is left unchanged."""
    from transformers import GenerationConfig

    config = copy.deepcopy(generation_config) if generation_config is not None else GenerationConfig()
    config.eos_token_id = list(eos_token_ids) if len(eos_token_ids) > 1 else eos_token_ids[0]
    config.pad_token_id = pad_token_id
    config.max_new_tokens = max_new_tokens
    config._from_model_config = False  # explicit settings: generate() must not rebuild them from the model config
    if suppress_tokens:
        config.suppress_tokens = list(suppress_tokens)
    return config


def declared_tokenizer_class(directory: Path) -> str | None:
    """The ``tokenizer_class`` named in ``directory/tokenizer_config.json``, if any."""
    path = Path(directory) / "tokenizer_config.json"
    return json.loads(path.read_text()).get("tokenizer_class") if path.is_file() else None


def model_card(facts: CheckpointFacts, *, tokenizer_class: str | None, generation_config: bool) -> str:
    """The README of a saved checkpoint folder (YAML front matter for the hub, then facts and loading code)."""
    lora = facts.lora
    library = "peft" if lora.rank > 0 else "transformers"
    remote = ", trust_remote_code=True" if facts.trust_remote_code else ""
    if facts.processor:
        preprocess = "processor = AutoProcessor.from_pretrained(folder)"
        imports = f"from transformers import {facts.auto_class}, AutoProcessor"
    else:
        tokenizer_class = tokenizer_class or "AutoTokenizer"
        generic = tokenizer_class in ("TokenizersBackend", "PreTrainedTokenizerFast")
        tokenizer_class = "PreTrainedTokenizerFast" if generic else tokenizer_class
        preprocess = f"tokenizer = {tokenizer_class}.from_pretrained(folder)"
        imports = f"from transformers import {facts.auto_class}, {tokenizer_class}"
    if lora.rank > 0:
        options = [f"rank {lora.rank}", f"alpha {lora.alpha:g}", f"targets {lora.target_modules}"]
        options += ["DoRA"] * lora.use_dora + ["rsLoRA"] * lora.use_rslora
        options += [f"init {lora.init_lora_weights}"] if lora.init_lora_weights is not True else []
        options += [f"bias {lora.bias}"] if lora.bias != "none" else []
        options += [f"full modules {lora.modules_to_save}"] if lora.modules_to_save else []
        weights = f"LoRA adapters in peft's format ({', '.join(options)}): `adapter_config.json`, `{ADAPTER_FILE}`"
        load = (
            f'base = {facts.auto_class}.from_pretrained("{facts.base_path}"{remote})\n'
            "model = PeftModel.from_pretrained(base, folder)  # model.merge_and_unload() gives plain weights"
        )
        imports = "from peft import PeftModel\n" + imports
    else:
        weights = "all weights: `model.safetensors` and `config.json`"
        load = f"model = {facts.auto_class}.from_pretrained(folder{remote})"
    generation = (
        "`generation_config.json` holds the end tokens, pad token and completion length the policy sampled with, so "
        "`model.generate(...)` stops where genalign's rollouts stop (sampling settings such as the temperature are "
        "the base model's; pass them to `generate`)."
        if generation_config
        else "Sampling is genalign's own (no transformers `generate` settings are saved)."
    )
    return "\n".join(
        [
            "---",
            f"base_model: {json.dumps(facts.base_model)}",
            f"library_name: {library}",
            f"tags: [genalign, {facts.family}{', lora' if lora.rank > 0 else ''}]",
            "---",
            "",
            f"# A {facts.family} policy trained with genalign",
            "",
            f"- Base model: `{facts.base_model}` (loaded from `{facts.base_path}`)",
            f"- Family: `{facts.family}`, loaded with transformers' `{facts.auto_class}`",
            f"- Weights: {weights}",
            f"- {'Processor' if facts.processor else 'Tokenizer'}: saved as it was loaded"
            + (f" (`{tokenizer_class}`)" if not facts.processor else ""),
            f"- {generation}",
            "",
            "## Loading without genalign",
            "",
            "```python",
            imports,
            "",
            'folder = "path/to/this/folder"',
            load,
            preprocess,
            "```",
            "",
        ]
    )


def write_checkpoint_extras(directory: Path, facts: CheckpointFacts, generation_config: Any | None) -> None:
    """Write ``generation_config.json`` (when given) and the model card into the saved ``directory``."""
    directory = Path(directory)
    if generation_config is not None:
        generation_config.save_pretrained(str(directory))
    card = model_card(
        facts, tokenizer_class=declared_tokenizer_class(directory), generation_config=generation_config is not None
    )
    (directory / MODEL_CARD_FILE).write_text(card)


__all__ = [
    "MODEL_CARD_FILE",
    "CheckpointFacts",
    "declared_tokenizer_class",
    "model_card",
    "sampling_generation_config",
    "write_checkpoint_extras",
]
