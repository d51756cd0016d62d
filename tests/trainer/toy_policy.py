"""A tiny tabular policy family for trainer tests: each prompt has a [T, V] logits table; outputs are letter strings.

It implements the full Policy contract (rollout, score, save/load, reference KL) with no transformers dependency, so
the recipe's mechanics (advantages, update, resume, processes) are tested in milliseconds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from genalign import algorithms as alg
from genalign.policies.base import Policy, PolicyCapabilities, Rollout, RolloutRequest, ScoreOutput, ScoreRequest
from genalign.rewards import register_reward

LETTERS = "abcd"


@dataclass
class ToyPolicyConfig:
    family: Literal["toy"] = "toy"
    num_prompts: int = field(default=8, metadata={"help": "rows carry 'pid' in [0, num_prompts)"})
    length: int = field(default=3, metadata={"help": "tokens per output"})
    init_scale: float = field(default=0.0, metadata={"help": "std of the initial logits"})
    nan_scores_from_step: int = field(
        default=0, metadata={"help": "from this training step on, score() returns NaN log-probs (0 = never)"}
    )
    layout_free_sampling: bool = field(
        default=False,
        metadata={
            "help": "draw each sample from a generator seeded by (step, pid, member): rollouts then do not "
            "depend on how prompts are spread over processes"
        },
    )

    def capabilities(self) -> PolicyCapabilities:
        return PolicyCapabilities(rollout_logp_is_exact=True, signals=frozenset({"entropy", "kl"}))


class ToyTable(nn.Module):
    def __init__(self, cfg: ToyPolicyConfig) -> None:
        super().__init__()
        self.logits = nn.Parameter(cfg.init_scale * torch.randn(cfg.num_prompts, cfg.length, len(LETTERS)))
        self.register_buffer("ref_logits", self.logits.detach().clone())

    def forward(self, pids: torch.Tensor, reference: bool = False) -> torch.Tensor:
        """``[n, T, V]`` log-probabilities of prompts ``pids`` ``[n]`` (called as a module, so that the hooks of
        data-parallel wrappers run)."""
        table = self.ref_logits if reference else self.logits
        return torch.log_softmax(table[pids].double(), dim=-1).float()


class ToyPolicy(Policy):
    family = "toy"

    def __init__(self, cfg: ToyPolicyConfig) -> None:
        self.cfg = cfg
        self.capabilities = cfg.capabilities()
        self.table = ToyTable(cfg)
        self.step = 0

    @property
    def logits(self) -> nn.Parameter:
        return self.table.logits

    def on_step(self, step: int) -> None:
        self.step = step

    def _logp_table(self, pids: torch.Tensor, reference: bool = False) -> torch.Tensor:
        return self.table(pids, reference)  # [n, T, V]

    def rollout(self, rows, group_size, *, mode="train", request=RolloutRequest()):
        pids = torch.tensor([r["pid"] for r in rows]).repeat_interleave(group_size)  # [N]
        with torch.no_grad():
            logp_table = self._logp_table(pids)
            if mode == "eval":
                tokens = logp_table.argmax(-1)  # [N, T]
            elif self.cfg.layout_free_sampling:
                members = torch.arange(group_size).repeat(len(rows))  # [N]
                tokens = torch.stack(
                    [
                        torch.multinomial(
                            p.exp(), 1, generator=torch.Generator().manual_seed(self.step * 7919 + pid * 31 + m)
                        )[:, 0]
                        for p, pid, m in zip(logp_table, pids.tolist(), members.tolist())
                    ]
                )  # [N, T]
            else:
                tokens = torch.distributions.Categorical(logits=logp_table).sample()  # [N, T]
            old_logp = logp_table.gather(-1, tokens[..., None])[..., 0]
        return Rollout(
            rows=[r for r in rows for _ in range(group_size)],
            outputs=["".join(LETTERS[t] for t in seq) for seq in tokens.tolist()],
            group_ids=torch.arange(len(rows)).repeat_interleave(group_size),
            old_logp=old_logp,
            action_mask=torch.ones_like(old_logp),
            per_sample={"pids": pids, "tokens": tokens},
        )

    def score(self, rollout, request=ScoreRequest()):
        pids, tokens = rollout.per_sample["pids"], rollout.per_sample["tokens"]
        table = self._logp_table(pids)  # [n, T, V]
        logp = table.gather(-1, tokens[..., None])[..., 0]  # [n, T]
        if self.cfg.nan_scores_from_step and self.step >= self.cfg.nan_scores_from_step:
            logp = logp * float("nan")  # a broken forward pass: NaN loss and gradients
        ent = -(table.exp() * table).sum(-1) if "entropy" in request else None
        kl = None
        if "kl" in request:
            ref = self._logp_table(pids, reference=True).gather(-1, tokens[..., None])[..., 0]
            kl = alg.kl_penalty(logp, ref, request.param("kl", "k3"))
        return ScoreOutput(logp, {"entropy": ent, "kl": kl})

    def trainable_parameters(self):
        return [self.logits]

    def modules_to_train(self):
        return [self.table]

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        save_file({"logits": self.logits.detach().contiguous()}, str(directory / "weights.safetensors"))

    def load(self, directory: Path) -> None:
        with torch.no_grad():
            self.logits.copy_(load_file(str(directory / "weights.safetensors"))["logits"])


CONFIG_CLASS = ToyPolicyConfig


def build_policy(config: ToyPolicyConfig, device: torch.device) -> ToyPolicy:
    policy = ToyPolicy(config)
    policy.table.to(device)
    return policy


def toy_rows(num_prompts: int) -> list[dict]:
    """Prompt i's answer is a fixed letter string; the reward is the fraction of matching letters."""
    gen = torch.Generator().manual_seed(1234)
    answers = torch.randint(0, len(LETTERS), (num_prompts, 3), generator=gen).tolist()
    return [
        {"prompt": f"prompt {i}", "pid": i, "answer": "".join(LETTERS[t] for t in a)} for i, a in enumerate(answers)
    ]


_CALLS = {"n": 0}


@register_reward("toy_letter_match")
def toy_letter_match(
    prompts,
    completions,
    answer,
    *,
    crash_on_call: int | None = None,
    signal_on_call: int | None = None,
    signal_name: str = "SIGTERM",
    signal_times: int = 1,
    signal_rank: int = 0,
    **unused_columns,
):
    """Fraction of positions where the output letter equals the answer letter.

    ``crash_on_call=k`` kills the process (no cleanup, like SIGKILL) on the k-th call: a crash in the middle of a run.
    ``signal_on_call=k`` sends ``signal_name`` to this process ``signal_times`` times on the k-th call, in the process
    of rank ``signal_rank`` only (a preemption notice in the middle of a step).
    """
    _CALLS["n"] += 1
    if crash_on_call is not None and _CALLS["n"] == crash_on_call:
        os._exit(17)
    if signal_on_call == _CALLS["n"] and int(os.environ.get("RANK", "0")) == signal_rank:
        import signal
        import time

        for _ in range(signal_times):
            os.kill(os.getpid(), getattr(signal, signal_name))
            time.sleep(0.05)  # the handler runs between two signals (signals of one kind pending at once merge)
    return [sum(a == b for a, b in zip(c, t)) / len(t) for c, t in zip(completions, answer)]
