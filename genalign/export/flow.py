"""Export of flow-matching policies: a diffusers LoRA file, or a full diffusers pipeline folder.

* LoRA kept (default): ``pytorch_lora_weights.safetensors`` with the adapter's peft config in its header, written by
  :meth:`genalign.policies.flow.model.FlowModel.save`, so ``pipe.load_lora_weights(folder)`` on the base pipeline
  rebuilds the trained scale ``alpha / rank``;
* LoRA merged (``merge_lora``) or every weight trained (``policy.lora.rank = 0``): the whole pipeline (transformer with
  the adapters fused into its weights, scheduler, VAE, text encoders, tokenizers) through ``pipe.save_pretrained``,
  loadable with ``DiffusionPipeline.from_pretrained(folder)``.

Both get a short model card (``README.md``) with the loading code.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from genalign.assets import model_location
from genalign.pipelines.flow import _absent_components
from genalign.policies.flow import FlowPolicy

MODEL_CARD_FILE = "README.md"


def write_flow(policy: FlowPolicy, out: Path, *, merge_lora: bool, dtype: torch.dtype | None) -> str:
    """Write ``policy``'s weights into the empty folder ``out``; ``dtype`` casts every written weight (None keeps
    them: the pipeline in ``policy.dtype``, LoRA weights as trained, float32). Returns what was written, in words."""
    model, config = policy.model, policy.config
    pipe = model.sampler.pipe
    base = model_location(config.model, marker="model_index.json")
    if config.lora.rank > 0 and not merge_lora:
        if dtype is not None:
            model.transformer.to(dtype)
        model.save(out)
        _write_card(out, base, config.model, lora=True, absent=_absent_components(Path(base)),
                    pipeline_loads_lora=model.arch.lora_loader is None)  # fmt: skip
        return f"diffusers LoRA file (rank {config.lora.rank}) for {base}"
    if config.lora.rank > 0:
        model.transformer.fuse_lora()  # W + scale * B @ A in the weights' dtype (float32 when merging)
        model.transformer.unload_lora()
    if dtype is not None:
        for component in pipe.components.values():
            if isinstance(component, torch.nn.Module):
                component.to(dtype)
        if dtype == torch.float16:  # fp16 VAEs overflow (as in training); diffusers loads the saved dtype back
            pipe.vae.to(torch.float32)
    pipe.save_pretrained(str(out))
    _write_card(out, base, config.model, lora=False, absent=_absent_components(out))
    merged = ", LoRA merged" if config.lora.rank > 0 else ""
    return f"diffusers pipeline ({type(pipe).__name__}{merged})"


def _write_card(
    out: Path, base: str, base_name: str, *, lora: bool, absent: dict[str, None], pipeline_loads_lora: bool = True
) -> None:
    """The README of an exported folder; ``absent``: components saved as ``[null, null]`` (e.g. SD3 without its T5
    encoder), which diffusers loads only when they are passed as None; ``pipeline_loads_lora``: False for a pipeline
    class without ``load_lora_weights`` (HunyuanVideo 1.5), whose transformer loads the file itself."""
    none_kwargs = "".join(f", {name}=None" for name in absent)
    if lora:
        weights = "LoRA weights of the transformer in diffusers' format: `pytorch_lora_weights.safetensors`"
        into = (
            "load_lora_weights(folder)"
            if pipeline_loads_lora
            else 'transformer.load_lora_adapter(folder, prefix="transformer")'
        )
        load = f'pipe = DiffusionPipeline.from_pretrained("{base}"{none_kwargs})\npipe.{into}'
        if (out / "transformer_2").is_dir():  # Wan2.2 A14B: the low-noise expert's adapter (FlowModel.save)
            weights += " (the second expert's in `transformer_2/`)"
            load += '\npipe.load_lora_weights(f"{folder}/transformer_2", load_into_transformer_2=True)'
    else:
        weights = "the whole diffusers pipeline (transformer weights trained by genalign)"
        load = f"pipe = DiffusionPipeline.from_pretrained(folder{none_kwargs})"
    lines = [
        "---",
        f"base_model: {json.dumps(base_name)}",
        "library_name: diffusers",
        f"tags: [genalign, flow{', lora' if lora else ''}]",
        "---",
        "",
        "# A flow-matching policy trained with genalign",
        "",
        f"- Base pipeline: `{base_name}` (loaded from `{base}`)",
        f"- Weights: {weights}",
        "",
        "## Loading without genalign",
        "",
        "```python",
        "from diffusers import DiffusionPipeline",
        "",
        'folder = "path/to/this/folder"',
        load,
        "```",
        "",
    ]
    (out / MODEL_CARD_FILE).write_text("\n".join(lines))
