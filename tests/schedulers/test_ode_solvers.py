"""ODE solvers of the deterministic flow steps: hand-computed steps, convergence orders on a linear velocity field with
a closed-form solution, and in the denoising loop: SDE steps and their log-probs untouched, exact re-scoring."""

import math

import pytest
import torch

from genalign.pipelines.architectures import FlowArchitecture
from genalign.pipelines.flow import denoise
from genalign.policies.flow import FlowPolicyConfig, flow_lora
from genalign.policies.flow.config import TreeRolloutConfig
from genalign.registry import UnknownOptionError
from genalign.schedulers import ODE_SOLVERS, FlowSDEScheduler

A, B = -1.3, torch.tensor([[0.4, -0.7, 1.1]], dtype=torch.float64)  # v(x, sigma) = A x + B
X_START = torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64)  # x at sigma = 1
SIGMA_END = 0.1


def _exact(sigma: float) -> torch.Tensor:
    """Closed form of dx/dsigma = A x + B from X_START at sigma = 1: x = (x1 + B/A) e^{A (sigma - 1)} - B/A."""
    return (X_START + B / A) * math.exp(A * (sigma - 1.0)) - B / A


def _grid(steps: int, shift: float) -> list[float]:
    """sigmas from 1 to SIGMA_END: uniform in t, then the flow shift sigma = s t / (1 + (s - 1) t) (non-uniform)."""
    ts = [1.0 - (1.0 - SIGMA_END) * k / steps for k in range(steps + 1)]
    return [shift * t / (1 + (shift - 1) * t) for t in ts]


def _solve(name: str, steps: int, shift: float = 1.0) -> torch.Tensor:
    solver, sigmas = ODE_SOLVERS.get(name), _grid(steps, shift)
    x, previous = X_START.clone(), None
    for k in range(steps):
        velocity = A * x + B  # [1, 3]
        sigma, sigma_next = torch.tensor([sigmas[k]]), torch.tensor([sigmas[k + 1]])
        prev_sigma = None if previous is None else torch.tensor([sigmas[k - 1]])
        x = solver(x, velocity, sigma, sigma_next, previous_velocity=previous, previous_sigma=prev_sigma)
        previous = velocity
    return x


def test_single_steps_match_the_hand_computed_formulas():
    x = torch.tensor([[1.0, 2.0]])
    v, v_prev = torch.tensor([[0.5, -1.0]]), torch.tensor([[1.0, 0.0]])
    sigma, sigma_next, sigma_prev = torch.tensor([0.6]), torch.tensor([0.3]), torch.tensor([0.8])
    # h = -0.3, r = -0.3 / (0.6 - 0.8) = 1.5: x' = x - 0.3 (1.75 v - 0.75 v_prev)
    ab2 = ODE_SOLVERS.get("ab2")(x, v, sigma, sigma_next, previous_velocity=v_prev, previous_sigma=sigma_prev)
    torch.testing.assert_close(ab2, torch.tensor([[0.9625, 2.525]]))
    euler = ODE_SOLVERS.get("euler")(x, v, sigma, sigma_next, previous_velocity=v_prev, previous_sigma=sigma_prev)
    torch.testing.assert_close(euler, torch.tensor([[0.85, 2.3]]))  # x - 0.3 v
    first = ODE_SOLVERS.get("ab2")(x, v, sigma, sigma_next, previous_velocity=None, previous_sigma=None)
    assert torch.equal(first, euler)  # no history: the Euler step


def test_ab2_is_exact_for_a_velocity_linear_in_sigma():
    """v = c0 + c1 sigma (independent of x): the linear extrapolation is exact, so one AB2 step integrates exactly."""
    x, c0, c1 = torch.tensor([[0.3]], dtype=torch.float64), 0.7, -2.0
    s_prev, s, s_next = 0.9, 0.7, 0.35
    velocity = lambda sig: torch.tensor([[c0 + c1 * sig]], dtype=torch.float64)  # noqa: E731
    got = ODE_SOLVERS.get("ab2")(
        x, velocity(s), torch.tensor([s], dtype=torch.float64), torch.tensor([s_next], dtype=torch.float64),
        previous_velocity=velocity(s_prev), previous_sigma=torch.tensor([s_prev], dtype=torch.float64),
    )  # fmt: skip
    exact = x + c0 * (s_next - s) + c1 * (s_next**2 - s**2) / 2
    torch.testing.assert_close(got, exact, rtol=0, atol=1e-14)


@pytest.mark.parametrize("shift", [1.0, 3.0])
def test_ab2_error_shrinks_as_h_squared_and_euler_as_h(shift):
    exact = _exact(_grid(1, shift)[-1])
    errors = {
        name: [float((_solve(name, n, shift) - exact).abs().max()) for n in (20, 40, 80)]
        for name in ODE_SOLVERS.names()
    }
    for name, order in (("euler", 1), ("ab2", 2)):
        ratios = [errors[name][k] / errors[name][k + 1] for k in range(2)]
        assert all(abs(r - 2**order) < 0.15 * 2**order for r in ratios), (name, ratios)
    assert errors["ab2"][0] < errors["euler"][0] / 10  # far more accurate at equal evaluations


def test_unknown_solver_is_named_with_a_suggestion():
    with pytest.raises(UnknownOptionError, match="ab2"):
        ODE_SOLVERS.get("ab3")


# ------------------------------------------------------------------------------------------- in the denoising loop
class _LinearArch(FlowArchitecture):
    """velocity = W x + c: a transformer-free stand-in so that the loop runs in milliseconds."""

    name = "linear"
    uses_true_cfg = False

    def velocity(self, transformer, latents, timestep, embeds, *, guidance):
        return transformer(latents) + embeds["c"]


def _rollout(mask: torch.Tensor, solver: str, noises: torch.Tensor, rows: slice | None = None):
    torch.manual_seed(0)
    layer = torch.nn.Linear(6, 6, bias=False)
    with torch.no_grad():
        layer.weight.mul_(0.3)
    scheduler = FlowSDEScheduler(shift=3.0, dynamics="flow_sde", noise_level=0.7)
    scheduler.set_timesteps(mask.shape[1])
    latents = torch.randn(2, 6, generator=torch.Generator().manual_seed(1))[rows or slice(0, mask.shape[0])]
    cond = {"c": torch.linspace(-1, 1, 6).expand(mask.shape[0], 6)}
    with torch.no_grad():
        trajectory = denoise(
            _LinearArch(), layer, scheduler, latents, cond, None, guidance_scale=1.0, sde_mask=mask, noise_level=0.7,
            generator=None, record_latents=True, ode_solver=solver, noises=noises,
        )  # fmt: skip
    return trajectory, layer, scheduler, cond


def _noises(n: int, steps: int) -> torch.Tensor:
    return torch.randn(n, steps, 6, generator=torch.Generator().manual_seed(2))


def test_all_stochastic_rollout_is_identical_with_either_solver():
    mask, noises = torch.ones(2, 6, dtype=torch.bool), _noises(2, 6)
    euler, *_ = _rollout(mask, "euler", noises)
    ab2, *_ = _rollout(mask, "ab2", noises)
    assert torch.equal(euler.latents, ab2.latents) and torch.equal(euler.log_probs, ab2.log_probs)


def test_window_at_the_start_keeps_the_window_and_its_log_probs_bit_for_bit():
    mask, noises = torch.tensor([[1, 1, 0, 0, 0, 0]], dtype=torch.bool), _noises(1, 6)
    euler, *_ = _rollout(mask, "euler", noises)
    ab2, *_ = _rollout(mask, "ab2", noises)
    assert torch.equal(euler.latents[:, :4], ab2.latents[:, :4])  # window + the first ODE step after it (Euler)
    assert torch.equal(euler.log_probs, ab2.log_probs) and torch.equal(euler.stochastic, ab2.stochastic)
    assert not torch.equal(euler.final, ab2.final)  # steps 3..5 are AB2


def test_stochastic_steps_are_the_schedulers_step_and_rescore_exactly():
    """A window in the middle: the state entering it differs from Euler's (AB2 before it), but every stochastic step is
    the scheduler's step on the stored state (same function as training's re-scoring), and every ODE step is the
    solver the rule picks: Euler right after a stochastic step, AB2 when the step before was deterministic too."""
    mask = torch.tensor([[0, 0, 0, 1, 1, 0, 0], [0, 1, 0, 0, 0, 1, 0]], dtype=torch.bool)
    noises = _noises(2, 7)
    traj, layer, scheduler, cond = _rollout(mask, "ab2", noises)
    sigmas, latents = scheduler.sigmas, traj.latents
    ab2, euler = ODE_SOLVERS.get("ab2"), ODE_SOLVERS.get("euler")
    with torch.no_grad():
        for n in range(2):
            for i in range(7):
                x = latents[n : n + 1, i]  # [1, 6]
                v = layer(x) + cond["c"][n : n + 1]
                level = torch.tensor([0.7 if mask[n, i] else 0.0])
                scored = scheduler.step(
                    v, None, x, step_index=i, noise_level=level, prev_sample=latents[n : n + 1, i + 1]
                )
                assert torch.equal(scored.log_prob, traj.log_probs[n : n + 1, i])  # exact re-scoring
                if mask[n, i]:
                    assert scored.log_prob.item() != 0
                    sampled = scheduler.step(v, None, x, step_index=i, noise_level=level, noise=noises[n : n + 1, i])
                    assert torch.equal(sampled.prev_sample, latents[n : n + 1, i + 1])
                    continue
                s, s_next = sigmas[i : i + 1], sigmas[i + 1 : i + 2]
                if i == 0 or mask[n, i - 1]:
                    expected = euler(x, v, s, s_next, previous_velocity=None, previous_sigma=None)
                else:
                    x_prev = latents[n : n + 1, i - 1]
                    v_prev = layer(x_prev) + cond["c"][n : n + 1]
                    expected = ab2(x, v, s, s_next, previous_velocity=v_prev, previous_sigma=sigmas[i - 1 : i])
                torch.testing.assert_close(latents[n : n + 1, i + 1], expected, rtol=1e-6, atol=1e-6)


def test_solver_choice_is_per_sample_so_chunking_does_not_matter():
    mask, noises = torch.tensor([[1, 1, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.bool), _noises(2, 5)
    both, *_ = _rollout(mask, "ab2", noises)
    for n in range(2):
        alone, *_ = _rollout(mask[n : n + 1], "ab2", noises[n : n + 1], rows=slice(n, n + 1))
        torch.testing.assert_close(both.latents[n : n + 1], alone.latents, rtol=1e-6, atol=1e-6)


def test_config_names_the_solver_and_rejects_it_for_trees(tmp_path):
    base = dict(model=str(tmp_path), num_steps=4)
    with pytest.raises(UnknownOptionError, match="ab2"):
        FlowPolicyConfig(**base, ode_solver="ab3").validate()
    with pytest.raises(ValueError, match=r"policy\.ode_solver='ab2' with policy\.tree\.enabled"):
        FlowPolicyConfig(**base, ode_solver="ab2", tree=TreeRolloutConfig(enabled=True, split_steps=[0])).validate()


def test_policy_rollout_with_ab2_rescores_exactly_and_keeps_the_window(tmp_path):
    """A MixGRPO-style window on a tiny SD3: ab2 changes only deterministic latents; old log-probs re-score exactly."""
    from genalign.pipelines.tiny_models import save_tiny_pipeline
    from genalign.policies.flow import build_policy
    from genalign.schedulers import TrainStepsConfig

    torch.set_num_threads(1)
    window = TrainStepsConfig(strategy="sliding_window", stochastic="trained", window_size=2, advance_every=1)
    values = dict(model=str(save_tiny_pipeline("sd3", tmp_path / "sd3")), height=16, width=16, num_steps=6,
                  guidance_scale=3.0, max_sequence_length=8, lora=flow_lora(rank=4, alpha=4.0), train_steps=window)  # fmt: skip
    rows = [{"prompt": "two red circles"}, {"prompt": "a blue square"}]
    rollouts = {}
    for solver in ("euler", "ab2"):
        policy = build_policy(FlowPolicyConfig(**values, ode_solver=solver))
        policy.on_step(2)  # window = steps 2 and 3
        rollouts[solver] = rollout = policy.rollout(rows, group_size=2)
        assert rollout.action_mask.tolist() == [[0, 0, 1, 1, 0, 0]] * 4
        with torch.no_grad():
            assert torch.equal(policy.score(rollout).logp, rollout.old_logp)
    euler, ab2 = (rollouts[s].per_sample["latents"] for s in ("euler", "ab2"))
    assert torch.equal(euler[:, :2], ab2[:, :2])  # x_0 and x_1 (step 0 is Euler in both)
    assert not torch.equal(euler[:, 2], ab2[:, 2])  # step 1 is ab2: the state entering the window differs


def test_evaluation_solver_can_differ_from_the_rollout_solver(tmp_path):
    """``policy.eval_ode_solver``: a policy that rolls out with ab2 but evaluates with Euler draws exactly the
    evaluation images of an Euler policy (one evaluation protocol for recipes trained with different solvers)."""
    import numpy as np

    from genalign.pipelines.tiny_models import save_tiny_pipeline
    from genalign.policies.flow import build_policy

    torch.set_num_threads(1)
    values = dict(model=str(save_tiny_pipeline("sd3", tmp_path / "sd3")), height=16, width=16, num_steps=4,
                  eval_num_steps=6, guidance_scale=1.0, max_sequence_length=8, lora=flow_lora(rank=4, alpha=4.0))  # fmt: skip
    rows = [{"prompt": "two red circles"}, {"prompt": "a blue square"}]

    def evaluation_images(**solvers: str) -> list[np.ndarray]:
        policy = build_policy(FlowPolicyConfig(**values, **solvers))
        return [np.asarray(image) for image in policy.rollout(rows, 1, mode="eval").outputs]

    euler = evaluation_images(ode_solver="euler")
    ab2_evaluated_with_euler = evaluation_images(ode_solver="ab2", eval_ode_solver="euler")
    ab2 = evaluation_images(ode_solver="ab2")
    assert all(np.array_equal(a, b) for a, b in zip(euler, ab2_evaluated_with_euler, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(euler, ab2, strict=True))
    with pytest.raises(UnknownOptionError, match="ab2"):
        FlowPolicyConfig(**values, eval_ode_solver="rk4").validate()
