"""A flow-matching scheduler whose ``step()`` is a stochastic transition with a log-probability.

Follows diffusers' scheduler contract (``set_timesteps()`` then ``step()`` per timestep, configuration recorded with
``register_to_config`` so ``FlowSDEScheduler.from_config(pipe.scheduler.config)`` swaps it into any flow-matching
pipeline). The sigma schedule (shift, dynamic shift with ``mu``, terminal shift) is the one of diffusers'
``FlowMatchEulerDiscreteScheduler``, reused rather than re-derived.

``step(..., prev_sample=given)`` scores a stored transition instead of sampling one, so rollout and training evaluate
the same function: with unchanged parameters the scored log-probability equals the rollout's bit for bit (Flow-GRPO
[319]).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.schedulers.scheduling_utils import SchedulerMixin
from diffusers.utils import BaseOutput
from torch import Tensor

from genalign.schedulers.sde_dynamics import SDE_DYNAMICS, LogProbForm, LogProbReduction, step_log_prob


@dataclass
class FlowSDESchedulerOutput(BaseOutput):
    """One transition ``x_t -> x_{t-1}``.

    Attributes:
        prev_sample: ``[B, ...]`` the next latent (sampled, or the given ``prev_sample``), dtype of ``sample``.
        mean: ``[B, ...]`` float32 transition mean (carries the gradient of the model output).
        std: ``[B, 1, ...]`` float32 transition standard deviation (0 for deterministic steps).
        log_prob: ``[B]`` float32 log-probability of ``prev_sample`` (element mean or sum; the Gaussian log-density or
            Flow-GRPO's published CPS form, see ``log_prob_form``).
    """

    prev_sample: Tensor
    mean: Tensor
    std: Tensor
    log_prob: Tensor


class FlowSDEScheduler(SchedulerMixin, ConfigMixin):
    """Rectified-flow sampler with registered ODE/SDE dynamics and per-step Gaussian log-probabilities.

    Args:
        num_train_timesteps, shift, use_dynamic_shifting, base_shift, max_shift, base_image_seq_len, max_image_seq_len,
            shift_terminal, time_shift_type, use_karras_sigmas, use_exponential_sigmas, use_beta_sigmas: the sigma
            schedule, with the meaning of ``FlowMatchEulerDiscreteScheduler``.
        invert_sigmas: accepted so that Euler configs load; True raises (not a rectified-flow sampling direction).
        dynamics: registered dynamics used when ``step`` is not told otherwise (``ode``, ``flow_sde``, ``dance_sde``,
            ``cps``; see :mod:`genalign.schedulers.sde_dynamics`).
        noise_level: default strength of the dynamics (``a`` ≈ 0.7 for ``flow_sde``, ``eta`` ≈ 0.3 for ``dance_sde``).
        log_prob_reduction: ``"mean"`` over latent elements (reference implementations) or ``"sum"``.
        log_prob_form: ``"gaussian"`` (default: the Gaussian log-density) or ``"squared_error"`` (Flow-GRPO's
            published CPS code: ``−(x' − mean)²`` with every constant, ``1 / (2 std²)`` included, dropped; its ratio is
            the Gaussian ratio raised to ``2 std²``, which changes what a clip range means, see
            :func:`~genalign.schedulers.sde_dynamics.squared_error_log_prob`).
    """

    _compatibles = ["FlowMatchEulerDiscreteScheduler"]
    order = 1

    @register_to_config
    def __init__(
        self,
        num_train_timesteps: int = 1000,
        shift: float = 1.0,
        use_dynamic_shifting: bool = False,
        base_shift: float | None = 0.5,
        max_shift: float | None = 1.15,
        base_image_seq_len: int = 256,
        max_image_seq_len: int = 4096,
        shift_terminal: float | None = None,
        time_shift_type: Literal["exponential", "linear"] = "exponential",
        use_karras_sigmas: bool = False,
        use_exponential_sigmas: bool = False,
        use_beta_sigmas: bool = False,
        invert_sigmas: bool = False,
        dynamics: str = "flow_sde",
        noise_level: float = 0.7,
        log_prob_reduction: LogProbReduction = "mean",
        log_prob_form: LogProbForm = "gaussian",
    ) -> None:
        SDE_DYNAMICS.get(dynamics)  # fail early with a did-you-mean list
        if invert_sigmas:
            raise ValueError(
                "invert_sigmas=True (sigma running from 0 to 1) is not supported; use invert_sigmas=False."
            )
        if noise_level < 0:
            raise ValueError(f"noise_level={noise_level} must be >= 0 (0 gives the deterministic Euler step).")
        if log_prob_reduction not in ("mean", "sum"):
            raise ValueError(f"log_prob_reduction={log_prob_reduction!r} is not supported; use 'mean' or 'sum'.")
        if log_prob_form not in ("gaussian", "squared_error"):
            raise ValueError(
                f"log_prob_form={log_prob_form!r} is not supported; use 'gaussian' (the Gaussian log-density) or "
                "'squared_error' (Flow-GRPO's published CPS form)."
            )
        self._sigma_schedule = FlowMatchEulerDiscreteScheduler(
            num_train_timesteps=num_train_timesteps,
            shift=shift,
            use_dynamic_shifting=use_dynamic_shifting,
            base_shift=base_shift,
            max_shift=max_shift,
            base_image_seq_len=base_image_seq_len,
            max_image_seq_len=max_image_seq_len,
            shift_terminal=shift_terminal,
            time_shift_type=time_shift_type,
            use_karras_sigmas=use_karras_sigmas,
            use_exponential_sigmas=use_exponential_sigmas,
            use_beta_sigmas=use_beta_sigmas,
        )
        self.timesteps: Tensor = self._sigma_schedule.timesteps.clone()  # [num_train_timesteps]
        self.sigmas: Tensor = self._sigma_schedule.sigmas.clone()  # [num_train_timesteps + 1]
        self.init_noise_sigma = 1.0
        self.num_inference_steps: int | None = None
        self._step_index: int | None = None
        self._begin_index: int | None = None

    # ----------------------------------------------------------------------------------------------- schedule
    def set_timesteps(
        self,
        num_inference_steps: int | None = None,
        device: str | torch.device | None = None,
        sigmas: list[float] | None = None,
        mu: float | None = None,
        timesteps: list[float] | None = None,
    ) -> None:
        """Set the ``num_inference_steps`` sigmas (``self.sigmas`` gets a trailing 0) and timesteps (sigma x 1000)."""
        self._sigma_schedule.set_timesteps(
            num_inference_steps=num_inference_steps, device=device, sigmas=sigmas, mu=mu, timesteps=timesteps
        )
        self.timesteps = self._sigma_schedule.timesteps  # [S]
        self.sigmas = self._sigma_schedule.sigmas.float()  # [S + 1], float32 whatever the model dtype
        self.num_inference_steps = len(self.timesteps)
        self._step_index = None
        self._begin_index = None

    def skip_first(self, steps: int) -> None:
        """Drop the first ``steps`` steps of the current schedule, which then starts at the old ``sigmas[steps]``
        (image-to-image: diffusers' ``get_timesteps`` with ``t_start = steps``)."""
        if not 0 <= steps < len(self.timesteps):
            raise ValueError(f"cannot skip {steps} of {len(self.timesteps)} steps; at least one step must remain.")
        self.timesteps = self.timesteps[steps:]  # [S - steps]
        self.sigmas = self.sigmas[steps:]  # [S - steps + 1]
        self.num_inference_steps = len(self.timesteps)

    @property
    def step_index(self) -> int | None:
        return self._step_index

    @property
    def begin_index(self) -> int | None:
        return self._begin_index

    def set_begin_index(self, begin_index: int = 0) -> None:
        self._begin_index = begin_index

    def index_for_timestep(self, timestep: float | Tensor) -> int:
        """Position of ``timestep`` in ``self.timesteps``."""
        matches = (self.timesteps == torch.as_tensor(timestep, device=self.timesteps.device)).nonzero()
        if len(matches) == 0:
            raise ValueError(f"timestep={float(timestep)} is not in the schedule; call set_timesteps() first.")
        return int(matches[0].item())

    def scale_noise(self, sample: Tensor, timestep: Tensor, noise: Tensor) -> Tensor:
        """Forward process ``x_sigma = sigma * noise + (1 - sigma) * sample`` (diffusers' img2img contract)."""
        return self._sigma_schedule.scale_noise(sample, timestep, noise)

    # ------------------------------------------------------------------------------------------------- step
    def step(
        self,
        model_output: Tensor,
        timestep: float | Tensor,
        sample: Tensor,
        *,
        step_index: int | Tensor | None = None,
        prev_sample: Tensor | None = None,
        noise_level: float | Tensor | None = None,
        dynamics: str | None = None,
        generator: torch.Generator | None = None,
        noise: Tensor | None = None,
        return_dict: bool = True,
    ) -> FlowSDESchedulerOutput | tuple[Tensor, Tensor, Tensor, Tensor]:
        """Sample (or, with ``prev_sample``, score) one transition from ``sample`` at ``timestep``.

        Args:
            model_output: ``[B, ...]`` predicted velocity.
            timestep: the current timestep (used to find the step when ``step_index`` is not given).
            sample: ``[B, ...]`` current latent ``x_t``.
            step_index: position in the schedule, an int or a ``[B]`` long tensor (one step per sample, used when
                scoring stored trajectories). When omitted the scheduler keeps an internal counter, as diffusers does.
            prev_sample: ``[B, ...]`` a stored next latent to score instead of sampling one.
            noise_level: overrides ``config.noise_level``; a float or ``[B]`` (0 makes that sample's step an ODE step).
            dynamics: overrides ``config.dynamics``.
            generator: random source for the transition noise.
            noise: ``[B, ...]`` standard-normal noise to use instead of drawing it (trajectory trees replay the noise
                of a branch; ignored when ``prev_sample`` is given).
            return_dict: return :class:`FlowSDESchedulerOutput` (else a tuple, ``prev_sample`` first).
        """
        if self.num_inference_steps is None:
            raise ValueError("FlowSDEScheduler.step() was called before set_timesteps(); call set_timesteps() first.")
        uses_counter = step_index is None
        if uses_counter:
            if self._step_index is None:
                self._step_index = (
                    self._begin_index if self._begin_index is not None else self.index_for_timestep(timestep)
                )
            step_index = self._step_index
        index = torch.as_tensor(step_index, dtype=torch.long, device=self.sigmas.device).expand(sample.shape[0])  # [B]
        sigma = self.sigmas[index].to(sample.device)  # [B]
        sigma_next = self.sigmas[index + 1].to(sample.device)  # [B]
        sigma_max = float(self.sigmas[1]) if len(self.sigmas) > 1 else 1.0
        level = self.config.noise_level if noise_level is None else noise_level
        step_fn = SDE_DYNAMICS.get(dynamics or self.config.dynamics)

        sample_f32 = sample.float()
        mean, std = step_fn(
            sample_f32, model_output.float(), sigma.float(), sigma_next.float(), noise_level=level, sigma_max=sigma_max
        )  # [B, ...], [B, 1, ...]
        if prev_sample is None:
            if noise is None:
                noise = torch.randn(sample.shape, generator=generator, device=sample.device, dtype=torch.float32)
            elif noise.shape != sample.shape:
                raise ValueError(f"noise has shape {tuple(noise.shape)} but sample has {tuple(sample.shape)}.")
            next_f32 = mean + std * noise  # [B, ...]
        else:
            if prev_sample.shape != sample.shape:
                raise ValueError(
                    f"prev_sample has shape {tuple(prev_sample.shape)} but sample has {tuple(sample.shape)}; "
                    "pass the stored next latent of the same samples."
                )
            next_f32 = prev_sample.float()
        form, reduction = self.config.log_prob_form, self.config.log_prob_reduction
        log_prob = step_log_prob(next_f32.detach(), mean, std, form=form, reduction=reduction)  # [B]
        if uses_counter:
            self._step_index += 1
        next_sample = next_f32.to(sample.dtype) if prev_sample is None else prev_sample
        if not return_dict:
            return next_sample, mean, std, log_prob
        return FlowSDESchedulerOutput(prev_sample=next_sample, mean=mean, std=std, log_prob=log_prob)

    def __len__(self) -> int:
        return self.config.num_train_timesteps
