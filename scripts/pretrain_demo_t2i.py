"""Pre-train the tiny shapes-world text-to-image model shipped in ``genalign/assets/shapes-t2i``.

The result is a diffusers ``StableDiffusion3Pipeline`` folder with real diffusers / transformers classes, only tiny:

- ``tokenizer`` / ``tokenizer_2``: ``CLIPTokenizer`` with a word-level BPE vocabulary of the shapes grammar (112 tokens,
  12 positions); words outside the grammar fall back to letters;
- ``text_encoder`` / ``text_encoder_2``: ``CLIPTextModelWithProjection`` (2 layers, width 32), trained jointly;
- ``text_encoder_3`` / ``tokenizer_3``: none (the pipeline then pads the sequence with zero "T5" tokens: always encode
  with ``max_sequence_length=1``, as the model was trained that way);
- ``vae``: ``AutoencoderKL`` at scale factor 1 whose weights are set by hand (not trained) so that latents are the
  RGB pixels (see :func:`build_identity_vae`); the diffusion therefore runs in pixel space;
- ``transformer``: ``SD3Transformer2DModel`` (patch 4 on 32x32x3 -> 64 image tokens, 3 blocks, width 64) trained with
  the rectified-flow loss on prompts of the training split only; held-out prompts (``split="test"``) are never seen;
- ``scheduler``: ``FlowMatchEulerDiscreteScheduler`` (shift 3, as in training).

Run (deterministic for a fixed ``--threads``; 4500 steps took 17 min of wall time on the shared 2-core machine
under a load average of 7-9, about 0.1 s per step on an idle core; keep ``--threads 1`` on a busy machine, as
OpenMP threads spin-waiting on shared cores made steps 5-10x slower)::

    python scripts/pretrain_demo_t2i.py --steps 4500 --out genalign/assets/shapes-t2i

Variants (measured in benchmarks/flow_demo_results.md, not the committed model): ``--ema``/``--cooldown`` (weight
average, final lr decay), ``--width``/``--layers``/``--patch``, ``--p-extra`` (a share of training images shows one
shape more than the prompt says), and a trained latent VAE instead of the identity one. The best so far (held-out
strict accuracy 0.21 vs 0.09, 14 minutes on 2 shared cores) is a 2x down-sampling VAE (16x16x4 latents) and a width-96
transformer with patch 2, made in two stages (the first is bit-identical whether run alone or not)::

    python scripts/pretrain_demo_t2i.py --vae-only --vae-factor 2 --vae-steps 1500 --out /tmp/shapes-vae2x
    python scripts/pretrain_demo_t2i.py --vae trained --vae-from /tmp/shapes-vae2x --vae-factor 2 --patch 2 \
        --width 96 --steps 4500 --out /tmp/shapes-t2i-latent

The Flow-GRPO demo's model ``genalign/assets/shapes-t2i-faded`` continues the committed model with colours faded
towards the background on 60 % of the training images (``--init-from``, ``--p-faded``, ``--fade``; 112 s)::

    python scripts/pretrain_demo_t2i.py --init-from genalign/assets/shapes-t2i --p-faded 0.6 --fade 0.5 \
        --steps 1200 --lr 3e-4 --warmup 50 --eval-samples 4 --log-every 200 --out genalign/assets/shapes-t2i-faded

Sample with ``max_sequence_length=1`` (one zero "T5" token, as in training), 32x32, 10-20 steps. The script prints
the held-out accuracy of the ``geneval_shapes`` reward and writes it, with timings and sizes, to
``pretrain_report.json`` in the output folder (the numbers of ``MODEL_CARD.md``). Evaluations and ``--save-checkpoints``
do not change the trained weights (they use their own random generators).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
import torch.nn.functional as F

from genalign.data import shapes
from genalign.rewards.image import GenevalShapes

IMAGE_SIZE = 32
MAX_SEQUENCE_LENGTH = 1  # zero "T5" tokens appended by StableDiffusion3Pipeline when text_encoder_3 is None
TOKENIZER_LENGTH = 12
WORDS = sorted(
    {"a", "two", "three", "and", "of", "left", "right", "above", "below"}
    | set(shapes.PALETTE)
    | {k for kind in shapes.KINDS for k in (kind, kind + "s")}
)


# ---------------------------------------------------------------------------------------------------------------------
# Components


def bpe(pieces: list[str], ranks: dict[tuple[str, str], int]) -> list[str]:
    """Byte-pair encoding as CLIP applies it: merge the lowest-ranked adjacent pair (all occurrences) until none is left."""
    while len(pieces) > 1:
        pairs = [(ranks.get(pair, len(ranks)), pair) for pair in itertools.pairwise(pieces)]
        rank, (left, right) = min(pairs)
        if rank == len(ranks):
            break
        merged, i = [], 0
        while i < len(pieces):
            if i + 1 < len(pieces) and (pieces[i], pieces[i + 1]) == (left, right):
                merged.append(left + right)
                i += 2
            else:
                merged.append(pieces[i])
                i += 1
        pieces = merged
    return pieces


def build_tokenizer(folder: Path):
    """A ``CLIPTokenizer`` whose BPE merges spell every word of the shapes grammar as one token.

    Merges are added one at a time, each joining the first two pieces the current merges leave, until every word is a
    single token (so merges of one word cannot break another).
    """
    from transformers import CLIPTokenizer

    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab: dict[str, int] = {}
    for token in [*letters, *(c + "</w>" for c in letters)]:
        vocab.setdefault(token, len(vocab))
    ranks: dict[tuple[str, str], int] = {}
    for word in WORDS:
        while len(pieces := bpe([*word[:-1], word[-1] + "</w>"], ranks)) > 1:
            ranks[(pieces[0], pieces[1])] = len(ranks)
            vocab.setdefault(pieces[0] + pieces[1], len(vocab))
    for token in ("<|startoftext|>", "<|endoftext|>"):
        vocab.setdefault(token, len(vocab))
    merges = sorted(ranks, key=ranks.get)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(" ".join(m) for m in merges) + "\n")
    tokenizer = CLIPTokenizer(
        str(folder / "vocab.json"),
        str(folder / "merges.txt"),
        model_max_length=TOKENIZER_LENGTH,
        pad_token="<|endoftext|>",
    )
    for word in WORDS:
        assert len(tokenizer.tokenize(word)) == 1, word
    return tokenizer


def build_text_encoder(tokenizer):
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    config = CLIPTextConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=TOKENIZER_LENGTH,
        projection_dim=32,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|startoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )
    return CLIPTextModelWithProjection(config)


def build_identity_vae(*, channels: int = 16, bias: float = 50.0, shift: float = 20.0):
    """An ``AutoencoderKL`` at scale factor 1 whose weights are set by hand so that ``decode(encode(x)) ~= x``.

    Latents are the RGB pixels themselves (3 channels, relative error ~1e-4), so the diffusion runs in pixel space
    with a real diffusers VAE class in the pipeline. How the hand-set weights survive each layer:

    - every ``ResnetBlock2D`` is the identity (its last convolution is zero; mid-block attention is off);
    - ``conv_in`` writes ``x``, ``-x`` and constant channels ``+bias`` / ``-bias``: the single-group ``GroupNorm`` then
      sees mean exactly 0 and a standard deviation within ~1e-4 of a constant, so it only rescales;
    - the norm's affine shift puts the pixel channels at ``+shift`` where ``SiLU`` is the identity to ~1e-8;
    - ``conv_out`` subtracts the shift; the log-variance channels are -20 (posterior std 4.5e-5).
    """
    from diffusers import AutoencoderKL

    latent = 3
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",),
        up_block_types=("UpDecoderBlock2D",),
        block_out_channels=(channels,),
        layers_per_block=1,
        latent_channels=latent,
        norm_num_groups=1,
        sample_size=IMAGE_SIZE,
        mid_block_add_attention=False,
        use_quant_conv=False,
        use_post_quant_conv=False,
        force_upcast=False,
    )
    n_const = channels - 6
    constants = torch.tensor([bias if k % 2 == 0 else -bias for k in range(n_const)])  # [C - 6], sums to 0
    nominal_std = float(constants.pow(2).sum().div(channels).sqrt())

    def set_conv_in(conv: torch.nn.Conv2d) -> None:  # [C, 3, 3, 3]: x, -x, constants
        conv.weight.zero_()
        conv.bias.zero_()
        for c in range(3):
            conv.weight[c, c, 1, 1] = 1.0
            conv.weight[3 + c, c, 1, 1] = -1.0
        conv.bias[6:] = constants

    def set_norm(norm: torch.nn.GroupNorm) -> None:
        norm.weight.fill_(1.0)
        norm.bias.zero_()
        norm.weight[:3] = nominal_std
        norm.bias[:3] = shift

    def set_conv_out(conv: torch.nn.Conv2d, n_out: int, logvar: bool) -> None:  # pixel channels minus the shift
        conv.weight.zero_()
        conv.bias.zero_()
        for c in range(n_out):
            conv.weight[c, c, 1, 1] = 1.0
            conv.bias[c] = -shift
        if logvar:
            conv.bias[n_out:] = -20.0

    with torch.no_grad():
        for module in vae.modules():
            if module.__class__.__name__ == "ResnetBlock2D":
                module.conv2.weight.zero_()
                module.conv2.bias.zero_()
        set_conv_in(vae.encoder.conv_in)
        set_conv_in(vae.decoder.conv_in)
        set_norm(vae.encoder.conv_norm_out)
        set_norm(vae.decoder.conv_norm_out)
        set_conv_out(vae.encoder.conv_out, latent, logvar=True)
        set_conv_out(vae.decoder.conv_out, 3, logvar=False)
    return vae


def build_transformer(*, width: int, layers: int, patch: int = 4, channels: int = 3, latent_size: int = IMAGE_SIZE):
    from diffusers import SD3Transformer2DModel

    head_dim = 32
    return SD3Transformer2DModel(
        sample_size=latent_size,
        patch_size=patch,
        in_channels=channels,
        out_channels=channels,
        num_layers=layers,
        attention_head_dim=head_dim,
        num_attention_heads=width // head_dim,
        joint_attention_dim=64,
        caption_projection_dim=width,
        pooled_projection_dim=64,
        pos_embed_max_size=latent_size // patch,  # e.g. 8x8 grid of 4x4-pixel patches
    )


# ---------------------------------------------------------------------------------------------------------------------
# Data


def with_extra_shape(rng: np.random.Generator, scene: shapes.Scene) -> shapes.Scene:
    """``scene`` plus one more shape with the label (colour, kind) of one of its shapes, placed where it fits (the
    scene unchanged if there is no room): the systematic mistake of the demo model's training data."""
    template = scene.shapes[int(rng.integers(len(scene.shapes)))]
    lo, hi = max(5, round(0.28 * scene.size)), max(5, round(0.4 * scene.size))
    side = int(rng.integers(lo, hi + 1))
    boxes = shapes._place(rng, scene.size, [side], [s.box for s in scene.shapes], gap=1)
    if boxes is None:
        return scene
    extra = shapes.Shape(template.kind, template.color, boxes[0])
    return shapes.Scene(size=scene.size, shapes=(*scene.shapes, extra), relation=scene.relation)


def render_batch(
    rng: np.random.Generator,
    n: int,
    *,
    split: str,
    p_extra: float = 0.0,
    p_faded: float = 0.0,
    fade: float = 0.5,
    mistake_rng: np.random.Generator | None = None,
) -> tuple[list[str], torch.Tensor]:
    """``n`` scenes whose prompts belong to ``split``: prompts and images ``[n, 3, 32, 32]`` in [-1, 1].

    With probability ``p_extra`` (drawn from ``mistake_rng``, so the scene stream does not depend on it) the image
    shows one shape more than its prompt says (:func:`with_extra_shape`); with probability ``p_faded`` its colours
    are faded towards the white background by ``fade`` (0.5 puts every palette colour farther than the detector's
    ``max_distance`` from all references, so faded shapes are not found)."""
    prompts, images = [], []
    while len(prompts) < n:
        scene = shapes.sample_scene(rng, size=IMAGE_SIZE)
        prompt = shapes.describe(scene)
        if split != "all" and shapes.prompt_split(prompt) != split:
            continue
        if p_extra and mistake_rng.random() < p_extra:
            scene = with_extra_shape(mistake_rng, scene)
        image = np.asarray(shapes.render(scene)).astype(np.float32)
        if p_faded and mistake_rng.random() < p_faded:
            image = image + fade * (255.0 - image)
        prompts.append(prompt)
        images.append(image)
    pixels = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 127.5 - 1.0  # [n, 3, H, W]
    return prompts, pixels


def to_pil(pixels: torch.Tensor):
    """``[n, 3, H, W]`` in [-1, 1] -> list of RGB PIL images."""
    from PIL import Image

    array = ((pixels.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    return [Image.fromarray(a, mode="RGB") for a in array]


def build_trained_vae(*, latent_channels: int = 4, factor: int = 4):
    """A small ``AutoencoderKL`` with ``factor``x spatial down-sampling (2 or 4: 32x32x3 pixels -> 16x16 or 8x8 x
    ``latent_channels``), to be trained by :func:`train_vae`: the diffusion then runs in a smaller latent space, as
    latent diffusion models do (fewer dimensions per denoising step, shapes decoded by the VAE)."""
    from diffusers import AutoencoderKL

    blocks = {2: (32, 32), 4: (16, 32, 32)}[factor]
    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * len(blocks),
        up_block_types=("UpDecoderBlock2D",) * len(blocks),
        block_out_channels=blocks,
        layers_per_block=1,
        latent_channels=latent_channels,
        norm_num_groups=16,
        sample_size=IMAGE_SIZE,
        mid_block_add_attention=False,
        force_upcast=False,
    )


def train_vae(vae, *, steps: int, batch: int, lr: float, kl_weight: float, seed: int, log_every: int) -> dict:
    """Train ``vae`` on rendered scenes (all prompts: the VAE never sees text) with an L1 + MSE reconstruction loss
    and a small KL term; returns the final losses."""
    rng = np.random.default_rng(seed)
    optimizer = torch.optim.AdamW(vae.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / 100, (steps - step) / (steps / 4))
    )
    generator = torch.Generator().manual_seed(seed)
    started = time.time()
    vae.train()
    for step in range(steps):
        _, pixels = render_batch(rng, batch, split="all")  # [B, 3, 32, 32]
        posterior = vae.encode(pixels).latent_dist
        recon = vae.decode(posterior.sample(generator=generator)).sample
        rec = F.l1_loss(recon, pixels) + F.mse_loss(recon, pixels)
        kl = posterior.kl().mean() / pixels[0].numel()
        loss = rec + kl_weight * kl
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % log_every == 0:
            print(
                f"[vae] step {step} rec {rec.item():.4f} kl {kl.item():.4f} time {time.time() - started:.0f}s",
                flush=True,
            )
    vae.eval()
    return {
        "vae_steps": steps,
        "vae_final_reconstruction_loss": float(rec.detach()),
        "vae_seconds": round(time.time() - started, 1),
    }


# ---------------------------------------------------------------------------------------------------------------------
# Stage 1: the VAE statistics


@torch.no_grad()
def calibrate_vae(vae, *, seed: int) -> dict:
    """Set ``shift_factor`` / ``scaling_factor`` so latents of rendered scenes have mean 0 and std 1; check the
    round trip (max error and agreement of :func:`detect` before and after)."""
    _, pixels = render_batch(np.random.default_rng(seed), 256, split="all")
    latents = vae.encode(pixels).latent_dist.mean  # [256, C, h, w]
    recon = vae.decode(latents).sample
    shift, std = latents.mean().item(), latents.std().item()
    vae.register_to_config(shift_factor=shift, scaling_factor=1.0 / std)
    agree = sum(shapes.detect(a) == shapes.detect(b) for a, b in zip(to_pil(pixels), to_pil(recon)))
    return {
        "vae_roundtrip_max_abs_error": float((recon - pixels).abs().max()),
        "vae_roundtrip_detect_agreement": agree / len(pixels),
        "latent_shift": shift,
        "latent_std": std,
    }


# ---------------------------------------------------------------------------------------------------------------------
# Stage 2: the transformer (rectified flow)


def encode(pipe, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt embeddings exactly as StableDiffusion3Pipeline computes them: ``[B, 13, 64]`` and pooled ``[B, 64]``."""
    embeds, _, pooled, _ = pipe.encode_prompt(
        prompt=prompts,
        prompt_2=None,
        prompt_3=None,
        do_classifier_free_guidance=False,
        max_sequence_length=MAX_SEQUENCE_LENGTH,
        device=torch.device("cpu"),
    )
    return embeds, pooled


class WeightEMA:
    """Exponential moving average of the trainable weights (``decay`` per step, with the usual warm-up
    ``min(decay, (1 + n) / (10 + n))``); :meth:`swap` exchanges the live and averaged weights (call it twice)."""

    def __init__(self, modules: list[torch.nn.Module], decay: float):
        self.params = [p for m in modules for p in m.parameters()]
        self.shadow = [p.detach().clone() for p in self.params]
        self.decay, self.updates = decay, 0

    @torch.no_grad()
    def update(self) -> None:
        self.updates += 1
        decay = min(self.decay, (1 + self.updates) / (10 + self.updates))
        for average, p in zip(self.shadow, self.params):
            average.lerp_(p.detach(), 1 - decay)

    @torch.no_grad()
    def swap(self) -> None:
        for average, p in zip(self.shadow, self.params):
            live = p.detach().clone()
            p.copy_(average)
            average.copy_(live)


def train_transformer(
    pipe,
    *,
    steps: int,
    batch: int,
    lr: float,
    warmup: int,
    shift: float,
    drop_prompt: float,
    seed: int,
    log_every: int,
    eval_fn,
    eval_every: int,
    ema: WeightEMA | None = None,
    cooldown: int = 0,
    encode_latents: bool = False,
    p_extra: float = 0.0,
    p_faded: float = 0.0,
    fade: float = 0.5,
) -> list[dict]:
    rng = np.random.default_rng(seed)
    mistake_rng = np.random.default_rng(seed + 1000)
    generator = torch.Generator().manual_seed(seed)
    vae, transformer = pipe.vae, pipe.transformer
    params = [*transformer.parameters(), *pipe.text_encoder.parameters(), *pipe.text_encoder_2.parameters()]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)

    def lr_factor(step: int) -> float:
        """Linear warm-up, constant, then (``cooldown`` > 0) a linear decay to 0 over the last ``cooldown`` steps."""
        decay = min(1.0, (steps - step) / cooldown) if cooldown else 1.0
        return min(1.0, (step + 1) / warmup, decay)

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    history = []
    started = time.time()
    for step in range(steps):
        transformer.train()
        prompts, pixels = render_batch(
            rng, batch, split="train", p_extra=p_extra, p_faded=p_faded, fade=fade, mistake_rng=mistake_rng
        )
        prompts = ["" if rng.random() < drop_prompt else p for p in prompts]
        if not encode_latents:  # the identity VAE (see build_identity_vae): latents are the pixels
            latents = pixels
        else:
            with torch.no_grad():
                latents = vae.encode(pixels).latent_dist.mean  # [B, C, h, w]
        x0 = (latents - vae.config.shift_factor) * vae.config.scaling_factor  # [B, C, h, w]
        noise = torch.randn(x0.shape, generator=generator)  # [B, C, h, w]
        sigma = torch.sigmoid(torch.randn(batch, generator=generator))  # logit-normal, [B]
        sigma = shift * sigma / (1 + (shift - 1) * sigma)  # shifted towards noise, where the layout is decided
        s = sigma.view(-1, 1, 1, 1)
        xt = (1 - s) * x0 + s * noise  # [B, C, h, w]
        embeds, pooled = encode(pipe, prompts)
        v = transformer(
            hidden_states=xt, timestep=sigma * 1000, encoder_hidden_states=embeds, pooled_projections=pooled
        )
        loss = F.mse_loss(v.sample, noise - x0)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        if ema is not None:
            ema.update()
        if step % log_every == 0:
            print(f"[flow] step {step} loss {loss.item():.4f} time {time.time() - started:.0f}s", flush=True)
        if eval_every and (step + 1) % eval_every == 0 and step + 1 < steps:
            history.append({"step": step + 1, **eval_fn(step + 1)})
            print(f"[flow] eval {history[-1]}", flush=True)
    transformer.eval()
    return history


# ---------------------------------------------------------------------------------------------------------------------
# Evaluation


@torch.no_grad()
def sample_images(pipe, prompts: list[str], *, seed: int, steps: int, guidance: float, batch: int = 64) -> list:
    images = []
    for start in range(0, len(prompts), batch):
        chunk = prompts[start : start + batch]
        out = pipe(
            prompt=chunk,
            num_inference_steps=steps,
            guidance_scale=guidance,
            height=IMAGE_SIZE,
            width=IMAGE_SIZE,
            max_sequence_length=MAX_SEQUENCE_LENGTH,
            generator=torch.Generator().manual_seed(seed + start),
            output_type="pil",
        )
        images.extend(out.images)
    return images


def heldout_accuracy(pipe, *, n_prompts: int, samples: int, steps: int, guidance: float, seed: int) -> dict:
    """Mean geneval_shapes reward over ``samples`` seeds of ``n_prompts`` held-out prompts, plus pass@samples."""
    rows = shapes.shapes_t2i_rows(n_prompts, seed, split="test", image_size=IMAGE_SIZE)
    prompts = [r["prompt"] for r in rows for _ in range(samples)]
    targets = [r["target"] for r in rows for _ in range(samples)]
    images = sample_images(pipe, prompts, seed=seed, steps=steps, guidance=guidance)
    scores = np.asarray(GenevalShapes()(prompts, images, target=targets)).reshape(n_prompts, samples)
    partial = np.asarray(GenevalShapes(partial_credit=True)(prompts, images, target=targets))
    per_template: dict[str, list[float]] = {}
    for row, s in zip(rows, scores):
        per_template.setdefault(row["template"], []).extend(s.tolist())
    return {
        "accuracy": float(scores.mean()),
        "partial": float(partial.mean()),
        f"pass@{samples}": float((scores.max(1) > 0).mean()),
        "mixed_groups": float(((scores.max(1) > 0) & (scores.min(1) < 1)).mean()),
        "by_template": {k: round(float(np.mean(v)), 3) for k, v in sorted(per_template.items())},
    }


def make_vae(args: argparse.Namespace):
    """The identity VAE, a trained one loaded from ``--vae-from``, or a fresh one for :func:`train_vae`."""
    if args.vae == "identity":
        return build_identity_vae()
    if args.vae_from is not None:
        from diffusers import AutoencoderKL

        return AutoencoderKL.from_pretrained(args.vae_from)
    return build_trained_vae(latent_channels=args.latent_channels, factor=args.vae_factor)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("genalign/assets/shapes-t2i"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4500)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--save-checkpoints", action="store_true")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--patch", type=int, default=4, help="transformer patch size in latent pixels")
    parser.add_argument("--vae", choices=("identity", "trained"), default="identity")
    parser.add_argument("--vae-steps", type=int, default=2000)
    parser.add_argument("--vae-lr", type=float, default=1e-3)
    parser.add_argument("--latent-channels", type=int, default=4)
    parser.add_argument("--vae-only", action="store_true", help="only train and save the VAE (--vae-factor etc.)")
    parser.add_argument("--vae-from", type=Path, default=None, help="load a trained VAE folder instead of training one")
    parser.add_argument("--vae-factor", type=int, choices=(2, 4), default=4, help="down-sampling of the trained VAE")
    parser.add_argument("--ema", type=float, default=0.0, help="EMA decay of the weights evaluated and saved (0: off)")
    parser.add_argument("--cooldown", type=int, default=0, help="linear lr decay to 0 over the last N steps")
    parser.add_argument("--shift", type=float, default=3.0, help="timestep shift of training and sampling")
    parser.add_argument("--drop-prompt", type=float, default=0.1)
    parser.add_argument(
        "--p-extra", type=float, default=0.0, help="share of training images showing one shape more than the prompt"
    )
    parser.add_argument("--p-faded", type=float, default=0.0, help="share of training images with faded colours")
    parser.add_argument("--fade", type=float, default=0.5, help="fading towards the background of those images")
    parser.add_argument(
        "--init-from", type=Path, default=None,
        help="continue training this pipeline folder (its weights and architecture; --width/--layers/--patch ignored)",
    )  # fmt: skip
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--eval-every", type=int, default=0)
    parser.add_argument("--eval-prompts", type=int, default=32)
    parser.add_argument("--eval-samples", type=int, default=8)
    parser.add_argument("--eval-steps", type=int, default=10)
    args = parser.parse_args()
    if args.init_from is not None and (args.vae != "identity" or args.vae_only):
        parser.error("--init-from continues a pixel-space (identity-VAE) pipeline; drop --vae trained / --vae-only")

    from diffusers import FlowMatchEulerDiscreteScheduler, StableDiffusion3Pipeline

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    started = time.time()
    if args.vae_only:  # stage 0 on its own: train and save the VAE that --vae-from then loads
        vae = build_trained_vae(latent_channels=args.latent_channels, factor=args.vae_factor)
        report = train_vae(
            vae, steps=args.vae_steps, batch=args.batch, lr=args.vae_lr, kl_weight=1e-4, seed=args.seed + 2,
            log_every=args.log_every,
        )  # fmt: skip
        report.update(calibrate_vae(vae, seed=args.seed))
        print(json.dumps(report, indent=1), flush=True)
        vae.save_pretrained(args.out)
        (args.out / "vae_report.json").write_text(json.dumps(report, indent=1) + "\n")
        return
    tokenizer = build_tokenizer(Path(tempfile.mkdtemp()))
    pipe = StableDiffusion3Pipeline(
        transformer=build_transformer(
            width=args.width,
            layers=args.layers,
            patch=args.patch,
            channels=3 if args.vae == "identity" else args.latent_channels,
            latent_size=IMAGE_SIZE if args.vae == "identity" else IMAGE_SIZE // args.vae_factor,
        ),
        scheduler=FlowMatchEulerDiscreteScheduler(shift=args.shift),
        vae=make_vae(args),
        text_encoder=build_text_encoder(tokenizer),
        tokenizer=tokenizer,
        text_encoder_2=build_text_encoder(tokenizer),
        tokenizer_2=tokenizer,
        text_encoder_3=None,
        tokenizer_3=None,
    )
    if args.init_from is not None:  # same architecture, trained weights (its VAE too)
        pipe = StableDiffusion3Pipeline.from_pretrained(
            args.init_from, text_encoder_3=None, tokenizer_3=None, image_encoder=None, feature_extractor=None
        )
    pipe.set_progress_bar_config(disable=True)
    report: dict = {"args": {k: str(v) for k, v in vars(args).items()}}
    if args.vae_from is not None:
        report["vae_from"] = str(args.vae_from)
    elif args.vae == "trained":
        report.update(
            train_vae(pipe.vae, steps=args.vae_steps, batch=args.batch, lr=args.vae_lr, kl_weight=1e-4,
                      seed=args.seed + 2, log_every=args.log_every)
        )  # fmt: skip
    report.update(calibrate_vae(pipe.vae, seed=args.seed))
    print(f"[vae] {report}", flush=True)

    ema = WeightEMA([pipe.transformer, pipe.text_encoder, pipe.text_encoder_2], args.ema) if args.ema else None

    def evaluate(step: int | None = None) -> dict:
        if ema is not None:
            ema.swap()
        if step is not None and args.save_checkpoints:
            pipe.save_pretrained(args.out / f"checkpoint-{step}")
        result = heldout_accuracy(
            pipe, n_prompts=args.eval_prompts, samples=args.eval_samples, steps=args.eval_steps, guidance=1.0, seed=1234
        )
        if ema is not None:
            ema.swap()
        pipe.transformer.train()
        return result

    flow_started = time.time()
    report["history"] = train_transformer(
        pipe,
        steps=args.steps,
        batch=args.batch,
        lr=args.lr,
        warmup=args.warmup,
        shift=args.shift,
        drop_prompt=args.drop_prompt,
        seed=args.seed + 1,
        log_every=args.log_every,
        eval_fn=evaluate,
        eval_every=args.eval_every,
        ema=ema,
        cooldown=args.cooldown,
        encode_latents=args.vae == "trained",
        p_extra=args.p_extra,
        p_faded=args.p_faded,
        fade=args.fade,
    )
    report["flow_seconds"] = round(time.time() - flow_started, 1)
    report["heldout"] = evaluate()
    if ema is not None:  # the averaged weights are the model
        ema.swap()
    report["train_seconds_total"] = round(time.time() - started, 1)
    report["parameters"] = {
        name: sum(p.numel() for p in getattr(pipe, name).parameters())
        for name in ("transformer", "vae", "text_encoder", "text_encoder_2")
    }
    print(json.dumps(report, indent=1), flush=True)
    pipe.save_pretrained(args.out)
    (args.out / "pretrain_report.json").write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
