"""Optimizers by name: each trains the toy policy and resumes exactly from a checkpoint (its state saved without
pickle); 8-bit AdamW without bitsandbytes is an error at load that says what to install."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from genalign.config import ConfigError
from genalign.trainer import train
from tests.reliability.conftest import metrics, toy_config, toy_family  # noqa: F401


@pytest.mark.parametrize(("optimizer", "extra"), [("adamw", {}), ("adamw_fused", {}), ("adafactor", {"lr": 0.05}),
                                                   ("sgd", {"momentum": 0.9})])  # fmt: skip
def test_each_optimizer_learns_and_resumes_exactly(tmp_path, toy_family, optimizer, extra):  # noqa: F811
    optim = {"optimizer": optimizer, **extra}
    train(toy_config(tmp_path / "a", optim=optim, run={"max_steps": 4}))
    train(toy_config(tmp_path / "b", optim=optim, run={"max_steps": 2}))
    train(toy_config(tmp_path / "b", optim=optim, run={"max_steps": 4, "resume": "latest"}))
    straight, resumed = metrics(tmp_path / "a" / "run"), metrics(tmp_path / "b" / "run")
    drop = lambda records: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]  # noqa: E731
    assert drop(straight) == drop(resumed)
    assert any(r["grad_norm"] > 0 for r in straight)


def test_eight_bit_adamw_without_bitsandbytes_says_what_to_install(tmp_path):
    if importlib.util.find_spec("bitsandbytes") is not None:
        pytest.skip("bitsandbytes is installed here")
    with pytest.raises(ConfigError, match=r"needs the bitsandbytes package.*pip install bitsandbytes"):
        toy_config(tmp_path, optim={"optimizer": "adamw_8bit"})


def test_the_default_is_torch_adamw_with_the_configured_hyperparameters(tmp_path):
    from genalign.trainer.optim import make_optimizer

    config = toy_config(tmp_path)
    optimizer = make_optimizer(config.optim, [{"params": [torch.nn.Parameter(torch.ones(2))]}])
    assert type(optimizer) is torch.optim.AdamW and optimizer.defaults["betas"] == (0.9, 0.999)
