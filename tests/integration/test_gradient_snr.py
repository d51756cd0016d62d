"""benchmarks/bench_flow_gradient_snr.py: the signal-to-noise statistics and one measurement through the trainer."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_flow_gradient_snr as snr


def test_statistics_hand_computed():
    # g_1 = (1, 0), g_2 = (3, 0): mean (2, 0); V = (1 + 1) / (2 - 1) = 2; |mu|^2 = 4 - 2 / 2 = 3; snr2 = 1.5
    stats = snr.gradient_statistics(torch.tensor([[1.0, 0.0], [3.0, 0.0]]), samples_per_batch=10)
    assert stats["snr2_per_batch"] == pytest.approx(1.5)
    assert stats["samples_for_snr_1"] == pytest.approx(10 / 1.5)
    assert stats["mean_pairwise_cosine"] == pytest.approx(1.0)
    assert stats["gradient_norm"] == pytest.approx(2.0)


def test_statistics_recover_known_signal_to_noise():
    generator = torch.Generator().manual_seed(0)
    mu = torch.zeros(50)
    mu[0] = 1.0  # |mu|^2 = 1
    noise = torch.randn(4000, 50, generator=generator) * (4.0 / 50) ** 0.5  # tr Sigma = 4
    stats = snr.gradient_statistics(mu + noise, samples_per_batch=1)
    assert stats["snr2_per_batch"] == pytest.approx(0.25, rel=0.1)
    assert stats["mean_pairwise_cosine"] == pytest.approx(0.25 / 1.25, rel=0.15)


def test_statistics_reject_a_single_batch():
    with pytest.raises(ValueError, match="--batches must be >= 2"):
        snr.gradient_statistics(torch.ones(1, 3), samples_per_batch=4)


def test_measure_runs_the_trainer_objective_on_the_demo(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    overrides = [
        *["algorithm.prompts_per_step=2", "algorithm.group_size=2", "policy.num_steps=2", "run.num_threads=1"],
        *["rewards=[{fn: jpeg_compressibility}]", "eval.accuracy_reward=null"],  # continuous: no tied groups
        "data.train.args.size=16",  # two prompts are drawn: the 20,000-prompt demo set would take seconds to build
    ]
    result = snr.measure(snr.DEFAULT_CONFIG, overrides, batches=2)
    assert result["samples_per_batch"] == 4
    assert result["gradient_norm"] > 0
    assert -1.0 <= result["mean_pairwise_cosine"] <= 1.0
