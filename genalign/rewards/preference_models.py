"""Learned image-preference rewards (PickScore, HPSv2, ImageReward, LAION aesthetic predictor), loaded from local files.

genalign never downloads weights: fetch them yourself and pass local paths. Expected files:

============== ====================================================================================================
reward          what to pass
============== ====================================================================================================
``pickscore``   ``model_path``: a transformers ``CLIPModel`` folder (``config.json`` + ``model.safetensors`` or
                ``pytorch_model.bin``), e.g. a snapshot of ``yuvalkirstain/PickScore_v1``; ``processor_path``: a
                folder with ``preprocessor_config.json`` and the CLIP tokenizer files (``vocab.json``,
                ``merges.txt`` / ``tokenizer.json``), e.g. ``laion/CLIP-ViT-H-14-laion2B-s32B-b79K``; defaults to
                ``model_path``. Score: ``logit_scale.exp() * cos(image, text)`` (about 20 to 23 for real images).
``hpsv2``       ``weights``: ``HPS_v2_compressed.pt`` or ``HPS_v2.1_compressed.pt`` (an open_clip checkpoint with a
                ``state_dict`` entry); ``model``: ``"ViT-H-14"`` (default) or ``model_config``: an open_clip JSON
                config. Score: ``cos(image, text)`` as in the HPSv2 reference (about 0.2 to 0.35).
``imagereward`` ``weights``: ``ImageReward.pt`` and ``med_config``: ``med_config.json`` (BLIP text-encoder config), read
                by the ``image-reward`` package (``pip install image-reward``), which must be installed.
``aesthetic``   ``mlp_weights``: the LAION improved aesthetic predictor head (``sac+logos+ava1-l14-linearMSE.pth``: a
                state dict ``layers.{0,2,4,6,7}.{weight,bias}``); ``clip_weights``: the open_clip checkpoint of the
                CLIP it was trained on (``ViT-L-14``, OpenAI weights); ``clip_model`` / ``clip_config`` as in
                ``clip_score``. Score: the MLP on the L2-normalised image embedding (about 1 to 10).
============== ====================================================================================================

A path that does not exist raises FileNotFoundError naming the reward, the argument and the path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from genalign.rewards.base import register_reward
from genalign.rewards.clip import existing_file, load_open_clip
from genalign.rewards.image import as_rgb_image


def existing_folder(reward: str, argument: str, path: str | Path) -> Path:
    """``path`` as a Path if it is an existing folder, else a FileNotFoundError naming the reward and the argument."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(
            f"reward {reward!r}: {argument}={str(path)!r} is not an existing folder; download the model yourself and "
            f"pass the local folder (genalign never downloads reward weights)"
        )
    return path


def _check_lengths(reward: str, prompts: Sequence[str], completions: Sequence[Any]) -> None:
    if len(prompts) != len(completions):
        raise ValueError(f"reward {reward!r}: {len(prompts)} prompts for {len(completions)} completions")


@register_reward("pickscore", source="PickScore (Pick-a-Pic)", path_args=("model_path", "processor_path"))
class PickScore:
    """``logit_scale.exp() * cos(image, text)`` of a transformers CLIP model fine-tuned on human preferences.

    Args:
        model_path: local ``CLIPModel`` folder.
        processor_path: local ``CLIPProcessor`` folder (default: ``model_path``).
        batch_size: images per forward pass.
        device: torch device.
    """

    def __init__(
        self, *, model_path: str, processor_path: str | None = None, batch_size: int = 16, device: str = "cpu"
    ) -> None:
        from transformers import AutoProcessor, CLIPModel

        model_dir = existing_folder("pickscore", "model_path", model_path)
        processor_dir = existing_folder("pickscore", "processor_path", processor_path or model_path)
        self.model = CLIPModel.from_pretrained(model_dir, local_files_only=True).to(device).eval()
        self.processor = AutoProcessor.from_pretrained(processor_dir, local_files_only=True)
        self.batch_size = batch_size
        self.device = device

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **_columns: Sequence[Any]) -> list[float]:
        import torch

        _check_lengths("pickscore", prompts, completions)
        scores: list[float] = []
        with torch.no_grad():
            for start in range(0, len(completions), self.batch_size):
                images = [
                    as_rgb_image(c, reward="pickscore", index=start + i)
                    for i, c in enumerate(completions[start : start + self.batch_size])
                ]
                texts = list(prompts[start : start + self.batch_size])
                image_inputs = self.processor(images=images, return_tensors="pt").to(self.device)
                text_inputs = self.processor(
                    text=texts, padding=True, truncation=True, max_length=77, return_tensors="pt"
                ).to(self.device)
                image_emb = self.model.get_image_features(**image_inputs)  # [B, D]
                text_emb = self.model.get_text_features(**text_inputs)  # [B, D]
                image_emb = getattr(image_emb, "pooler_output", image_emb)
                text_emb = getattr(text_emb, "pooler_output", text_emb)
                image_emb = torch.nn.functional.normalize(image_emb.float(), dim=-1)
                text_emb = torch.nn.functional.normalize(text_emb.float(), dim=-1)
                scale = self.model.logit_scale.exp().float()
                scores.extend((scale * (image_emb * text_emb).sum(-1)).tolist())
        return scores


@register_reward("hpsv2", source="Human Preference Score v2", path_args=("weights", "model_config"))
class HPSv2:
    """HPSv2 / HPSv2.1: ``cos(image, text)`` of an open_clip ViT-H-14 fine-tuned on human preferences.

    Args:
        weights: local HPSv2 checkpoint file.
        model: open_clip architecture of the checkpoint.
        model_config: local open_clip JSON config instead of ``model``.
        batch_size: images per forward pass.
        device: torch device.
    """

    def __init__(
        self,
        *,
        weights: str,
        model: str = "ViT-H-14",
        model_config: str | None = None,
        batch_size: int = 16,
        device: str = "cpu",
    ) -> None:
        self.model, self.preprocess, self.tokenizer = load_open_clip(
            "hpsv2", model=model, weights=weights, model_config=model_config, device=device
        )
        self.batch_size = batch_size
        self.device = device

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **_columns: Sequence[Any]) -> list[float]:
        import torch

        _check_lengths("hpsv2", prompts, completions)
        scores: list[float] = []
        with torch.no_grad():
            for start in range(0, len(completions), self.batch_size):
                pixels = torch.stack(
                    [
                        self.preprocess(as_rgb_image(c, reward="hpsv2", index=start + i))
                        for i, c in enumerate(completions[start : start + self.batch_size])
                    ]
                ).to(self.device)  # [B, 3, S, S]
                tokens = self.tokenizer(list(prompts[start : start + self.batch_size])).to(self.device)  # [B, L]
                image_emb = torch.nn.functional.normalize(self.model.encode_image(pixels).float(), dim=-1)
                text_emb = torch.nn.functional.normalize(self.model.encode_text(tokens).float(), dim=-1)
                scores.extend((image_emb * text_emb).sum(-1).tolist())
        return scores


@register_reward("imagereward", source="ImageReward", path_args=("weights", "med_config"))
class ImageRewardScore:
    """ImageReward (BLIP + MLP head) through the ``image-reward`` package, from local files.

    Args:
        weights: local ``ImageReward.pt``.
        med_config: local ``med_config.json``.
        device: torch device.
    """

    def __init__(self, *, weights: str, med_config: str, device: str = "cpu") -> None:
        weights_path = existing_file("imagereward", "weights", weights)
        config_path = existing_file("imagereward", "med_config", med_config)
        try:
            import ImageReward as image_reward
        except ImportError:
            raise ImportError(
                "reward 'imagereward' needs the 'image-reward' package: pip install image-reward "
                "(weights stay local: weights= and med_config= are read from disk)"
            ) from None
        self.model = image_reward.load(str(weights_path), med_config=str(config_path), device=device)

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **_columns: Sequence[Any]) -> list[float]:
        _check_lengths("imagereward", prompts, completions)
        return [
            float(self.model.score(prompt, as_rgb_image(image, reward="imagereward", index=i)))
            for i, (prompt, image) in enumerate(zip(prompts, completions))
        ]


def build_aesthetic_mlp(input_dim: int):
    """The LAION improved aesthetic predictor head: ``[B, input_dim] -> [B, 1]`` (dropouts inactive in eval)."""
    from torch import nn

    return nn.Sequential(
        nn.Linear(input_dim, 1024),
        nn.Dropout(0.2),
        nn.Linear(1024, 128),
        nn.Dropout(0.2),
        nn.Linear(128, 64),
        nn.Dropout(0.1),
        nn.Linear(64, 16),
        nn.Linear(16, 1),
    )


@register_reward(
    "aesthetic",
    source="LAION improved aesthetic predictor",
    path_args=("mlp_weights", "clip_weights", "clip_config"),
)
class AestheticScore:
    """LAION aesthetic predictor: an MLP on the L2-normalised CLIP image embedding (the prompt is not used).

    Args:
        mlp_weights: local state dict of the MLP head (keys ``layers.0.weight`` ... ``layers.7.bias``).
        clip_weights: local open_clip checkpoint of the image encoder.
        clip_model: its open_clip architecture.
        clip_config: local open_clip JSON config instead of ``clip_model``.
        batch_size: images per forward pass.
        device: torch device.
    """

    def __init__(
        self,
        *,
        mlp_weights: str,
        clip_weights: str,
        clip_model: str = "ViT-L-14",
        clip_config: str | None = None,
        batch_size: int = 16,
        device: str = "cpu",
    ) -> None:
        import torch

        mlp_path = existing_file("aesthetic", "mlp_weights", mlp_weights)
        self.model, self.preprocess, _ = load_open_clip(
            "aesthetic", model=clip_model, weights=clip_weights, model_config=clip_config, device=device
        )
        state = torch.load(mlp_path, map_location=device, weights_only=True)
        state = {key.removeprefix("layers."): value for key, value in state.items()}
        if "0.weight" not in state:
            raise ValueError(
                f"reward 'aesthetic': mlp_weights={str(mlp_path)!r} has keys {sorted(state)[:4]}...; expected the "
                f"LAION predictor state dict with 'layers.0.weight' ... 'layers.7.bias'"
            )
        embed_dim = self.model.visual.output_dim
        if state["0.weight"].shape[1] != embed_dim:
            raise ValueError(
                f"reward 'aesthetic': mlp_weights expects {state['0.weight'].shape[1]}-dim CLIP embeddings but the "
                f"CLIP model gives {embed_dim}; pair the head with the CLIP it was trained on (ViT-L-14: 768)"
            )
        self.mlp = build_aesthetic_mlp(embed_dim).to(device)
        self.mlp.load_state_dict(state)
        self.mlp.eval()
        self.batch_size = batch_size
        self.device = device

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **_columns: Sequence[Any]) -> list[float]:
        import torch

        scores: list[float] = []
        with torch.no_grad():
            for start in range(0, len(completions), self.batch_size):
                pixels = torch.stack(
                    [
                        self.preprocess(as_rgb_image(c, reward="aesthetic", index=start + i))
                        for i, c in enumerate(completions[start : start + self.batch_size])
                    ]
                ).to(self.device)  # [B, 3, S, S]
                image_emb = torch.nn.functional.normalize(self.model.encode_image(pixels).float(), dim=-1)  # [B, D]
                scores.extend(self.mlp(image_emb).squeeze(-1).tolist())
        return scores
