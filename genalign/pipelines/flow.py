"""Generation with per-step log-probabilities for diffusers flow-matching pipelines (SD3, FLUX.1, Wan2.1).

Usable without training::

    pipe = FlowLogProbPipeline.from_pretrained("path/to/sd3", torch_dtype=torch.bfloat16, device="cuda")
    out = pipe(["two red circles"], num_inference_steps=10, guidance_scale=4.5, height=512, width=512)
    out.outputs[0].save("sample.png"); out.log_probs  # [N, S]

The denoising loop reads as diffusers' ``__call__`` does (encode -> prepare latents -> timesteps -> denoise -> decode);
each step is :meth:`FlowSDEScheduler.step`, the same function that :func:`score_transitions` evaluates on stored
latents, so re-scoring a trajectory with unchanged parameters reproduces its log-probabilities exactly (Flow-GRPO [319]).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from diffusers.pipelines.pipeline_utils import DiffusionPipeline
from torch import Tensor, nn

from genalign.pipelines.architectures.base import (
    FlowArchitecture,
    PromptEmbeddings,
    SourceConditioning,
    architecture_for,
    join_sources,
)
from genalign.schedulers.flow_sde import FlowSDEScheduler
from genalign.schedulers.ode_solvers import ODE_SOLVERS, OdeSolverName
from genalign.schedulers.sde_dynamics import LogProbForm, LogProbReduction

OdeSolver = OdeSolverName


@dataclass
class FlowTrajectory:
    """A batch of denoising trajectories.

    Attributes:
        latents: ``[N, S + 1, ...]`` float32 states ``x_0`` (noise) ... ``x_S`` (final); None when not recorded.
        log_probs: ``[N, S]`` float32 log-probability of each transition (0 on deterministic steps).
        stochastic: ``[N, S]`` bool, True where the transition was sampled with ``std > 0``.
        final: ``[N, ...]`` float32 final latents.
        timesteps: ``[S]`` the schedule's timesteps (sigma x 1000).
    """

    latents: Tensor | None
    log_probs: Tensor
    stochastic: Tensor
    final: Tensor
    timesteps: Tensor


@dataclass
class FlowGenerationOutput:
    """``outputs``: ``[N]`` PIL images or ``[F, H, W, 3]`` uint8 videos; ``trajectory``: the latents and log-probs."""

    outputs: list[Any]
    trajectory: FlowTrajectory

    @property
    def log_probs(self) -> Tensor:
        return self.trajectory.log_probs


class NonFiniteLatentsError(FloatingPointError):
    """Raised when a denoising step produces NaN/inf latents; the message names the step and the samples."""


def check_finite(latents: Tensor, *, step: int, prompts: list[str] | None = None) -> None:
    """Raise :class:`NonFiniteLatentsError` naming ``step`` and the bad samples if ``latents`` ``[B, ...]`` has NaN/inf."""
    finite = torch.isfinite(latents.flatten(1)).all(dim=1)  # [B]
    if bool(finite.all()):
        return
    bad = (~finite).nonzero().flatten().tolist()
    named = [f"{i} ({prompts[i]!r})" for i in bad[:5]] if prompts else [str(i) for i in bad[:5]]
    raise NonFiniteLatentsError(
        f"non-finite latents after denoising step {step} for sample(s) {', '.join(named)}"
        f"{' and more' if len(bad) > 5 else ''} of {latents.shape[0]}. Check the learning rate, the dtype "
        "(float16 overflows; use bfloat16 or float32) and the noise level."
    )


def guided_velocity(
    arch: FlowArchitecture,
    transformer: nn.Module,
    latents: Tensor,
    timestep: Tensor,
    cond: PromptEmbeddings,
    uncond: PromptEmbeddings | None,
    *,
    guidance_scale: float,
) -> Tensor:
    """Velocity ``[B, ...]`` with classifier-free guidance; the unconditional branch never carries gradient.

    With ``uncond`` None (FLUX.1, or guidance 1) it is the conditional prediction (FLUX passes ``guidance_scale`` to its
    guidance embedding). The same function runs in rollout (no grad) and training, so both see identical numerics.
    With ``arch.batch_cfg`` both branches run in one call on ``[2B, ...]`` (as diffusers batches them): one call of
    twice the batch instead of two, cheaper where a call's fixed cost dominates (small batches, GPUs); in training the
    unconditional half is detached (no gradient reaches it, but the backward pass runs over the doubled batch).
    """
    if uncond is None or not arch.uses_true_cfg or guidance_scale == 1.0:
        return arch.velocity(transformer, latents, timestep, cond, guidance=guidance_scale)  # [B, ...]
    if arch.batch_cfg:
        both = {key: torch.cat([cond[key], uncond[key]]) for key in cond}  # [2B, ...] per key
        velocity = arch.velocity(
            transformer, torch.cat([latents, latents]), torch.cat([timestep, timestep]), both, guidance=guidance_scale
        )  # [2B, ...]
        v_cond, v_uncond = velocity.chunk(2)
        v_uncond = v_uncond.detach()
    else:
        v_cond = arch.velocity(transformer, latents, timestep, cond, guidance=guidance_scale)  # [B, ...]
        with torch.no_grad():
            v_uncond = arch.velocity(transformer, latents, timestep, uncond, guidance=guidance_scale)  # [B, ...]
    return arch.combine_guidance(v_cond, v_uncond, guidance_scale)


def denoise(
    arch: FlowArchitecture,
    transformer: nn.Module,
    scheduler: FlowSDEScheduler,
    latents: Tensor,
    cond: PromptEmbeddings,
    uncond: PromptEmbeddings | None,
    *,
    guidance_scale: float,
    sde_mask: Tensor,
    noise_level: float | Tensor,
    generator: torch.Generator | None,
    record_latents: bool,
    ode_solver: OdeSolver = "euler",
    prompts: list[str] | None = None,
    noises: Tensor | None = None,
) -> FlowTrajectory:
    """Run the denoising loop from noise ``latents`` ``[N, ...]`` (``scheduler.set_timesteps`` already called).

    Args:
        sde_mask: ``[N, S]`` bool; stochastic steps use ``noise_level``, the others are ODE steps.
        noise_level: one level for every stochastic step, or ``[S]`` one per step (calibrated exploration noise).
        ode_solver: solver of the deterministic steps (:mod:`genalign.schedulers.ode_solvers`): ``"euler"``, or
            ``"ab2"`` (second-order Adams-Bashforth on the velocity, no extra model call; MixGRPO-Flash style). Per
            sample, a step whose transition and previous transition are both deterministic uses the solver; every
            other step (stochastic steps, and the first ODE step after one) is the scheduler's step, unchanged.
        noises: ``[N, S, ...]`` standard-normal noise of each step, used instead of drawing from ``generator``
            (replays a branch of a trajectory tree as an independent rollout).
    """
    num_steps = len(scheduler.timesteps)
    if sde_mask.shape != (latents.shape[0], num_steps):
        raise ValueError(f"sde_mask has shape {tuple(sde_mask.shape)}, expected {(latents.shape[0], num_steps)}.")
    check_finite(latents, step=-1, prompts=prompts)
    sde_mask = sde_mask.to(latents.device)
    solver = None if ode_solver == "euler" else ODE_SOLVERS.get(ode_solver)
    states = [latents] if record_latents else []
    log_probs, stochastic = [], []
    previous_velocity: Tensor | None = None
    x = latents
    for i in range(num_steps):
        timestep = scheduler.timesteps[i].expand(x.shape[0]).to(x.device)  # [N]
        velocity = guided_velocity(arch, transformer, x, timestep, cond, uncond, guidance_scale=guidance_scale)
        level = noise_level[i] if isinstance(noise_level, Tensor) else noise_level
        levels = sde_mask[:, i].float() * level  # [N]
        out = scheduler.step(
            velocity,
            scheduler.timesteps[i],
            x,
            step_index=i,
            noise_level=levels,
            generator=generator,
            noise=None if noises is None else noises[:, i].to(device=x.device, dtype=torch.float32),
        )
        x_next, log_prob = out.prev_sample, out.log_prob
        std_positive = out.std.flatten(1)[:, 0] > 0  # [N]
        if solver is not None and i > 0:
            x_next = _solve_ode_steps(solver, scheduler.sigmas, i, x, velocity, previous_velocity, x_next,
                                      use=~std_positive & ~stochastic[-1].to(std_positive.device))  # fmt: skip
        check_finite(x_next, step=i, prompts=prompts)
        previous_velocity = velocity
        log_probs.append(log_prob)
        stochastic.append(std_positive.to(x.device))
        x = x_next
        if record_latents:
            states.append(x)
    return FlowTrajectory(
        latents=torch.stack(states, dim=1) if record_latents else None,  # [N, S + 1, ...]
        log_probs=torch.stack(log_probs, dim=1).float(),  # [N, S]
        stochastic=torch.stack(stochastic, dim=1),  # [N, S]
        final=x,
        timesteps=scheduler.timesteps,
    )


@torch.no_grad()
def ode_complete(
    arch: FlowArchitecture,
    transformer: nn.Module,
    scheduler: FlowSDEScheduler,
    latents: Tensor,
    start_step: int,
    cond: PromptEmbeddings,
    uncond: PromptEmbeddings | None,
    *,
    guidance_scale: float,
) -> Tensor:
    """Finish trajectories from state ``start_step`` (``latents`` ``[n, ...]`` = ``x_start``) with deterministic ODE
    steps to the end of the schedule; returns the clean prediction ``[n, ...]`` (DenseGRPO [148] scores it)."""
    x = latents
    for i in range(start_step, len(scheduler.timesteps)):
        timestep = scheduler.timesteps[i].expand(x.shape[0]).to(x.device)  # [n]
        velocity = guided_velocity(arch, transformer, x, timestep, cond, uncond, guidance_scale=guidance_scale)
        x = scheduler.step(velocity, None, x, step_index=i, noise_level=0.0).prev_sample  # [n, ...]
    return x


def concat_trajectories(pieces: list[FlowTrajectory]) -> FlowTrajectory:
    """Join trajectories of consecutive sample chunks (same schedule) along the sample axis."""
    return FlowTrajectory(
        latents=None if pieces[0].latents is None else torch.cat([p.latents for p in pieces]),  # [N, S + 1, ...]
        log_probs=torch.cat([p.log_probs for p in pieces]),  # [N, S]
        stochastic=torch.cat([p.stochastic for p in pieces]),  # [N, S]
        final=torch.cat([p.final for p in pieces]),  # [N, ...]
        timesteps=pieces[0].timesteps,
    )


def _solve_ode_steps(
    solver: Any,
    sigmas: Tensor,
    i: int,
    x: Tensor,
    velocity: Tensor,
    previous_velocity: Tensor,
    scheduler_next: Tensor,
    *,
    use: Tensor,
) -> Tensor:
    """Step ``i`` of the samples selected by ``use`` ``[N]`` (deterministic now and at step ``i - 1``) with ``solver``;
    the others keep ``scheduler_next`` ``[N, ...]`` bit for bit."""
    if not bool(use.any()):
        return scheduler_next
    n = x.shape[0]
    sigma, sigma_next, sigma_prev = (sigmas[k].to(x.device).float().expand(n) for k in (i, i + 1, i - 1))  # [N]
    solved = solver(
        x.float(), velocity.float(), sigma, sigma_next,
        previous_velocity=previous_velocity.float(), previous_sigma=sigma_prev,
    ).to(scheduler_next.dtype)  # fmt: skip
    keep = use.to(x.device).reshape(n, *([1] * (x.dim() - 1)))  # [N, 1, ...]
    return torch.where(keep, solved, scheduler_next)  # [N, ...]


class FlowLogProbPipeline:
    """A diffusers flow-matching pipeline whose sampling records per-step log-probabilities.

    Args:
        pipe: a loaded ``StableDiffusion3Pipeline``, ``FluxPipeline`` or ``WanPipeline``.
        architecture: ``"auto"`` (from the pipeline class) or a name of :data:`~genalign.pipelines.architectures.FLOW_ARCHITECTURES`.
        dynamics, noise_level, log_prob_reduction, log_prob_form: defaults of the :class:`FlowSDEScheduler` built from the
            pipeline's own sigma schedule.
        strength: image-to-image only (``arch.source_role == "initial_latents"``): how far the source is noised; the
            schedule of ``S`` steps skips its first ``S - int(S * strength)`` (diffusers' ``get_timesteps``).
    """

    def __init__(
        self,
        pipe: DiffusionPipeline,
        *,
        architecture: str = "auto",
        dynamics: str = "flow_sde",
        noise_level: float = 0.7,
        log_prob_reduction: LogProbReduction = "mean",
        log_prob_form: LogProbForm = "gaussian",
        strength: float = 1.0,
    ) -> None:
        self.pipe = pipe
        self.arch = architecture_for(pipe, architecture)
        #: the module the velocity is computed with (the transformer; Wan2.2 A14B: both experts)
        self.transformer = self.arch.denoiser(pipe)
        if strength != 1.0 and self.arch.source_role != "initial_latents":
            raise ValueError(
                f"strength={strength} applies to image-to-image architectures only; {self.arch.name!r} starts from "
                "noise: set policy.strength to 1.0 or use architecture sd3_img2img."
            )
        if not 0.0 < strength <= 1.0:
            raise ValueError(f"strength={strength} must be in (0, 1] (1 = start from pure noise).")
        self.strength = strength
        config = self.arch.scheduler_config(pipe)
        config |= {"dynamics": dynamics, "noise_level": noise_level, "log_prob_reduction": log_prob_reduction}
        config |= {"log_prob_form": log_prob_form}
        self.scheduler = FlowSDEScheduler.from_config(config)

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        torch_dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        **kwargs: Any,
    ) -> FlowLogProbPipeline:
        """Load a diffusers folder (never downloads when ``HF_HUB_OFFLINE=1``) and wrap it."""
        if not Path(path).exists():
            raise FileNotFoundError(
                f"model path {str(path)!r} does not exist; pass a local diffusers folder (with model_index.json)."
            )
        pipe = DiffusionPipeline.from_pretrained(str(path), torch_dtype=torch_dtype, **_absent_components(Path(path)))
        pipe.set_progress_bar_config(disable=True)
        return cls(pipe.to(device), **kwargs)

    @property
    def device(self) -> torch.device:
        return next(self.transformer.parameters()).device

    @torch.no_grad()
    def encode(
        self, prompts: list[str], *, negative_prompt: str = "", max_sequence_length: int = 128
    ) -> tuple[PromptEmbeddings, PromptEmbeddings | None]:
        """Conditional and unconditional embeddings ``[B, ...]`` of ``prompts``."""
        return self.arch.encode(
            self.pipe,
            prompts,
            negative_prompt=negative_prompt,
            max_sequence_length=max_sequence_length,
            device=self.device,
        )

    def prepare(
        self,
        batch_size: int,
        *,
        height: int,
        width: int,
        num_frames: int,
        num_inference_steps: int,
        generator: torch.Generator,
    ) -> Tensor:
        """Initial noise ``[B, ...]`` and ``scheduler.set_timesteps`` for ``num_inference_steps`` (dynamic shift aware)."""
        latents = self.arch.initial_latents(
            self.pipe, batch_size, height=height, width=width, num_frames=num_frames, generator=generator
        ).to(self.device)
        self.set_schedule(num_inference_steps, latents)
        return latents

    def set_schedule(self, num_inference_steps: int, latents: Tensor) -> None:
        """``scheduler.set_timesteps`` for latents shaped like ``latents`` ``[B, ...]`` (dynamic shift needs the size).

        With dynamic shifting, and always for architectures with ``linear_sigmas`` (FLUX.1, FLUX.2, Qwen-Image), the base
        sigmas are ``1, 1 - 1/S, ..., 1/S`` as in diffusers' FLUX pipeline.
        """
        mu = self.arch.schedule_mu(self.pipe, latents, num_steps=num_inference_steps)
        linear = mu is not None or self.arch.linear_sigmas
        sigmas = [1.0 - k / num_inference_steps for k in range(num_inference_steps)] if linear else None
        self.scheduler.set_timesteps(num_inference_steps, device=self.device, sigmas=sigmas, mu=mu)
        skipped = skipped_steps(num_inference_steps, self.strength)
        if skipped:
            self.scheduler.skip_first(skipped)

    @torch.no_grad()
    def encode_sources(self, images: list[Any], *, height: int, width: int, num_frames: int) -> SourceConditioning:
        """The architecture's conditioning ``{name: [B, ...]}`` of ``B`` RGB source images."""
        return self.arch.encode_sources(
            self.pipe, images, height=height, width=width, num_frames=num_frames, device=self.device
        )

    @torch.no_grad()
    def encode_with_sources(
        self,
        prompts: list[str],
        images: list[Any],
        *,
        negative_prompt: str = "",
        max_sequence_length: int = 128,
        height: int,
        width: int,
    ) -> tuple[PromptEmbeddings, PromptEmbeddings | None]:
        """Conditional and unconditional embeddings ``[B, ...]`` of ``prompts`` read with their source ``images``
        (architectures whose text encoder reads the source: ``arch.source_in_prompt``), one prompt per encoder call,
        so that an embedding does not depend on the other rows of its batch."""
        pairs = [
            self.arch.encode_with_sources(
                self.pipe,
                [prompt],
                [image],
                negative_prompt=negative_prompt,
                max_sequence_length=max_sequence_length,
                height=height,
                width=width,
                device=self.device,
            )
            for prompt, image in zip(prompts, images, strict=True)
        ]
        cond = {key: torch.cat([c[key] for c, _ in pairs]) for key in pairs[0][0]}
        uncond = None if pairs[0][1] is None else {key: torch.cat([u[key] for _, u in pairs]) for key in pairs[0][1]}
        return cond, uncond

    @torch.no_grad()
    def decode(self, latents: Tensor, *, height: int, width: int) -> list[Any]:
        return self.arch.decode(self.pipe, latents, height=height, width=width)

    @torch.no_grad()
    def __call__(
        self,
        prompts: list[str],
        *,
        num_inference_steps: int = 10,
        guidance_scale: float = 4.5,
        height: int = 512,
        width: int = 512,
        num_frames: int = 1,
        negative_prompt: str = "",
        max_sequence_length: int = 128,
        sde_mask: Tensor | None = None,
        noise_level: float | None = None,
        generator: torch.Generator | None = None,
        record_latents: bool = False,
        ode_solver: OdeSolver = "euler",
        source_images: list[Any] | None = None,
    ) -> FlowGenerationOutput:
        """Generate one output per prompt with per-step log-probabilities (numbered stages as in diffusers).

        ``sde_mask`` ``[N, S']`` selects stochastic steps (default: all; ``S' = S`` except for image-to-image, which
        skips the first steps); ``noise_level`` 0 gives plain ODE sampling. ``source_images``: one RGB image per prompt
        for architectures that take one (image-to-image, editing, image-to-video).
        """
        if not prompts or not all(isinstance(p, str) for p in prompts):
            raise ValueError(f"prompts must be a non-empty list of strings, got {prompts!r}.")
        generator = generator or torch.Generator(self.device).manual_seed(0)
        # 1. encode the prompts (with their source images when the text encoder reads them) and the source images
        sources = None
        if source_images is not None and len(source_images) != len(prompts):
            raise ValueError(
                f"source_images has {len(source_images)} images for {len(prompts)} prompts; give one each."
            )
        if source_images is not None and self.arch.source_in_prompt:
            cond, uncond = self.encode_with_sources(prompts, source_images, negative_prompt=negative_prompt,
                                                    max_sequence_length=max_sequence_length, height=height,
                                                    width=width)  # fmt: skip
        else:
            cond, uncond = self.encode(
                prompts, negative_prompt=negative_prompt, max_sequence_length=max_sequence_length
            )
        if source_images is not None:
            sources = self.encode_sources(source_images, height=height, width=width, num_frames=num_frames)
            cond, uncond = join_sources(cond, sources), join_sources(uncond, sources)
        # 2. initial latents and 3. timesteps
        latents = self.prepare(
            len(prompts),
            height=height,
            width=width,
            num_frames=num_frames,
            num_inference_steps=num_inference_steps,
            generator=generator,
        )
        latents = self.arch.start_latents(self.scheduler, latents, sources)
        steps = len(self.scheduler.timesteps)
        mask = torch.ones(len(prompts), steps, dtype=torch.bool) if sde_mask is None else sde_mask
        # 4. denoising loop
        trajectory = denoise(
            self.arch,
            self.transformer,
            self.scheduler,
            latents,
            cond,
            uncond,
            guidance_scale=guidance_scale,
            sde_mask=mask,
            noise_level=self.scheduler.config.noise_level if noise_level is None else noise_level,
            generator=generator,
            record_latents=record_latents,
            ode_solver=ode_solver,
            prompts=prompts,
        )
        # 5. decode
        return FlowGenerationOutput(
            outputs=self.decode(self.arch.output_latents(trajectory.final, cond), height=height, width=width),
            trajectory=trajectory,
        )


def skipped_steps(num_inference_steps: int, strength: float) -> int:
    """Steps an image-to-image schedule of ``num_inference_steps`` skips at ``strength`` (diffusers' ``get_timesteps``:
    ``t_start = int(max(S - min(S * strength, S), 0))``); a ValueError when none would remain."""
    skipped = int(max(num_inference_steps - min(num_inference_steps * strength, num_inference_steps), 0))
    if skipped >= num_inference_steps:
        raise ValueError(
            f"strength={strength} with {num_inference_steps} steps leaves no denoising step; raise policy.strength "
            f"to at least {1 / num_inference_steps:.3g} or use more steps."
        )
    return skipped


def _absent_components(folder: Path) -> dict[str, None]:
    """``{name: None}`` for components saved as ``[null, null]`` in ``model_index.json``.

    diffusers writes an absent optional component (e.g. SD3 without its T5 encoder) that way but refuses to load the
    folder unless the component is passed explicitly as None.
    """
    index_file = folder / "model_index.json"
    if not index_file.exists():
        raise FileNotFoundError(f"{str(index_file)!r} does not exist; pass a diffusers pipeline folder.")
    index = json.loads(index_file.read_text())
    return {name: None for name, value in index.items() if isinstance(value, list) and value == [None, None]}
