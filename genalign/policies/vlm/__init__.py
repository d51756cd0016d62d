"""Vision-language policy: Hugging Face image-text-to-text models with image and video prompts.

Architectures (:mod:`genalign.policies.vlm.architectures`, chosen by the model config's ``model_type``; any other is
refused with the supported list): Qwen2-VL, Qwen2.5-VL and Qwen3-VL (images and native video), Gemma 3, Idefics3 /
SmolVLM and LLaVA-OneVision (images). Each architecture declares which processor outputs carry a sample's images and
videos, how they are split per sample and joined per micro-batch, the token types the model reads, the placeholder
tokens never sampled and how positions are given; the policy reads only that declaration.

The VLM path is the causal-LM path plus images carried correctly through generation, scoring and micro-batching:
plain group-relative training with verifiable rewards in the style of R1-V, VLM-R1 and EasyR1 (none of them has an
abstract in shared/seeds/abstracts.md):

1. **Prompts.** Each row's ``prompt`` (a string or a list of chat messages) becomes a chat with image and video
   blocks. The images come from the row's image column (one image or a list; paths, PIL images or ``{"bytes",
   "path"}`` dicts, see :mod:`genalign.data.images`) and are resized to ``[min_pixels, max_pixels]``; the videos from
   its video column (``policy.video_column``: a file path, a list of frames, an array ``[F, H, W, 3]``, or
   ``{"frames", "fps"}``; decoded, sampled to ``policy.video_fps`` with at most ``policy.max_frames`` frames and
   resized, :mod:`genalign.policies.vlm.video`), for architectures with native video only. A string prompt may mark
   where images and videos go with ``<image>`` / ``<video>``; without markers all images, then all videos, come
   first. Chat prompts mark them with ``{"type": "image"}`` / ``{"type": "video"}`` blocks. The number of markers must
   equal the number of images (videos), else a ``ValueError`` names the row.
2. **Processor outputs per sample.** The processor runs once on the batch of distinct prompts (videos through its
   video path with the sampled frames' indices and rate: Qwen3-VL writes their timestamps into the prompt); its
   outputs are then cut per row: the prompt tokens, the token types (``mm_token_type_ids``: 0 text, 1 image, 2 video)
   and the architecture's image and video tensors (Qwen-VL: ``pixel_values`` split with ``image_grid_thw``, image
   ``j`` owning ``t_j * h_j * w_j`` rows, and ``pixel_values_videos`` with ``video_grid_thw``). Each group member gets
   its row's tensors, and the ragged tensors are stored per sample as lists in ``Rollout.per_sample``, so
   ``Rollout.select`` (micro-batches, filtering, group repetition) always keeps each sample's own patches; a batch
   joins them back in sample order (the architecture's ``concat``).
3. **Fixed prompt width.** Prompts are left-padded to the longest prompt of the whole rollout and completions
   right-padded to ``T``; a micro-batch therefore feeds each sample the very same token grid as the whole batch, so
   its log-probs do not depend on how the batch is split (contract 2 of ``shared/ARCHITECTURE.md``).
4. **Scoring** runs the backbone once on ``prompt + completion`` with every processor output (and the token types
   under the architecture's name, ``token_type_ids`` for Gemma 3's bidirectional image attention; positions from the
   attention mask where the model does not derive them itself), then the output head on the hidden states of the
   real completion tokens only, in chunks, at the sampling temperature
   (:func:`genalign.policies.lm.logprobs.token_scores_from_hidden`, shared with the causal-LM adapter), with the
   same token features (entropy, vocabulary terms, top-k log-probs, hidden states) on request.
5. **Generation** goes through the causal-LM rollout engine (:class:`genalign.policies.lm.engines.hf.HFGenerateEngine`); the
   batch's image inputs are bound to ``generate`` by a thin wrapper, so behaviour log-probs, end tokens and stop
   strings are handled exactly as for text models. The wrapper also forbids the architecture's placeholder tokens
   (``<|image_pad|>``, ``<|vision_start|>``, ``<start_of_image>``, Idefics3's tile tags ...): a sampled one would be
   taken for an image slot when the completion is re-scored. Scoring masks the same tokens (:func:`suppressed_head`),
   so re-scored log-probs are those of the law that was sampled.

6. **Multi-turn** (``policy.multi_turn``, :mod:`genalign.policies.vlm.multi_turn`; Qwen-VL only): the shared turn
   loop of the token families with environments; image observations (e.g. the ``crop_image`` tool's crops) are
   encoded by the processor as a suffix of the conversation, and every later turn and the scoring pass get all the
   trajectory's images, with their image tokens typed for the 3-D rotary positions; environment tokens are attended
   context, never actions.

The rollout adds columns to each row, for rewards: ``image_sizes`` (``(width, height)`` of each image as stored) and
``image_input_sizes`` (``(width, height)`` the model saw, from the architecture), and for a row with a video
``video_frames`` (the sampled frames as stored, ``[F, H, W, 3]`` uint8; a list for several videos) and ``video_fps``
(their rate). Its structure carries the truncation flags and, when asked, segment ids, as for causal LMs.

Modules: :mod:`~genalign.policies.vlm.config` (the config and its capabilities),
:mod:`~genalign.policies.vlm.architectures` (one module per architecture, and the tiny test models),
:mod:`~genalign.policies.vlm.video` (video decoding and frame sampling), :mod:`~genalign.policies.vlm.inputs`
(chat messages, processor outputs, padding, image splitting), :mod:`~genalign.policies.vlm.model` (loading, vision
tower, LoRA scope, suppressed tokens, the image-bound generation wrapper), :mod:`~genalign.policies.vlm.multi_turn`
(the family's side of multi-turn rollouts), :mod:`~genalign.policies.vlm.policy` (the policy). Reference, checkpoints and resumable state come from the token-LM core (:mod:`genalign.policies.lm.core`).
"""

from genalign.policies.vlm.config import CONFIG_CLASS, LoraScope, VLMPolicyConfig

#: names served from the modules that import transformers, on first use (reading the family's config never does)
_LAZY = {
    **dict.fromkeys(
        ("IMAGE_MARKER", "EncodedPrompt", "chat_messages", "concat_images", "encode_prompts", "left_pad", "right_pad",
         "split_images"),
        "genalign.policies.vlm.inputs",
    ),
    **dict.fromkeys(
        ("SUPPRESSED_LOGIT", "VISION_TOKEN_ATTRIBUTES", "ImageBoundModel", "lora_module_names", "suppressed_head",
         "vision_token_ids", "vision_tower"),
        "genalign.policies.vlm.model",
    ),
    "VLMPolicy": "genalign.policies.vlm.policy",
}  # fmt: skip


def build_policy(config: VLMPolicyConfig, device="cpu"):
    """:func:`genalign.policies.vlm.policy.build_policy` (imported on first use)."""
    from genalign.policies.vlm.policy import build_policy as build

    return build(config, device)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'genalign.policies.vlm' has no attribute {name!r}")


__all__ = [
    "CONFIG_CLASS",
    "IMAGE_MARKER",
    "SUPPRESSED_LOGIT",
    "VISION_TOKEN_ATTRIBUTES",
    "EncodedPrompt",
    "ImageBoundModel",
    "LoraScope",
    "VLMPolicy",
    "VLMPolicyConfig",
    "build_policy",
    "chat_messages",
    "concat_images",
    "encode_prompts",
    "left_pad",
    "lora_module_names",
    "right_pad",
    "split_images",
    "suppressed_head",
    "vision_token_ids",
    "vision_tower",
]
