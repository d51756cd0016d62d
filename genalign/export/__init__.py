"""``genalign export``: a trained checkpoint as a standard folder that loads without genalign.

* token families (causal_lm, vlm, diffusion_lm): a transformers model folder (``save_pretrained``; LoRA merged with
  ``--merge-lora``) or a peft adapter folder (``PeftModel.from_pretrained(base, folder)``), with the tokenizer or
  processor, the generation config genalign samples with and a model card (:mod:`genalign.export.token_lm`);
* flow: a diffusers LoRA file (``pipe.load_lora_weights(folder)``) or, merged or fully fine-tuned, a diffusers pipeline
  folder (``DiffusionPipeline.from_pretrained(folder)``) (:mod:`genalign.export.flow`).

The command and the atomic write: :mod:`genalign.export.command`.
"""

from genalign.export.command import (
    DTYPE_CHOICES,
    ExportError,
    ExportResult,
    add_export_arguments,
    export,
    run_export,
)

__all__ = ["DTYPE_CHOICES", "ExportError", "ExportResult", "add_export_arguments", "export", "run_export"]
