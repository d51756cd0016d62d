"""Progress: a tqdm bar on a terminal; in a log file or a pipe, plain lines every N units (never tqdm's carriage-return
redraws). Evaluation shows its batches."""

from __future__ import annotations

import io
import sys

import torch

from genalign.config import RewardSpec
from genalign.trainer.evaluate import evaluate
from genalign.trainer.metrics import Progress, progress_bar
from genalign.trainer.rewards import RewardSet
from tests.trainer.toy_policy import ToyPolicyConfig, build_policy, toy_rows


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_without_a_terminal_progress_is_one_line_every_n_units():
    stream = io.StringIO()
    progress = Progress(5, "eval batch", every=2, stream=stream)
    for _ in range(5):
        progress.update(1, "x")
    progress.close()
    lines = stream.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == ["eval batch 2/5: x", "eval batch 4/5: x", "eval batch 5/5: x"]
    assert "\r" not in stream.getvalue()


def test_on_a_terminal_progress_is_a_tqdm_bar():
    stream = Terminal()
    progress = Progress(3, "genalign", stream=stream)
    progress.update(1, "reward=0.5")
    progress.close()
    assert progress.bar is not None and "\r" in stream.getvalue() and "reward=0.5" in stream.getvalue()


def test_training_bar_only_on_a_terminal(monkeypatch):
    class Run:
        progress_bar, max_steps = True, 10

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert progress_bar(Run, 0, main=True) is None  # report_progress then prints "step N: ..." lines
    monkeypatch.setattr(sys, "stderr", Terminal())
    bar = progress_bar(Run, 0, main=True)
    assert bar is not None and bar.bar is not None
    bar.close()
    assert progress_bar(Run, 0, main=False) is None


def test_evaluation_prints_its_batches_and_times_itself(capsys):
    policy = build_policy(ToyPolicyConfig(num_prompts=8), torch.device("cpu"))
    rewards = RewardSet([RewardSpec(fn="toy_letter_match", name="match")])
    result = evaluate(policy, toy_rows(8), rewards, batch_size=2, accuracy_reward="match", progress_every=2)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in lines] == ["eval batch 2/4: 4/8 prompts", "eval batch 4/4: 8/8 prompts"]
    assert result["eval/accuracy"] == result["eval/reward/match"] and result["time/eval_s"] > 0
