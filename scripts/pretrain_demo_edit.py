"""Pre-train the shapes-world editing models shipped in ``genalign/assets/shapes-edit`` (and ``shapes-edit-weak``):
``shapes-t2i`` (read its model card) continued on editing instructions, for image-to-image editing
(``policy.architecture: sd3_img2img``).

Each training example is a row of the procedural task ``shapes_edit`` (train split only): the instruction ("make the
red circle blue", "add a green square", "remove the red circle") is the prompt, and the path is the one an
image-to-image run takes: from the *source* noised to the run's first sigma ``s0`` (``strength`` 0.6 of 10 steps with
the scheduler's shift 3: ``s0`` = 0.790), ``x_s0 = (1 - s0) source + s0 e``, straight to the *edited* scene ``x_0``:
``x_s = (s / s0) x_s0 + (1 - s / s0) x_0`` for ``s`` in ``(0, s0]``, velocity target ``(x_s0 - x_0) / s0``. This is
rectified flow towards ``x_0`` with the noise ``e + (1 - s0) / s0 (source - x_0)`` (a shift where the edit is), so the
clean-image estimate ``x - s v`` of the SDE sampler is the edited scene. Plain rectified flow on edited scenes alone
(SDEdit) does not edit: started from the noised source, the model redraws the source (held-out accuracy 0.0 after
600 steps). All transformer and text-encoder weights train (AdamW, linear warm-up), one CPU thread,
seeded::

    python scripts/pretrain_demo_edit.py --steps 600 --out genalign/assets/shapes-edit

The editing demo's model ``genalign/assets/shapes-edit-weak`` continues that model with a systematic flaw: every
target *under-edited*, the edit applied only 40 % of the way (``--p-under``, ``--applied``; see
:func:`training_batch`), so that one consistent direction ("apply the edit fully") is what reinforcement learning has
to find (read its model card)::

    python scripts/pretrain_demo_edit.py --init-from genalign/assets/shapes-edit --p-under 1.0 --applied 0.4 \
        --steps 800 --out genalign/assets/shapes-edit-weak

The held-out accuracy it prints (and writes to ``pretrain_report.json``) is the ``shapes_edit`` verifier without
kinds (``match_kind: false``, as the demo measures it: kinds are poorly drawn by ``shapes-t2i``), on 64 held-out rows,
ODE sampling with 10 steps at strength 0.6, guidance 1.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
import torch.nn.functional as F

from genalign.data.shapes import render
from genalign.data.shapes_edit import EDITS, edit_split, render_target, sample_edit, shapes_edit_rows
from genalign.rewards.image_edit import ShapesEdit

IMAGE_SIZE = 32
MAX_SEQUENCE_LENGTH = 1  # one zero "T5" token, as shapes-t2i was trained


def training_batch(
    rng: np.random.Generator,
    n: int,
    *,
    p_under: float = 0.0,
    applied: float = 0.3,
    mistake_rng: np.random.Generator | None = None,
) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    """``n`` train-split edits: instructions, source and edited images ``[n, 3, 32, 32]`` in [-1, 1].

    With probability ``p_under`` (drawn from ``mistake_rng``, independently of the edit) the target is *under-edited*:
    ``source + applied (edited - source)``, the edit only ``applied`` of the way done (0.3 leaves every edit kind
    failing the verifier: a recoloured shape keeps a colour nearest its old one, an added shape is too pale to be
    found, a removed one is still found). The instruction does not say so."""
    prompts, sources, targets = [], [], []
    while len(prompts) < n:
        drawn = sample_edit(rng, EDITS[int(rng.integers(len(EDITS)))], size=IMAGE_SIZE)
        if edit_split(drawn) != "train":  # as shapes_edit_rows splits: held-out rows are never seen
            continue
        prompts.append(drawn["instruction"])
        source = np.asarray(render(drawn["source"])).astype(np.float32)
        target = np.asarray(render_target(drawn["edit"])).astype(np.float32)
        if p_under and mistake_rng is not None and mistake_rng.random() < p_under:
            target = source + applied * (target - source)
        sources.append(source)
        targets.append(target)

    def pixels(images: list[np.ndarray]) -> torch.Tensor:
        return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2) / 127.5 - 1.0

    return prompts, pixels(sources), pixels(targets)


def start_sigma(pipe, *, steps: int, strength: float) -> float:
    """The first sigma of an image-to-image run of ``steps`` steps at ``strength`` (genalign's sampler schedule)."""
    from genalign.pipelines.flow import FlowLogProbPipeline

    sampler = FlowLogProbPipeline(pipe, architecture="sd3_img2img", strength=strength)
    sampler.set_schedule(steps, torch.zeros(1, 3, IMAGE_SIZE, IMAGE_SIZE))
    return float(sampler.scheduler.sigmas[0])


def encode(pipe, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    embeds, _, pooled, _ = pipe.encode_prompt(prompt=prompts, prompt_2=None, prompt_3=None,
                                              do_classifier_free_guidance=False,
                                              max_sequence_length=MAX_SEQUENCE_LENGTH, device=torch.device("cpu"))  # fmt: skip
    return embeds, pooled


@torch.no_grad()
def heldout_accuracy(pipe, *, rows: int, strength: float, steps: int, seed: int) -> dict:
    """The ``shapes_edit`` verifier (colours and places; and with kinds) on ``rows`` held-out edits, ODE sampling."""
    from genalign.pipelines.flow import FlowLogProbPipeline

    sampler = FlowLogProbPipeline(pipe, architecture="sd3_img2img", strength=strength)
    data = shapes_edit_rows(rows, seed, split="eval")
    prompts, sources = [r["prompt"] for r in data], [r["image"] for r in data]
    out = sampler(prompts, source_images=sources, num_inference_steps=steps, guidance_scale=1.0, height=IMAGE_SIZE,
                  width=IMAGE_SIZE, max_sequence_length=MAX_SEQUENCE_LENGTH, noise_level=0.0,
                  generator=torch.Generator().manual_seed(seed))  # fmt: skip
    columns = {"edit": [r["edit"] for r in data], "image": sources}
    colour = np.asarray(ShapesEdit(match_kind=False)(prompts, out.outputs, **columns))
    kinds = np.asarray(ShapesEdit()(prompts, out.outputs, **columns))
    by_edit = {e: round(float(colour[[r["edit_kind"] == e for r in data]].mean()), 3) for e in EDITS}
    return {"accuracy": float(colour.mean()), "kind_aware_accuracy": float(kinds.mean()), "by_edit": by_edit}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--init-from", type=Path, default=Path("genalign/assets/shapes-t2i"))
    parser.add_argument("--out", type=Path, default=Path("genalign/assets/shapes-edit"))
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--strength", type=float, default=0.6, help="of the image-to-image runs it is made for")
    parser.add_argument("--sampling-steps", type=int, default=10, help="of the image-to-image runs it is made for")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--eval-rows", type=int, default=64)
    parser.add_argument("--p-under", type=float, default=0.0, help="share of under-edited training targets")
    parser.add_argument("--applied", type=float, default=0.3, help="how much of the edit those targets apply")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    from diffusers import StableDiffusion3Pipeline

    pipe = StableDiffusion3Pipeline.from_pretrained(args.init_from, text_encoder_3=None, tokenizer_3=None)
    pipe.set_progress_bar_config(disable=True)
    report: dict = {"args": {k: str(v) for k, v in vars(args).items()}}
    evaluate = lambda: heldout_accuracy(  # noqa: E731
        pipe, rows=args.eval_rows, strength=args.strength, steps=args.sampling_steps, seed=1234
    )
    s0 = start_sigma(pipe, steps=args.sampling_steps, strength=args.strength)
    report["start_sigma"] = s0
    report["before"] = evaluate()
    print(f"[edit] before {report['before']}", flush=True)
    rng, generator = np.random.default_rng(args.seed), torch.Generator().manual_seed(args.seed + 1)
    mistake_rng = np.random.default_rng(args.seed + 2)  # a stream of its own: --p-under 0 draws as before
    params = [*pipe.transformer.parameters(), *pipe.text_encoder.parameters(), *pipe.text_encoder_2.parameters()]
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / args.warmup))
    vae = pipe.vae
    started = time.time()
    for step in range(args.steps):
        pipe.transformer.train()
        prompts, sources, targets = training_batch(
            rng, args.batch, p_under=args.p_under, applied=args.applied, mistake_rng=mistake_rng
        )
        source, x0 = ((p - vae.config.shift_factor) * vae.config.scaling_factor for p in (sources, targets))
        noise = torch.randn(x0.shape, generator=generator)  # [B, 3, 32, 32]; identity VAE: latents are pixels
        start = (1 - s0) * source + s0 * noise  # the noised source an image-to-image run starts from
        sigma = s0 * torch.rand(args.batch, generator=generator).clamp_min(1e-3)  # [B] in (0, s0]
        s = (sigma / s0).view(-1, 1, 1, 1)
        embeds, pooled = encode(pipe, prompts)
        v = pipe.transformer(hidden_states=s * start + (1 - s) * x0, timestep=sigma * 1000,
                             encoder_hidden_states=embeds, pooled_projections=pooled).sample  # fmt: skip
        loss = F.mse_loss(v, (start - x0) / s0)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        if step % args.log_every == 0:
            print(f"[edit] step {step} loss {loss.item():.4f} time {time.time() - started:.0f}s", flush=True)
    pipe.transformer.eval()
    report["train_seconds"] = round(time.time() - started, 1)
    report["heldout"] = evaluate()
    print(json.dumps(report, indent=1), flush=True)
    pipe.save_pretrained(args.out)
    (args.out / "pretrain_report.json").write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
