"""Tree rollouts, step-level credit and likelihood-free objectives for flow models, side by side in one run
(results in benchmarks/flow_trees_results.md and flow_trees_reward_vs_time.png).

1. **Cost per iteration, independent vs tree rollouts at 16 leaves**: network evaluations per leaf and wall time of
   the rollout and of a full training iteration (rollout + score + backward + optimizer step) for 16 independent
   Flow-GRPO samples (SDE and training on every step) against one BranchGRPO tree (splits at 0, 3, 6, 9 of 20, two
   children, SDE at the splits, ODE edges, the 4 split steps trained) and a late-split tree (12, 14, 16, 18).
2. **Reward against wall time** for plain Flow-GRPO, MixGRPO window, tree rollouts (per-depth advantages),
   Chunk-GRPO, DiffusionNFT and V-GRPO, each trained for the same wall-time budget from the same weights with the
   same prompts, group size, learning rate and LoRA, with a loop that mirrors the trainer (policy hooks included).
   The held-out reward is measured with ODE sampling (the policy's eval rollout) before and after.

Usage::

    HF_HUB_OFFLINE=1 python benchmarks/bench_flow_trees.py [--model DIR] [--budget 60] [--threads 1] [--out-dir DIR]
    HF_HUB_OFFLINE=1 python benchmarks/bench_flow_trees.py --smoke    # seconds: 4 steps, 4 leaves, 1 iteration each

Without ``--model`` it uses the shapes-world model ``builtin:shapes-t2i`` (genalign/assets): train-split shapes prompts,
``geneval_shapes`` with partial credit as the training reward, all-or-nothing accuracy on 16 held-out prompts (2 ODE
samples each) as the evaluation. ``--model DIR`` or ``--random-model`` (a small SD3 built from a config, random
weights) use the ``brightness`` reward (mean pixel value, a reward any model can climb).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # bench_flow, genalign

from bench_flow import small_sd3  # noqa: E402

from genalign import algorithms as alg  # noqa: E402
from genalign.policies.base import RolloutRequest, ScoreRequest  # noqa: E402
from genalign.policies.flow import (  # noqa: E402
    FlowPolicyConfig,
    LikelihoodFreeConfig,
    TreeRolloutConfig,
    build_policy,
    flow_lora,
)
from genalign.schedulers import TrainStepsConfig  # noqa: E402
from genalign.schedulers.branching import TreePlan  # noqa: E402

PROMPTS = ["two red circles", "a blue square", "three green triangles", "a yellow circle on the left"]
#: the model of the measured results (the unbiased shapes world; the Flow-GRPO demo's shapes-t2i-faded is raced by
#: compare_methods.py --demo flow)
SHAPES_MODEL = "builtin:shapes-t2i"


def brightness(outputs: list[Any]) -> torch.Tensor:
    """Mean pixel value in [0, 1] of each image."""
    return torch.tensor([float(np.asarray(o, dtype=np.float32).mean()) / 255.0 for o in outputs])


def make_reward(name: str, args: dict[str, Any] | None = None):
    """``(rows, outputs) -> [n]``: ``brightness`` or a registered reward (dataset columns such as ``target`` are read
    from the rows)."""
    if name == "brightness":
        return lambda rows, outputs: brightness(outputs)
    from genalign.rewards.image import build_reward

    reward = build_reward(name, args)

    def score(rows: list[dict[str, Any]], outputs: list[Any]) -> torch.Tensor:
        columns = {key: [row[key] for row in rows] for key in rows[0] if key != "prompt"}
        return torch.tensor(reward([row["prompt"] for row in rows], outputs, **columns), dtype=torch.float32)

    return score


@dataclass
class Setup:
    """Model, prompts and rewards of the reward race."""

    model: str
    name: str
    size: int
    max_sequence_length: int
    train_rows: list[dict[str, Any]]
    eval_rows: list[dict[str, Any]]
    train_reward: str
    train_reward_args: dict[str, Any]
    eval_reward: str
    eval_reward_args: dict[str, Any]


def demo_setup(model: str) -> Setup:
    """The shapes-t2i demo: train-split prompts, partial-credit GenEval reward for training, all-or-nothing accuracy
    on held-out prompts for evaluation (32 px, one zero T5 token: see the model card)."""
    from genalign.data.shapes import shapes_t2i_rows

    return Setup(
        model=model,
        name="demo shapes-t2i",
        size=32,
        max_sequence_length=1,
        train_rows=shapes_t2i_rows(256, 0, split="train"),
        eval_rows=shapes_t2i_rows(32, 1, split="test"),
        train_reward="geneval_shapes",
        train_reward_args={"partial_credit": True},
        eval_reward="geneval_shapes",
        eval_reward_args={},
    )


def random_setup(model: str, name: str, size: int) -> Setup:
    rows = [{"prompt": p} for p in PROMPTS]
    return Setup(model, name, size, 16, rows[:2], rows, "brightness", {}, "brightness", {})


# ------------------------------------------------------------------------------------------------- training loop
@dataclass
class Method:
    name: str
    policy: dict[str, Any]
    ratio_level: alg.Option = alg.Option("token")
    group_size: int = 8
    credit: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    objective: alg.Option = alg.Option("clipped_ratio")


def train_iteration(policy, rows, method: Method, optimizer, reward_fn, step: int) -> float:
    """One trainer-like iteration with the backend's pieces (credit rules, objective registry); returns the mean
    training reward of its rollout."""
    policy.on_step(step)
    structure = alg.names_by("rollout", alg.rule_needs([name for name, _ in method.credit]))
    rollout = policy.rollout(rows, method.group_size, request=RolloutRequest(structure=structure))
    rewards = reward_fn(rollout.rows, rollout.outputs)  # [N]
    sample_advantages = alg.compute_advantages("grpo", rewards, rollout.group_ids)  # [N]
    inputs = alg.StepBatch(sample_advantages=sample_advantages, mask=rollout.action_mask, group_ids=rollout.group_ids, behaviour_logp=rollout.old_logp, **rollout.structure)  # fmt: skip
    advantages = alg.apply_credit(method.credit, sample_advantages, inputs)  # [N] or [N, T]
    for module in policy.modules_to_train():
        module.train()
    optimizer.zero_grad(set_to_none=True)
    needs = alg.OBJECTIVES.meta(method.objective.name).get("needs", ())
    out = policy.score(rollout, ScoreRequest(alg.names_by("score", needs)))
    mask = rollout.action_mask
    context = alg.StepBatch(old_logp=rollout.old_logp, mask=mask, group_ids=rollout.group_ids)
    clip = alg.Option("ppo", {"eps_low": 1e-3, "eps_high": 1e-3})
    hyperparameters = alg.objective_hyperparameters(method.objective, ratio_level=method.ratio_level, clip=clip)
    per_action, _ = alg.OBJECTIVES.get(method.objective.name)(out, advantages, context, **hyperparameters)
    loss = (per_action * mask).sum() / mask.sum().clamp_min(1.0)  # token mean
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(), 1.0)
    optimizer.step()
    policy.after_optimizer_step()
    for module in policy.modules_to_train():
        module.eval()
    return float(rewards.mean())


@torch.no_grad()
def eval_reward(policy, rows: list[dict[str, Any]], reward_fn, seed: int = 123) -> float:
    """Mean reward of 2 ODE samples (the policy's eval rollout) per held-out row, fixed initial noise."""
    policy.model.generator.manual_seed(seed)
    rollout = policy.rollout(rows, 2, mode="eval")
    return float(reward_fn(rollout.rows, rollout.outputs).mean())


def base_config(model: str, size: int, steps: int, max_sequence_length: int = 16, **overrides) -> FlowPolicyConfig:
    values = dict(
        model=model, height=size, width=size, num_steps=steps, eval_num_steps=steps, guidance_scale=4.5,
        max_sequence_length=max_sequence_length, lora=flow_lora(rank=8, alpha=8.0), seed=0,
    )  # fmt: skip
    return FlowPolicyConfig(**(values | overrides))


def reward_race(
    setup: Setup, *, steps: int, budget: float, lr: float, prompts_per_iteration: int, eval_every: float
) -> dict[str, Any]:
    """Each method trains for ``budget`` seconds of training wall time (evaluations excluded); the held-out reward is
    measured every ``eval_every`` training seconds."""
    reward_fn = make_reward(setup.train_reward, setup.train_reward_args)
    eval_fn = make_reward(setup.eval_reward, setup.eval_reward_args)
    window = max(1, steps // 3)
    methods = [
        Method("Flow-GRPO", {}),
        Method(
            "MixGRPO window",
            {"train_steps": TrainStepsConfig("sliding_window", "trained", window_size=window, advance_every=5)},
        ),
        Method(  # 2^3 leaves = the group of 8; splits 0, 3, 6 of 10 steps
            "Tree (BranchGRPO)",
            {"tree": TreeRolloutConfig(enabled=True, split_steps=[0, steps // 3, 2 * steps // 3], branching=2)},
            credit=[("tree", {})],
        ),
        Method("Chunk-GRPO", {}, ratio_level=alg.Option("chunk", {"chunk_size": 3})),
        Method(
            "DiffusionNFT",
            {"likelihood_free": LikelihoodFreeConfig(method="nft", num_timesteps=2)},
            objective=alg.Option("nft"),
        ),
        Method("V-GRPO (ELBO)", {"likelihood_free": LikelihoodFreeConfig(method="elbo", num_timesteps=2)}),
    ]
    results: dict[str, Any] = {}
    for method in methods:
        torch.manual_seed(0)
        config = base_config(setup.model, setup.size, steps, setup.max_sequence_length, **method.policy)
        policy = build_policy(config)
        optimizer = torch.optim.Adam(policy.trainable_parameters(), lr=lr)
        start_eval = eval_reward(policy, setup.eval_rows, eval_fn)
        times, train_rewards = [0.0], [float("nan")]
        eval_times, eval_rewards = [0.0], [start_eval]
        elapsed, step = 0.0, 0
        while elapsed < budget:
            step += 1
            first = (step - 1) * prompts_per_iteration % len(setup.train_rows)
            rows = (setup.train_rows * 2)[first : first + prompts_per_iteration]  # same prompts for every method
            t0 = time.perf_counter()
            mean_reward = train_iteration(policy, rows, method, optimizer, reward_fn, step)
            elapsed += time.perf_counter() - t0
            times.append(elapsed)
            train_rewards.append(mean_reward)
            if elapsed >= eval_times[-1] + eval_every and elapsed < budget:
                eval_times.append(elapsed)
                eval_rewards.append(eval_reward(policy, setup.eval_rows, eval_fn))
        end_eval = eval_reward(policy, setup.eval_rows, eval_fn)
        eval_times.append(elapsed)
        eval_rewards.append(end_eval)
        results[method.name] = {
            "iterations": step,
            "seconds": elapsed,
            "seconds_per_iteration": elapsed / step,
            "times": times,
            "train_reward": train_rewards,
            "eval_times": eval_times,
            "eval_reward": eval_rewards,
            "eval_reward_start": start_eval,
            "eval_reward_end": end_eval,
        }
        print(f"{method.name}: {step} it in {elapsed:.1f}s, eval reward {start_eval:.4f} -> {end_eval:.4f}", flush=True)
    return results


# ------------------------------------------------------------------------------------------ cost per iteration
def cost_per_iteration(
    setup: Setup,
    *,
    size: int,
    repeats: int,
    steps: int = 20,
    early: tuple[int, ...] = (0, 3, 6, 9),
    late: tuple[int, ...] = (12, 14, 16, 18),
) -> dict[str, Any]:
    """Independent vs tree rollouts (binary splits at ``early`` / ``late`` steps; default 16 leaves, 20 steps)."""
    assert len(early) == len(late), "both trees need the same number of leaves"
    leaves = 2 ** len(early)
    rows = setup.train_rows[:1]
    settings = {
        f"independent (Flow-GRPO, {leaves} samples)": dict(),
        f"tree splits {','.join(map(str, early))} (BranchGRPO)": dict(
            tree=TreeRolloutConfig(enabled=True, split_steps=list(early))
        ),
        f"tree splits {','.join(map(str, late))}": dict(tree=TreeRolloutConfig(enabled=True, split_steps=list(late))),
    }
    results: dict[str, Any] = {}
    method = Method("cost", {}, group_size=leaves)
    reward_fn = make_reward("brightness")
    for name, overrides in settings.items():
        policy = build_policy(base_config(setup.model, size, steps, setup.max_sequence_length, **overrides))
        optimizer = torch.optim.Adam(policy.trainable_parameters(), lr=1e-4)
        policy.rollout(rows, leaves)  # warm-up
        rollout_times, iteration_times = [], []
        for repeat in range(repeats):
            t0 = time.perf_counter()
            rollout = policy.rollout(rows, leaves)
            rollout_times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            train_iteration(policy, rows, method, optimizer, reward_fn, repeat + 1)
            iteration_times.append(time.perf_counter() - t0)
        results[name] = {
            "nfe_per_leaf": rollout.info["nfe_per_sample"],
            "nfe_per_leaf_independent": rollout.info.get("nfe_per_sample_independent", rollout.info["nfe_per_sample"]),
            "trained_steps_per_leaf": float(rollout.action_mask.sum(1).mean()),
            "rollout_s": float(np.median(rollout_times)),
            "iteration_s": float(np.median(iteration_times)),
        }
        print(name, results[name], flush=True)
    plan = TreePlan(num_steps=steps, split_steps=early, branching=2)
    results["check"] = {"branchgrpo_evaluations_per_tree": plan.network_evaluations()}
    return results


def plot(race: dict[str, Any], path: Path, title: str) -> None:
    """Training reward (left) and held-out reward (right) against training wall time, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, result in race.items():
        rewards = np.array(result["train_reward"][1:])
        smooth = np.convolve(rewards, np.ones(5) / 5, mode="valid") if len(rewards) >= 5 else rewards
        left.plot(result["times"][1 + len(rewards) - len(smooth) :], smooth, label=name)
        right.plot(result["eval_times"], result["eval_reward"], label=name, marker="o")
    left.set_title("training reward (5-iteration average)", fontsize=10)
    right.set_title("held-out reward (ODE samples, fixed noise)", fontsize=10)
    for ax in (left, right):
        ax.set_xlabel("training wall time (s)")
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--random-model", action="store_true", help="Use the random small SD3 even if the demo exists.")
    parser.add_argument("--prompts", type=int, default=2, help="Prompts per iteration (group size 8 each).")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--budget", type=float, default=60.0, help="Wall-time budget (s) per method in part 2.")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--eval-every", type=float, default=30.0, help="Training seconds between evaluations.")
    parser.add_argument("--race-size", type=int, default=16, help="Image size with a random model (demo: 32).")
    parser.add_argument("--race-steps", type=int, default=10)
    parser.add_argument("--cost-size", type=int, default=0, help="Image size of part 1 (0 = the race's size).")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--out-dir", type=Path, default=None, help="Where the PNG goes (default: benchmarks/).")
    parser.add_argument("--json", type=Path, default=None, help="default: flow_trees_results.json in the temp dir")
    parser.add_argument(
        "--smoke", action="store_true", help="Seconds: 4 steps, 4 leaves, 1 iteration per method, 2 held-out prompts; "
        "PNG and JSON in a temporary folder unless given."
    )  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        if args.smoke:
            args.budget, args.eval_every, args.race_steps, args.repeats, args.prompts = 1e-3, 1e9, 4, 1, 1
        default_dir = Path(tmp) if args.smoke else Path(__file__).resolve().parent
        args.out_dir = args.out_dir or default_dir
        args.json = args.json or (Path(tmp) if args.smoke else Path(tempfile.gettempdir())) / "flow_trees_results.json"
        run(args, Path(tmp))


def run(args: argparse.Namespace, tmp: Path) -> None:
    """Part 1 (unless ``--skip-cost``) and part 2; writes the JSON report and the PNG."""
    if args.model is not None:
        setup = random_setup(str(args.model), str(args.model), args.race_size)
    elif not args.random_model:
        setup = demo_setup(SHAPES_MODEL)
    else:
        model = small_sd3(tmp / "small_sd3")
        setup = random_setup(str(model), "small SD3 (random weights, 4 layers, hidden 64)", args.race_size)
    if args.smoke:
        setup.eval_rows = setup.eval_rows[:2]
    report: dict[str, Any] = {
        "model": setup.name,
        "reward": f"train {setup.train_reward} {setup.train_reward_args}, eval {setup.eval_reward}",
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    if not args.skip_cost:
        tree = dict(steps=4, early=(0, 1), late=(2, 3)) if args.smoke else {}
        report["cost"] = cost_per_iteration(setup, size=args.cost_size or setup.size, repeats=args.repeats, **tree)
    report["race"] = reward_race(
        setup,
        steps=args.race_steps,
        budget=args.budget,
        lr=args.lr,
        prompts_per_iteration=args.prompts,
        eval_every=args.eval_every,
    )
    args.out_dir.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1))
    plot(report["race"], args.out_dir / "flow_trees_reward_vs_time.png", f"{report['model']}: {report['reward']}")
    print(f"wrote {args.json} and {args.out_dir / 'flow_trees_reward_vs_time.png'}")


if __name__ == "__main__":
    main()
