"""The run dashboard: panels follow the logged keys and are named by what they show; constant metrics go to the
footer; the summary names the best evaluation and its step; a drawing failure never stops training."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from genalign.cli import main
from genalign.trainer.dashboard import (
    DASHBOARD_FILE,
    RunInfo,
    build_panels,
    dashboard_enabled,
    draw_dashboard,
    read_logs,
    refresh_dashboard,
    summarize,
)

T0 = 1_700_000_000.0


def write_run(folder: Path, family: str, steps: int = 6) -> Path:
    """A run folder as the trainer leaves it, with the keys an LM or a flow run logs."""
    folder.mkdir(parents=True, exist_ok=True)
    rewards = [{"fn": "exact_match", "name": "accuracy"}, {"fn": "/somewhere/my_rewards.py:brightness"}]
    config = {"policy": {"family": family, "model": "builtin:tiny"}, "rewards": rewards,
              "eval": {"accuracy_reward": "accuracy"}, "run": {"max_steps": 10}}  # fmt: skip
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    metrics, evals = [], [{"step": 0, "eval/accuracy": 0.25, "eval/reward/accuracy": 0.25,
                           "eval/reward/brightness": 0.5, "eval/num_prompts": 8, "time/eval_s": 5.0,
                           "time/unix": T0 + 5}]  # fmt: skip
    for step in range(1, steps + 1):
        record = {"step": step, "reward/mean": 0.1 * step, "reward/std": 0.3, "reward/accuracy/mean": 0.1 * step,
                  "reward/accuracy/std": 0.4, "reward/accuracy/errors": 0.0, "reward/brightness/mean": 0.5,
                  "reward/brightness/std": 0.1, "loss": -0.01 * step, "kl": 0.0, "approx_kl": 0.001 * step,
                  "entropy": 1.0 - 0.05 * step, "clip_frac": 0.01 * step, "grad_norm": 1.0 / step, "lr": 3e-4,
                  "time/step_s": 10.0 + step % 2, "time/rollout_s": 6.0 + step % 2, "time/update_s": 4.0,
                  "time/unix": T0 + 5 + 10 * step, "guard/skip_reason": ""}  # fmt: skip
        if family == "flow":
            record |= {"completion_length/mean": 5.0, "rollout/num_steps": 10, "rollout/nfe_per_sample": 10 + step}
        else:
            record |= {"completion_length/mean": 4.0 + 0.1 * step, "rollout/generated_tokens": 100 + step}
        metrics.append(record)
    evals.append({**evals[0], "step": steps, "eval/accuracy": 0.75, "eval/reward/accuracy": 0.75,
                  "time/unix": T0 + 10 + 10 * steps})  # fmt: skip
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    (folder / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    return folder


def panels_of(folder: Path):
    metrics, evals = read_logs(folder)
    return build_panels(metrics, evals, RunInfo.of(folder))


def test_lm_panels_follow_the_logged_keys_and_constants_go_to_the_footer(tmp_path):
    panels, constants = panels_of(write_run(tmp_path / "lm", "causal_lm"))
    assert [p.title for p in panels] == [
        "reward: accuracy", "reward: brightness", "combined reward (weighted)", "held-out rewards (accuracy: accuracy)",
        "loss", "KL divergence", "entropy", "clip fraction", "completion length (tokens)", "rollout: generated_tokens",
        "gradient norm (before clipping)", "step time (s)",
    ]  # fmt: skip
    by_title = {p.title: p for p in panels}
    assert [s.label for s in by_title["reward: brightness"].series] == [
        "train (mean)",
        "train (std)",
        "held-out (mean)",
    ]
    assert [s.label for s in by_title["KL divergence"].series] == ["old -> current policy (approx_kl)"]
    assert [s.label for s in by_title["step time (s)"].series] == ["step", "rollout"]
    assert constants == {"kl": 0.0, "time/update_s": 4.0, "time/eval_s": 5.0, "lr": 3e-4, "reward/accuracy/errors": 0.0,
                         "eval/num_prompts": 8.0}  # fmt: skip


def test_flow_panels_show_the_rollout_statistics_that_move(tmp_path):
    panels, constants = panels_of(write_run(tmp_path / "flow", "flow"))
    titles = [p.title for p in panels]
    assert "rollout: nfe_per_sample" in titles and "rollout: num_steps" not in titles
    assert constants["rollout/num_steps"] == 10 and constants["completion_length/mean"] == 5.0
    assert not any(t.startswith("completion length") for t in titles)


def test_the_dashboard_png_and_the_report(tmp_path, capsys):
    run = write_run(tmp_path / "lm", "causal_lm")
    path = draw_dashboard(run)
    assert path == run / DASHBOARD_FILE and path.stat().st_size > 20_000
    assert [p.name for p in run.iterdir() if p.name.endswith(".tmp")] == []
    text = summarize(run)
    assert "6 of 10 steps, 2 evaluations, wall time 1 min 10 s (steps 1 min 03 s, evaluations 10 s)" in text
    assert "held-out accuracy (accuracy): best 0.75 at step 6; first 0.25 (step 0)" in text
    assert "last step (6): reward accuracy 0.6, reward brightness 0.5, loss -0.06, kl 0" in text
    (run / DASHBOARD_FILE).unlink()
    assert main(["report", str(run)]) == 0
    assert capsys.readouterr().out.endswith(f"dashboard: {run / DASHBOARD_FILE}\n") and (run / DASHBOARD_FILE).exists()
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "no metrics.jsonl or eval.jsonl here" in capsys.readouterr().err


def test_a_drawing_failure_is_reported_and_training_goes_on(tmp_path, capsys):
    run = write_run(tmp_path / "lm", "causal_lm")
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join([lines[0], "{torn", *lines[1:]]) + "\n")
    assert refresh_dashboard(run) is None
    assert "could not draw" in capsys.readouterr().err and not (run / DASHBOARD_FILE).exists()


def test_run_dashboard_wins_over_the_environment_default(monkeypatch):
    monkeypatch.setenv("GENALIGN_DASHBOARD", "0")
    assert not dashboard_enabled(None) and dashboard_enabled(True)
    monkeypatch.setenv("GENALIGN_DASHBOARD", "1")
    assert dashboard_enabled(None) and not dashboard_enabled(False)
    monkeypatch.delenv("GENALIGN_DASHBOARD")
    assert dashboard_enabled(None)
