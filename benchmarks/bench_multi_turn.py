"""Multi-turn rollout speed: the KV cache kept across turns, against re-encoding the whole conversation every turn and
against a single-turn rollout of the same model tokens (results in benchmarks/multi_turn_results.md).

Three rollouts of the same prompts through ``CausalLMPolicy.rollout`` on one model, measured side by side (interleaved,
``--repeats`` times each after a warm-up) and reported as ratios:

* **(a) kept cache**: ``policy.multi_turn`` with the static engine keeping each trajectory's KV cache between its turns
  (genalign/policies/lm/engines/turn_cache.py): a turn encodes the environment's answer, then decodes;
* **(b) re-encoded**: the same trajectories with ``multi_turn.keep_kv_cache=false``: every turn prefills the whole
  conversation so far (same seed: the same tokens, checked, and the log-prob gap printed);
* **(c) single turn**: no environment, one completion of ``turns × turn tokens`` per prompt: the same number of model
  tokens as (a) and (b) in one decode.

The environment answers each turn with a fixed message of ``--answer-words`` words for ``--turns`` turns. The model is a
Llama built from a config with random weights whose end tokens are made unreachable (:func:`without_end_tokens`), so
every turn runs its full budget and the three rollouts hold exactly the same number of model tokens (checked). The
multi-turn times include what the turn loop does besides the model (rendering the answers with the chat template,
the environment): reported separately as the share of the rollout spent outside the engine.

Usage::

    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 python benchmarks/bench_multi_turn.py [--repeats 5] [--json F]
    HF_HUB_OFFLINE=1 python benchmarks/bench_multi_turn.py --smoke    # a second: tiny model, 2 turns of 4 tokens
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from genalign.environments import Environment, ModelTurn, Observation, StepResult  # noqa: E402
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy  # noqa: E402
from genalign.policies.lm.multi_turn_options import MultiTurnOptions  # noqa: E402
from genalign.policies.lm.tiny import build_tiny_causal_lm  # noqa: E402

MODES = ("kept cache", "re-encoded", "single turn")


@dataclass(frozen=True)
class Workload:
    name: str
    prompts: int
    group: int
    turns: int
    turn_tokens: int
    answer_words: int
    prompt_words: int
    vocab: int
    hidden: int
    layers: int


#: the model of the full runs: a 4-layer Llama, hidden 256, vocabulary 2048 (4.2M parameters)
LLAMA = dict(vocab=2048, hidden=256, layers=4)
FULL = [
    Workload("short answers", prompts=8, group=4, turns=4, turn_tokens=32, answer_words=8, prompt_words=40, **LLAMA),
    Workload("long answers", prompts=8, group=4, turns=4, turn_tokens=32, answer_words=32, prompt_words=40, **LLAMA),
]
SMOKE = [Workload("smoke", prompts=2, group=2, turns=2, turn_tokens=4, answer_words=3, prompt_words=4, vocab=128,
                  hidden=32, layers=2)]  # fmt: skip


class FixedAnswers(Environment):
    """Answers every turn with the same ``words``-word message; done after ``turns`` turns."""

    def __init__(self, *, turns: int = 4, words: int = 24, **kwargs) -> None:
        super().__init__(**kwargs)
        self.turns, self.text = turns, " ".join(f"w{i}" for i in range(words))

    def step(self, turn: ModelTurn) -> StepResult:
        done = turn.index + 1 >= self.turns
        return StepResult(observation=None if done else Observation(self.text), done=done)


def without_end_tokens(model: torch.nn.Module, token_ids: list[int]) -> None:
    """Make ``token_ids`` impossible to sample: residual dimension 0 holds a constant (the embedding writes 1 there
    and no layer writes to it), which the head multiplies by -1e4 for those tokens and by 0 for the others, so their
    logits are ~-1e4 x the normalised constant at every position (an untied Llama head)."""
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 1.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0] = 0.0
            layer.mlp.down_proj.weight[0] = 0.0
        model.lm_head.weight[:, 0] = 0.0
        model.lm_head.weight[token_ids, 0] = -1e4


def build_model(directory: Path, work: Workload) -> Path:
    """A random Llama (``hidden`` wide, ``layers`` deep, ``vocab`` words) whose end-of-sequence token is unreachable."""
    from transformers import AutoModelForCausalLM

    path = build_tiny_causal_lm(directory, architecture="llama", vocab_size=work.vocab, hidden_size=work.hidden,
                                num_layers=work.layers, num_heads=4, num_kv_heads=4, intermediate_size=2 * work.hidden,
                                seed=0)  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(str(path))
    config = json.loads((path / "config.json").read_text())
    without_end_tokens(model, [config["eos_token_id"]])
    model.save_pretrained(str(path))
    return path


def policies(path: Path, work: Workload) -> dict[str, object]:
    """The three rollouts' policies, on the same weights."""
    environment = {"name": FixedAnswers, "turns": work.turns, "words": work.answer_words}
    common = dict(model=str(path), temperature=1.0, use_chat_template=True, max_prompt_tokens=None)
    out = {}
    for mode in MODES:
        if mode == "single turn":
            config = CausalLMPolicyConfig(**common, max_new_tokens=work.turns * work.turn_tokens)
        else:
            options = MultiTurnOptions(environments=environment, max_turns=work.turns,
                                       keep_kv_cache=mode == "kept cache")  # fmt: skip
            config = CausalLMPolicyConfig(**common, max_new_tokens=work.turn_tokens, multi_turn=options)
        out[mode] = build_policy(config, "cpu")
    return out


class EngineClock:
    """Wraps a policy's sampling engine and adds up the process CPU seconds spent in its ``generate`` calls."""

    def __init__(self, policy, attribute: str) -> None:
        self.engine, self.seconds = getattr(policy, attribute), 0.0
        setattr(policy, attribute, self)

    def generate(self, *args, **kwargs):
        start = time.process_time()
        try:
            return self.engine.generate(*args, **kwargs)
        finally:
            self.seconds += time.process_time() - start


@dataclass
class Result:
    workload: str
    mode: str
    model_tokens: int  # per rollout
    answer_tokens: int  # environment tokens per rollout (answers and the template's tokens around them)
    cpu_s: float  # process CPU seconds of one rollout, median over the repeats
    wall_s: float  # wall seconds, median
    engine_cpu_s: float  # CPU seconds inside the engine's generate calls, median
    tokens_per_cpu_s: float


def measure(work: Workload, repeats: int) -> tuple[list[Result], dict]:
    """The three rollouts of ``work``, interleaved: a warm-up round, then ``repeats`` measured rounds."""
    with tempfile.TemporaryDirectory() as tmp:
        path = build_model(Path(tmp) / "llama", work)
        by_mode = policies(path, work)
    clocks = {mode: EngineClock(p, "turn_engine" if p.turn_engine is not None else "engine")
              for mode, p in by_mode.items()}  # fmt: skip
    filler = " ".join(f"w{100 + i}" for i in range(work.prompt_words))
    rows = [{"prompt": f"what is {i} + {i + 1} ? {filler}"} for i in range(work.prompts)]
    cpu: dict[str, list[float]] = {mode: [] for mode in MODES}
    wall: dict[str, list[float]] = {mode: [] for mode in MODES}
    engine: dict[str, list[float]] = {mode: [] for mode in MODES}
    rollouts, checks = {}, []
    for repeat in range(repeats + 1):  # the first round warms up
        for mode in MODES:
            policy, clock = by_mode[mode], clocks[mode]
            policy.generator.manual_seed(repeat)
            clock.seconds = 0.0
            started_cpu, started = time.process_time(), time.perf_counter()
            rollouts[mode] = policy.rollout(rows, work.group)
            if repeat:
                cpu[mode].append(time.process_time() - started_cpu)
                wall[mode].append(time.perf_counter() - started)
                engine[mode].append(clock.seconds)
        checks.append(agreement(rollouts["kept cache"], rollouts["re-encoded"]))
    tokens = {mode: int(rollout.action_mask.sum()) for mode, rollout in rollouts.items()}
    expected = work.prompts * work.group * work.turns * work.turn_tokens
    if set(tokens.values()) != {expected}:
        raise AssertionError(f"model tokens per rollout {tokens}, expected {expected} in each (an end token sampled?)")
    results = []
    for mode, rollout in rollouts.items():
        attended = rollout.per_sample.get("completion_attention", rollout.action_mask)
        seconds = statistics.median(cpu[mode])
        results.append(Result(work.name, mode, expected, int((attended - rollout.action_mask).sum()), seconds,
                              statistics.median(wall[mode]), statistics.median(engine[mode]), expected / seconds))  # fmt: skip
    exactness = {
        "trajectories": sum(c["trajectories"] for c in checks),
        "identical": sum(c["identical"] for c in checks),
        "divergences": [pair for c in checks for pair in c["divergences"]],
        "max_abs_logp_gap": max(c["max_abs_logp_gap"] for c in checks),
    }
    return results, exactness


def agreement(kept, reencoded) -> dict:
    """How the same-seed rollouts (a) and (b) agree: trajectories whose tokens are identical, the token pair at each
    trajectory's first difference, and the largest behaviour log-prob gap on model tokens before it (after it the
    contexts differ)."""
    ids, other = kept.per_sample["completion_ids"], reencoded.per_sample["completion_ids"]  # [N, C] each
    if ids.shape != other.shape:
        raise AssertionError(f"completion widths differ: {tuple(ids.shape)} vs {tuple(other.shape)}")
    differ = ids != other  # [N, C]
    width = ids.shape[1]
    first = torch.where(differ.any(dim=1), differ.float().argmax(dim=1), width)  # [N]
    before = (torch.arange(width)[None, :] < first[:, None]) & (kept.action_mask > 0)  # [N, C]
    gap = (kept.old_logp - reencoded.old_logp).abs()[before]
    rows = torch.nonzero(first < width).flatten().tolist()
    return {
        "trajectories": len(ids),
        "identical": len(ids) - len(rows),
        "divergences": [(int(ids[r, first[r]]), int(other[r, first[r]])) for r in rows],
        "max_abs_logp_gap": float(gap.max()) if gap.numel() else 0.0,
    }


def table(results: list[Result], exactness: dict[str, dict]) -> str:
    lines = [
        "| workload | rollout | model tokens | answer tokens | CPU s | wall s | model tokens / CPU s | CPU time vs single "
        "turn | CPU time vs re-encoded | wall time vs single turn | CPU outside the engine |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        same = {x.mode: x for x in results if x.workload == r.workload}
        single, reencoded = same["single turn"], same["re-encoded"]
        lines.append(
            f"| {r.workload} | {r.mode} | {r.model_tokens} | {r.answer_tokens} | {r.cpu_s:.3f} | {r.wall_s:.3f} | "
            f"{r.tokens_per_cpu_s:.0f} | {r.cpu_s / single.cpu_s:.2f}x | {r.cpu_s / reencoded.cpu_s:.2f}x | "
            f"{r.wall_s / single.wall_s:.2f}x | {100 * (1 - r.engine_cpu_s / r.cpu_s):.0f} % |"
        )
    lines.append("")
    for name, check in exactness.items():
        pairs = check["divergences"]
        neighbours = sum(abs(a - b) == 1 for a, b in pairs)
        lines.append(
            f"{name}: kept cache vs re-encoded, same seeds: {check['identical']} of {check['trajectories']} "
            f"trajectories token-identical; {len(pairs)} diverged ({neighbours} of them first at neighbouring token "
            f"ids: {pairs}); max |delta logp| before divergence = {check['max_abs_logp_gap']:.2e}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="measured rollouts per mode (after one warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--smoke", action="store_true", help="tiny model, 2 prompts x 2, 2 turns of 4 tokens, 1 repeat")
    args = parser.parse_args()
    workloads = SMOKE if args.smoke else FULL
    repeats = 1 if args.smoke else args.repeats
    torch.set_num_threads(args.threads)
    results, exactness = [], {}
    for work in workloads:
        measured, exactness[work.name] = measure(work, repeats)
        results += measured
        print(f"{work.name}: {asdict(work)}")
    print(f"repeats={repeats} threads={args.threads}")
    print(table(results, exactness))
    if args.json is not None:
        report = {"workloads": [asdict(w) for w in workloads], "results": [asdict(r) for r in results],
                  "exactness": exactness}  # fmt: skip
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
