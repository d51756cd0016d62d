"""CLIP score through open_clip, with weights from a local file (never downloaded).

``clip_score`` is ``scale * cos(image embedding, text embedding)`` of an open_clip model. The architecture is an
open_clip model name (``"ViT-B-32"``, ``"ViT-L-14"``, ``"ViT-H-14"``, ...) or, with ``model_config``, a JSON file in
open_clip's config format (``{"embed_dim": ..., "vision_cfg": {...}, "text_cfg": {...}}``) whose file stem becomes the
model name. Weights are an open_clip checkpoint file (``.pt`` / ``.bin`` / ``.safetensors``: a state dict, or a dict
with a ``"state_dict"`` entry as open_clip's training writes), e.g. ``open_clip_pytorch_model.bin`` of a
``laion/CLIP-ViT-B-32-laion2B-s34B-b79K`` snapshot that you downloaded yourself. The text tokenizer is open_clip's own
CLIP BPE (shipped with the package).

Config example::

    rewards:
      - name: clip_score
        args: {model: ViT-B-32, weights: /models/clip-vit-b-32/open_clip_pytorch_model.bin, scale: 1.0}
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from genalign.rewards.base import register_reward
from genalign.rewards.image import as_rgb_image


def existing_file(reward: str, argument: str, path: str | Path) -> Path:
    """``path`` as a Path if it is an existing file, else a FileNotFoundError naming the reward and the argument."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"reward {reward!r}: {argument}={str(path)!r} does not exist or is not a file; download the weights "
            f"yourself and pass their local path (genalign never downloads reward weights)"
        )
    return path


def load_open_clip(reward: str, *, model: str, weights: str | None, model_config: str | None, device: str):
    """An open_clip model (eval mode, on ``device``), its image preprocessing and its tokenizer.

    ``weights=None`` keeps the random initialisation (for tests and architecture checks only).
    """
    import open_clip

    if model_config is not None:
        config_path = existing_file(reward, "model_config", model_config)
        try:
            json.loads(config_path.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"reward {reward!r}: model_config={str(config_path)!r} is not JSON: {error}") from None
        open_clip.add_model_config(config_path)
        model = config_path.stem
    elif model not in open_clip.list_models():
        raise ValueError(
            f"reward {reward!r}: model={model!r} is not an open_clip architecture; use one of open_clip.list_models() "
            f"(e.g. 'ViT-B-32') or pass model_config=<path to a JSON config>"
        )
    weights_path = None if weights is None else existing_file(reward, "weights", weights)  # before building the model
    clip_model = open_clip.create_model(model, pretrained=None, device=device)
    if weights_path is not None:
        open_clip.load_checkpoint(clip_model, str(weights_path), device=device)
    clip_model.eval().requires_grad_(False)
    preprocess = open_clip.image_transform(
        clip_model.visual.image_size,
        is_train=False,
        mean=getattr(clip_model.visual, "image_mean", None),
        std=getattr(clip_model.visual, "image_std", None),
    )
    return clip_model, preprocess, open_clip.get_tokenizer(model)


@register_reward("clip_score", source="CLIP image-text similarity via open_clip", path_args=("weights", "model_config"))
class ClipScore:
    """``scale * cos(E_image(image), E_text(prompt))`` with an open_clip model.

    Args:
        model: open_clip architecture name (ignored when ``model_config`` is given).
        weights: local checkpoint file; required unless ``allow_random_weights`` (tests).
        model_config: local JSON file with an open_clip architecture (its stem names it).
        scale: multiplies the cosine (e.g. 100 for the usual "CLIP score" range).
        batch_size: images per forward pass.
        device: torch device of the scorer.
        allow_random_weights: permit ``weights=None`` (random initialisation; for tests only).
    """

    def __init__(
        self,
        *,
        model: str = "ViT-B-32",
        weights: str | None = None,
        model_config: str | None = None,
        scale: float = 1.0,
        batch_size: int = 32,
        device: str = "cpu",
        allow_random_weights: bool = False,
    ) -> None:
        if weights is None and not allow_random_weights:
            raise ValueError(
                "reward 'clip_score': weights=None; pass weights=<local open_clip checkpoint file> "
                "(genalign never downloads reward weights)"
            )
        if batch_size < 1:
            raise ValueError(f"reward 'clip_score': batch_size={batch_size} must be >= 1")
        self.model, self.preprocess, self.tokenizer = load_open_clip(
            "clip_score", model=model, weights=weights, model_config=model_config, device=device
        )
        self.scale = scale
        self.batch_size = batch_size
        self.device = device

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **_columns: Sequence[Any]) -> list[float]:
        import torch

        if len(prompts) != len(completions):
            raise ValueError(f"reward 'clip_score': {len(prompts)} prompts for {len(completions)} completions")
        scores: list[float] = []
        with torch.no_grad():
            for start in range(0, len(completions), self.batch_size):
                images = [
                    self.preprocess(as_rgb_image(c, reward="clip_score", index=start + i))
                    for i, c in enumerate(completions[start : start + self.batch_size])
                ]
                pixels = torch.stack(images).to(self.device)  # [B, 3, S, S]
                tokens = self.tokenizer(list(prompts[start : start + self.batch_size])).to(self.device)  # [B, L]
                image_emb = torch.nn.functional.normalize(self.model.encode_image(pixels).float(), dim=-1)  # [B, D]
                text_emb = torch.nn.functional.normalize(self.model.encode_text(tokens).float(), dim=-1)  # [B, D]
                scores.extend((self.scale * (image_emb * text_emb).sum(-1)).tolist())
        return scores
