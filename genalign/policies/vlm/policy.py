"""The vision-language policy: rollout and scoring of image-text-to-text models (data path in :mod:`genalign.policies.vlm`).

The reference policy, the trainable parameters, checkpoints (LoRA adapters or all weights, with the processor) and the
sampler's random generator are the token-LM core's (:class:`~genalign.policies.lm.core.TokenLMPolicy`).
"""

from __future__ import annotations

import inspect
from collections import deque
from dataclasses import replace
from typing import Any, Literal

import torch
from torch import Tensor, nn

from genalign.assets import model_location
from genalign.policies.base import PeerModel, Rollout, RolloutRequest, ScoreOutput, ScoreRequest
from genalign.policies.lm.chat_turns import ChatRenderer
from genalign.policies.lm.core import (
    TokenLMPolicy,
    completion_structure,
    end_and_pad_token_ids,
    eval_mode,
    lora_reference_mode,
    peer_model,
    sampling_params,
)
from genalign.policies.lm.engines.base import Generation, SamplingParams
from genalign.policies.lm.engines.hf import HFGenerateEngine
from genalign.policies.lm.export import CheckpointFacts, sampling_generation_config
from genalign.policies.lm.logprobs import (
    backbone_hidden_states,
    backbone_output,
    position_ids_from_mask,
    token_scores_from_hidden,
)
from genalign.policies.lm.lora import add_lora
from genalign.policies.lm.multi_turn import multi_turn_rollout
from genalign.policies.lm.probes import block_ids, judge_tokens
from genalign.policies.lm.reference import ReferencePolicy, get_base_model
from genalign.policies.lm.segments import SegmentBoundaries
from genalign.policies.lm.tokenizer import load_processor
from genalign.policies.vlm.architectures import SampleMedia, architecture_of
from genalign.policies.vlm.attention import modality_attention
from genalign.policies.vlm.config import VLMPolicyConfig
from genalign.policies.vlm.inputs import (
    EncodedPrompt,
    encode_prompts,
    left_pad,
    mm_token_types,
    right_pad,
)
from genalign.policies.vlm.model import (
    ImageBoundModel,
    load_model,
    lora_module_names,
    suppressed_head,
    vision_tower,
)
from genalign.policies.vlm.multi_turn import ImageTurns
from genalign.policies.vlm.perception import logp_frames_shuffled, logp_without_image, visual_similarity


def media_columns(encoded: EncodedPrompt) -> dict[str, Any]:
    """The columns a rollout adds to a row, for rewards: ``image_sizes`` / ``image_input_sizes`` (``(width, height)``
    of each image as stored / as the model saw it) and, for a row with videos, ``video_frames`` (the sampled frames
    as stored, ``[F, H, W, 3]`` uint8; a list of them for several videos) and ``video_fps`` (their rate)."""
    columns: dict[str, Any] = {"image_sizes": encoded.image_sizes, "image_input_sizes": encoded.image_input_sizes}
    frames, fps = [v.frames for v in encoded.videos], [v.fps for v in encoded.videos]
    if len(frames) == 1:
        columns |= {"video_frames": frames[0], "video_fps": fps[0]}
    elif frames:
        columns |= {"video_frames": frames, "video_fps": fps}
    return columns


class VLMPolicy(TokenLMPolicy):
    """Group-relative training adapter for image-text-to-text models; see :mod:`genalign.policies.vlm`.

    Build it with :func:`build_policy`. ``per_sample`` of its rollouts holds ``prompt_ids`` / ``prompt_mask`` /
    ``mm_token_type_ids`` ``[N, P]`` (left-padded to the rollout's longest prompt), ``completion_ids`` ``[N, T]`` and,
    as per-sample lists, the architecture's media keys (Qwen-VL: ``pixel_values`` ``[p_i, D]``, ``image_grid_thw``
    ``[k_i, 3]``, ``pixel_values_videos`` ``[q_i, D]``, ``video_grid_thw`` ``[v_i, 3]``;
    :mod:`genalign.policies.vlm.architectures`); the truncation flags (and segment ids) are in ``Rollout.structure``.
    Multi-turn rollouts add ``completion_mask`` / ``completion_attention`` ``[N, T]`` (model tokens; every token) and
    hold every image of the trajectory in the per-sample lists.
    """

    family = "vlm"

    def __init__(
        self, config: VLMPolicyConfig, model: nn.Module, processor, device: torch.device, model_path: str
    ) -> None:
        mode = lora_reference_mode(config.lora, config.reference)
        super().__init__(
            config,
            model,
            preprocessor=processor,
            device=device,
            reference=ReferencePolicy(mode, model, lambda: load_model(config, model_path, device)),
            generator=torch.Generator().manual_seed(config.seed),
        )
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.model_path = model_path
        self.architecture = architecture_of(self.hf_model.config)
        self.patch_size = getattr(processor.image_processor, "patch_size", None)
        self.image_factor = self.architecture.image_factor(processor)
        self.eos_token_ids, self.pad_token_id = end_and_pad_token_ids(
            self.tokenizer, self.hf_model.generation_config, model_name=config.model
        )
        self.suppressed_token_ids = self.architecture.placeholder_ids(self.hf_model.config, self.tokenizer)
        # transformers >= 5 computes Qwen2-VL's 3-D rotary positions from mm_token_type_ids; older versions reject it
        type_key = self.architecture.token_type_key
        self.needs_mm_token_type_ids = type_key in inspect.signature(self.hf_model.forward).parameters
        self.segments = SegmentBoundaries(self.tokenizer)
        model_config = self.hf_model.config
        self.image_token_id = getattr(model_config, "image_token_id", getattr(model_config, "image_token_index", None))
        self.video_token_id = getattr(model_config, "video_token_id", None)
        if config.multi_turn.enabled and not self.architecture.multi_turn:
            raise ValueError(
                f"policy.multi_turn is set but the {self.architecture.name} architecture of {config.model!r} does not "
                "support multi-turn rollouts (supported: Qwen2-VL, Qwen2.5-VL, Qwen3-VL); unset policy.multi_turn"
            )
        if config.multi_turn.enabled:  # turns rendered with the processor's template, which renders image blocks
            self.environments = config.multi_turn.environment_set()
            #: the role judge of each model turn (``turn_roles``), built once
            self.segment_judge = config.multi_turn.judge()
            self.chat_renderer = ChatRenderer(self.tokenizer, chat=processor)
            self.chat_renderer.check()
            #: the last failures of environment code (counted in rollout info), for inspection
            self.environment_failures: deque[str] = deque(maxlen=32)

    # --- rollout --------------------------------------------------------------------------------------------------

    def encode_prompts(self, rows: list[dict[str, Any]]) -> list[EncodedPrompt]:
        """Load each row's images, build its chat, run the processor on the whole batch and split it per row."""
        return encode_prompts(rows, self.processor, self.config, self.architecture)

    def sampling_params(self, mode: Literal["train", "eval"]) -> SamplingParams:
        return sampling_params(self.config, mode, eos_token_ids=self.eos_token_ids, pad_token_id=self.pad_token_id)

    def generation_config(self) -> Any:
        """End, pad tokens and length genalign samples with, and the vision placeholder tokens it never samples."""
        return sampling_generation_config(
            self.hf_model.generation_config,
            eos_token_ids=self.eos_token_ids,
            pad_token_id=self.pad_token_id,
            max_new_tokens=self.config.max_new_tokens,
            suppress_tokens=self.suppressed_token_ids,
        )

    def checkpoint_facts(self) -> CheckpointFacts:
        return CheckpointFacts(
            self.family,
            self.config.model,
            self.model_path,
            "AutoModelForImageTextToText",
            lora=self.config.lora,
            processor=True,
        )

    def generate_with_images(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        mm_types: Tensor,
        media: list[SampleMedia],
        params: SamplingParams,
    ) -> list[Generation]:
        """One ``generate`` call per ``rollout_batch_size`` samples, each with its own samples' images and videos
        bound (``media``: per sample, the architecture's processor outputs)."""
        generations = []
        with eval_mode(self.model):
            for start in range(0, prompt_ids.shape[0], self.config.rollout_batch_size):
                part = slice(start, start + self.config.rollout_batch_size)
                image_inputs = self.architecture.concat(media[part])
                if image_inputs and self.needs_mm_token_type_ids:
                    image_inputs[self.architecture.token_type_key] = mm_types[part]
                image_inputs = {k: v.to(self.device) for k, v in image_inputs.items()}
                engine = HFGenerateEngine(
                    ImageBoundModel(self.model, image_inputs, self.suppressed_token_ids), self.tokenizer
                )
                ids, mask = prompt_ids[part].to(self.device), prompt_mask[part].to(self.device)
                generations.append(engine.generate(ids, mask, params, self.generator))
        return generations

    @torch.no_grad()
    def rollout(
        self,
        rows: list[dict[str, Any]],
        group_size: int,
        *,
        mode: Literal["train", "eval"] = "train",
        request: RolloutRequest = RolloutRequest(),
    ) -> Rollout:
        """Sample ``group_size`` completions per row; every sample carries its own image patches (package docstring).
        With ``policy.multi_turn``, ``group_size`` trajectories per row taking turns with the environments
        (:mod:`genalign.policies.vlm.multi_turn`)."""
        if group_size < 1:
            raise ValueError(f"group_size={group_size} must be >= 1")
        if not rows:
            raise ValueError("rollout() needs at least one row")
        if self.config.multi_turn.enabled:
            return multi_turn_rollout(self, rows, group_size, mode, request, ImageTurns(self))
        encoded = self.encode_prompts(rows)
        picks = [i for i in range(len(rows)) for _ in range(group_size)]  # [N] row of each sample
        width = max(e.input_ids.numel() for e in encoded)
        prompt_ids = left_pad([encoded[i].input_ids for i in picks], width, self.pad_token_id)  # [N, P]
        prompt_mask = left_pad([torch.ones_like(encoded[i].input_ids) for i in picks], width, 0)  # [N, P]
        mm_types = left_pad([encoded[i].mm_token_type_ids for i in picks], width, 0)  # [N, P]
        media = [encoded[i].media for i in picks]
        generations = self.generate_with_images(prompt_ids, prompt_mask, mm_types, media, self.sampling_params(mode))

        num_actions = max(g.completion_ids.shape[1] for g in generations)
        completion_ids = torch.cat([right_pad(g.completion_ids, num_actions, self.pad_token_id) for g in generations])
        action_mask = torch.cat([right_pad(g.completion_mask, num_actions, 0) for g in generations])  # [N, T]
        old_logp = torch.cat([right_pad(g.logp, num_actions, 0) for g in generations])  # [N, T]
        truncated = torch.cat([g.truncated for g in generations])  # [N]
        outputs = self.tokenizer.batch_decode(completion_ids.tolist(), skip_special_tokens=True)
        out_rows = [dict(rows[i], **media_columns(encoded[i])) for i in picks]
        return Rollout(
            rows=out_rows,
            outputs=outputs,
            group_ids=torch.tensor(picks, dtype=torch.long),
            old_logp=old_logp.cpu(),
            action_mask=action_mask.cpu(),
            structure=self.completion_structure(
                request, truncated.cpu(), completion_ids.cpu(), action_mask.cpu(), picks, out_rows
            ),
            per_sample={
                "prompt_ids": prompt_ids,
                "prompt_mask": prompt_mask,
                "mm_token_type_ids": mm_types,
                "completion_ids": completion_ids.cpu(),
                **{key: [sample[key] for sample in media] for key in self.architecture.media_keys},
            },
            info={
                "completion_length": float(action_mask.sum(1).mean()),
                "frac_truncated": float(truncated.float().mean()),
                "images_per_prompt": sum(len(e.image_sizes) for e in encoded) / len(encoded),
                **(
                    {"videos_per_prompt": sum(len(e.videos) for e in encoded) / len(encoded)}
                    if any(e.videos for e in encoded)
                    else {}
                ),
            },
        )

    def completion_structure(
        self, request: RolloutRequest, truncated: Tensor, completion_ids: Tensor, mask: Tensor, picks: list[int],
        rows: list[dict[str, Any]],
    ) -> dict[str, Any]:  # fmt: skip
        """The causal-LM structure of the completions, plus their text blocks (``block_ids``: the number of
        ``policy.block_markers``, found in order, that start at or before each action, as the causal-LM probes count
        them) and the token judge's values (``token_judgement``, of the completions of ``rows``) when the request
        names them."""
        group_ids = torch.tensor(picks, dtype=torch.long)
        structure = completion_structure(request, self.segments, truncated, completion_ids, mask, group_ids=group_ids)
        if "block_ids" in request.structure and self.config.block_markers:
            structure["block_ids"] = block_ids(
                self.tokenizer, completion_ids, mask, self.config.block_markers
            )  # [N, T]
        if "token_judgement" in request.structure and self.config.token_judge.judge is not None:
            structure["token_judgement"] = judge_tokens(
                self.tokenizer, completion_ids, mask, rows, self.config.token_judge
            )  # [N, T]
        return structure

    # --- scoring --------------------------------------------------------------------------------------------------

    def model_inputs(self, rollout: Rollout) -> dict[str, Tensor]:
        """Forward inputs of ``prompt + completion`` for every sample of ``rollout``, on the policy's device.

        Returns ``input_ids`` / ``attention_mask`` ``[n, P + T]`` and, when a sample has images, ``mm_token_type_ids``
        ``[n, P + T]``, ``pixel_values`` ``[sum of patches, D]`` and ``image_grid_thw`` ``[K, 3]`` in sample order.
        A multi-turn completion attends its environment tokens too (``completion_attention``), and the image tokens of
        its observations are typed as images (a sampled token never is one: they are suppressed).
        """
        ps = rollout.per_sample
        completion_ids = ps["completion_ids"]  # [n, T]
        attended = ps.get("completion_attention", rollout.action_mask)  # [n, T]
        inputs = {
            "input_ids": torch.cat([ps["prompt_ids"], completion_ids], dim=1),
            "attention_mask": torch.cat([ps["prompt_mask"], attended.long()], dim=1),
        }
        keys = [key for key in self.architecture.media_keys if key in ps]
        images = self.architecture.concat(
            [dict(zip(keys, media, strict=True)) for media in zip(*(ps[k] for k in keys))]
        )
        if images:
            inputs |= images
            if self.needs_mm_token_type_ids:
                completion_types = mm_token_types(completion_ids, self.image_token_id, self.video_token_id)  # [n, T]
                types = torch.cat([ps["mm_token_type_ids"], completion_types], 1)  # [n, P + T]
                inputs[self.architecture.token_type_key] = types
        if self.architecture.positions == "from_mask":
            inputs["position_ids"] = position_ids_from_mask(inputs["attention_mask"])
        return {k: v.to(self.device) for k, v in inputs.items()}

    def load_peer(self, path: str, *, tokenizer: str | None, dtype: str | None, field: str) -> PeerModel:
        """The VLM saved at ``path`` (and its processor's tokenizer), loaded like the frozen reference copy, so that
        it scores the stored processor outputs (a teacher)."""
        location = model_location(path, field=field)
        where = (
            model_location(tokenizer, field=f"{field.rsplit('.', 1)[0]}.tokenizer", marker=None)
            if tokenizer
            else location
        )
        config = replace(self.config, dtype=dtype or self.config.dtype)
        return peer_model(load_model(config, location, self.device), load_processor(where).tokenizer)

    def score_actions(self, module: nn.Module, rollout: Rollout, request: ScoreRequest) -> ScoreOutput:
        """``logp`` ``[n, T]`` of the stored completions under ``module`` (with grad in training mode) and the requested
        token features: one backbone pass with every processor output, then the output head, with the vision tokens
        suppressed, on the hidden states of the completion tokens only, in chunks, at the sampling temperature.
        ``request.vocab_term`` is evaluated per token inside the chunked head pass. The perception features
        (:mod:`genalign.policies.vlm.perception`) come from the same pass (``visual_similarity``) or a second pass with
        the images blanked out (``logp_without_image``) or the frames reordered (``logp_frames_shuffled``); the attention
        readings ``modality_attention`` come from a pass with attention maps (:mod:`genalign.policies.vlm.attention`)."""
        inputs = self.model_inputs(rollout)
        hf_model = get_base_model(module)
        width = rollout.per_sample["prompt_ids"].shape[1]
        similarity = None
        if "visual_similarity" in request:  # every layer's states, from the very pass that gives the log-probs
            output = backbone_output(module, output_hidden_states=True, **inputs)
            full = output.last_hidden_state  # [n, P + T, H]
            image_token = -1 if self.image_token_id is None else self.image_token_id
            similarity = visual_similarity(
                output.hidden_states, inputs["input_ids"], image_token, width, rollout.action_mask
            )
        else:
            full = backbone_hidden_states(module, **inputs)  # [n, P + T, H]
        hidden = full[:, width - 1 : width - 1 + rollout.num_actions]  # [n, T, H] states predicting the actions
        head = suppressed_head(hf_model.get_output_embeddings(), self.suppressed_token_ids)
        targets, mask = inputs["input_ids"][:, width:], rollout.action_mask.to(hidden.device)  # [n, T]
        chunk, temperature = self.config.logprob_chunk_size, self.config.temperature
        scores = token_scores_from_hidden(
            hidden,
            targets,
            mask,
            head,
            temperature=temperature,
            chunk_size=chunk,
            with_entropy="entropy" in request,
            vocab_term=request.param("vocab_term") if "vocab_term" in request else None,
            topk=request.param("topk_logp", 0) if "topk_logp" in request else 0,
            with_hidden="hidden" in request,
        )
        without_image = shuffled = modalities = None
        if "modality_attention" in request:
            image_token = -1 if self.image_token_id is None else self.image_token_id
            modalities = modality_attention(module, inputs, image_token, width=width, mask=mask)
        args = {"width": width, "targets": targets, "mask": mask, "temperature": temperature, "chunk_size": chunk}
        if "logp_without_image" in request:
            blank = self.architecture.blank_images
            without_image = logp_without_image(module, inputs, head, blank=blank, logp=scores.logp, **args)
        if "logp_frames_shuffled" in request:
            if "image_grid_thw" not in rollout.per_sample:
                raise ValueError(
                    f"the score feature logp_frames_shuffled reorders the patches of Qwen-VL images; the "
                    f"{self.architecture.name} architecture of {self.config.model!r} has none (fix: drop the feature)"
                )
            frames = [int(grid.shape[0]) for grid in rollout.per_sample["image_grid_thw"]]
            shuffled = logp_frames_shuffled(module, inputs, head, images_per_sample=frames, logp=scores.logp, **args)
        features = {
            "entropy": scores.entropy,
            "vocab_term": scores.vocab_term,
            "topk_logp": scores.topk_logp,
            "hidden": scores.hidden,
            "logp_without_image": without_image,
            "visual_similarity": similarity,
            "logp_frames_shuffled": shuffled,
            "modality_attention": modalities,
        }
        return ScoreOutput(scores.logp, features)


def build_policy(config: VLMPolicyConfig, device: str | torch.device) -> VLMPolicy:
    """Load the processor and model named by ``config``, add LoRA / freeze the vision tower, and wrap them. An
    unsupported architecture is refused from the model's ``config.json``, before any weight is loaded."""
    from transformers import AutoConfig

    config.validate()
    device = torch.device(device)
    model_path = model_location(config.model)
    architecture_of(AutoConfig.from_pretrained(model_path))
    processor = load_processor(
        model_location(config.processor, field="policy.processor", marker=None) if config.processor else model_path
    )
    model = load_model(config, model_path, device)
    lora = config.lora
    if lora.rank > 0:
        targets = lora_module_names(model, lora.target_modules, config.lora_scope)
        model = add_lora(model, lora, target_modules=targets)
    if config.freeze_vision_tower:
        vision_tower(get_base_model(model)).requires_grad_(False)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return VLMPolicy(config, model, processor, device, model_path)


__all__ = ["VLMPolicy", "build_policy"]
