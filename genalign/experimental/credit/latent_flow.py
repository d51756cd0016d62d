"""Flow rewards from latent space (RLFR [209]): a small flow-matching velocity field fitted online on the hidden states
of good responses, whose velocity deviation at the policy's latents shapes the token advantages (rule of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`, stateful; experimental tier)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.experimental.credit.model_internals import row_zscores


def unit_rms(latents: Tensor) -> Tensor:
    """``[..., H]`` each latent divided by its root mean square (hidden states of different layers and models live
    on very different scales; the field sees them on one)."""
    return latents / latents.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(1e-6)


class VelocityField(nn.Module):
    """``v(x_τ, τ)``: a two-layer MLP on ``[x_τ, τ]`` ``[n, H + 1]`` -> ``[n, H]``."""

    def __init__(self, size: int, width: int, generator: torch.Generator) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(size + 1, width), nn.SiLU(), nn.Linear(width, size))
        with torch.no_grad():  # seeded initialisation: every process builds the same field
            for parameter in self.parameters():
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.02)

    def forward(self, x: Tensor, tau: Tensor) -> Tensor:
        return self.net(torch.cat([x, tau[:, None]], -1))


def flow_matching_error(field: VelocityField, latents: Tensor, noise: Tensor, tau: Tensor) -> Tensor:
    """``[n]`` ``‖v(x_τ, τ) − (x_1 − x_0)‖² / H`` with ``x_1`` = ``latents`` ``[n, H]``, ``x_0`` = ``noise``,
    ``x_τ = (1 − τ)·x_0 + τ·x_1`` (rectified flow): the velocity deviation of the latents in the field."""
    point = (1 - tau[:, None]) * noise + tau[:, None] * latents
    return (field(point, tau) - (latents - noise)).pow(2).mean(-1)


class LatentFlowReward:
    """The bound option of :func:`latent_flow_reward`: the field, its optimizer and generator (state protocol)."""

    def __init__(self, **hp: Any) -> None:
        self.hp = {**CREDIT_RULES.hyperparameters("latent_flow_reward"), **hp}  # every value, defaults included
        _check(**self.hp)
        self.generator = torch.Generator().manual_seed(int(self.hp["seed"]))
        self.field: VelocityField | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.fits = 0

    def _build(self, size: int) -> None:
        self.field = VelocityField(size, int(self.hp["width"]), self.generator).double()
        self.optimizer = torch.optim.Adam(self.field.parameters(), lr=float(self.hp["lr"]))

    def deviation(self, latents: Tensor) -> Tensor:
        """``[n]`` the mean flow-matching error of ``latents`` ``[n, H]`` over ``probes`` draws of ``(x_0, τ)``."""
        assert self.field is not None
        total = torch.zeros(latents.shape[0], dtype=torch.float64)
        with torch.no_grad():
            for _ in range(int(self.hp["probes"])):
                noise = torch.randn(latents.shape, generator=self.generator, dtype=torch.float64)
                tau = torch.rand(latents.shape[0], generator=self.generator, dtype=torch.float64)
                total += flow_matching_error(self.field, latents, noise, tau)
        return total / int(self.hp["probes"])

    def fit(self, latents: Tensor) -> None:
        """``fit_steps`` Adam steps of the flow-matching loss on ``latents`` ``[m, H]`` (gradients averaged over
        every process, so all keep one field; ``m`` may be 0 on a process)."""
        assert self.field is not None and self.optimizer is not None
        for _ in range(int(self.hp["fit_steps"])):
            noise = torch.randn(latents.shape, generator=self.generator, dtype=torch.float64)
            tau = torch.rand(latents.shape[0], generator=self.generator, dtype=torch.float64)
            self.optimizer.zero_grad()
            with torch.enable_grad():
                error = flow_matching_error(self.field, latents, noise, tau)
                (error.sum() / max(latents.shape[0], 1)).backward()
            _average_gradients(self.field)
            self.optimizer.step()
        self.fits += 1

    def __call__(self, advantages: Tensor, batch: StepBatch) -> Tensor:
        valid = batch.mask.cpu() > 0  # [N, T]
        latents = unit_rms(batch.require("hidden", "credit rule 'latent_flow_reward'").detach().double().cpu())
        if self.field is None:
            self._build(latents.shape[-1])
        result = advantages
        if self.fits > 0:  # the field fitted on earlier steps scores this step's latents
            deviation = torch.zeros(valid.shape, dtype=torch.float64)
            deviation[valid] = self.deviation(latents[valid])
            reward = row_zscores(-deviation.reshape(1, -1), valid.reshape(1, -1)).reshape(valid.shape)  # batch z
            result = advantages + (float(self.hp["weight"]) * reward).to(advantages)
        good = batch.require("combined_reward", "credit rule 'latent_flow_reward'").cpu() >= self.hp["good_reward"]
        pool = latents[valid & good[:, None]]  # [m, H] the latents of the good responses (rejection sampling)
        keep = torch.randperm(pool.shape[0], generator=self.generator)[: int(self.hp["max_latents"])]
        self.fit(pool[keep])
        return result

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"fits": self.fits, "generator": self.generator.get_state()}
        if self.field is not None and self.optimizer is not None:
            field = {name: value.clone() for name, value in self.field.state_dict().items()}
            state |= {"field": field, "optimizer": self.optimizer.state_dict()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.fits = int(state["fits"])
        if "field" in state:  # built first: building draws from the generator, whose state is restored after
            self._build(int(state["field"]["net.2.weight"].shape[0]))
            self.field.load_state_dict(state["field"])
            self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])


def _average_gradients(field: nn.Module) -> None:
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        for parameter in field.parameters():
            grad = parameter.grad if parameter.grad is not None else torch.zeros_like(parameter)
            device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
            moved = grad.to(device)
            dist.all_reduce(moved)
            parameter.grad = moved.cpu() / dist.get_world_size()


def _check(**values: Any) -> None:
    for name in ("width", "fit_steps", "max_latents", "probes"):
        if isinstance(values[name], bool) or not isinstance(values[name], int) or values[name] < 1:
            raise ValueError(f"latent_flow_reward: {name}={values[name]!r} must be an integer >= 1")
    if not (values["weight"] >= 0 and values["lr"] > 0):
        raise ValueError(f"latent_flow_reward: need weight >= 0 and lr > 0, got {values['weight']!r}, {values['lr']!r}")


@CREDIT_RULES.register(
    "latent_flow_reward",
    bind=LatentFlowReward,
    needs=("hidden",),
    formula="v_φ fitted by rectified flow matching on unit-RMS hidden states of good responses (R ≥ r*), online; "
    "d_it = E_{x_0, τ}‖v_φ(x_τ, τ) − (h_it − x_0)‖²/H; A_it ← A_it + w·z_batch(−d_it)",
    source="[209] RLFR (flow rewards from latent space)",
    summary="Token rewards from a flow field fitted online on the latents of good responses: latents that follow "
    "the field (small velocity deviation) are credited, off-flow ones penalised.",
)
def latent_flow_reward(
    advantages: Tensor,
    batch: StepBatch,
    *,
    weight: float = 0.1,
    good_reward: float = 1.0,
    width: int = 64,
    lr: float = 1e-3,
    fit_steps: int = 4,
    max_latents: int = 512,
    probes: int = 2,
    seed: int = 0,
) -> Tensor:
    """RLFR [209]: instead of a process reward model, shape RLVR with *flow rewards* from latent space: a flow field
    of the model's latents is built from high-quality data (on-policy rejection sampling: the hidden states of
    responses whose reward reaches ``good_reward``), and the velocity deviation of the policy's latents within it is
    the reward signal, a token credit that reads context compressed in the hidden states.

    The field is a small MLP trained by rectified flow matching (``x_τ = (1 − τ)x_0 + τx_1``, target ``x_1 − x_0``)
    on unit-RMS latents, ``fit_steps`` Adam steps per training step on at most ``max_latents`` latents; it is kept,
    with its optimizer and random generator, across steps and checkpoints (:class:`LatentFlowReward`, the bound form;
    gradients are averaged over processes so they share one field). A token's deviation is its mean flow-matching
    error over ``probes`` draws of ``(x_0, τ)``, scored by the field as fitted on *earlier* steps (no shaping on the
    first step), standardised over the batch's tokens and added with weight ``w`` (negated: on-flow is good).

    Reading chosen: the field's architecture and training schedule, the unit-RMS normalisation, the batch z-score
    and the additive weight are ours; off-policy expert data would enter as good responses of a sample source.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask``, ``hidden`` ``[N, T, H]`` and ``combined_reward`` ``[N]``.
        weight: ``w >= 0``; good_reward: ``r*``; width: the MLP's hidden width; lr: Adam's step size;
        fit_steps, max_latents, probes: see above (integers >= 1); seed: the field's generator.
    Returns:
        ``[N, T]`` shaped advantages.
    """
    raise ValueError("latent_flow_reward fits its flow field across steps: bind the rule (genalign.algorithms."
                     "bind_option), as a config does")  # fmt: skip
