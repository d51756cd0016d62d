"""Multi-turn rollouts of the causal-LM family (``policy.multi_turn``): the tokens scored are the tokens sampled, the
first ratio is exactly 1 on model tokens, environment tokens get no gradient, scores do not depend on the micro-batch
split, a chat template that is not prefix-preserving is refused, failures of tools and environments are counted and
never stop the run, and a TRL-style environment and a plain tool list train from Python and from YAML."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import itertools
import json
import sys
from pathlib import Path

import pytest
import torch
import yaml

from genalign.config import from_dict
from genalign.config.schema import TrainConfig
from genalign.policies.base import RolloutRequest, ScoreRequest
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.chat_turns import TemplateNotPrefixPreserving
from genalign.policies.lm.multi_turn_options import MultiTurnOptions
from genalign.policies.lm.tiny import build_tiny_causal_lm
from tests import prepared_python

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[3]
HERE = "tests.policies.lm.scripted_environments"
ROWS = [{"prompt": "1 + 2 ="}, {"prompt": "what is 3 * 4 ? answer :"}]
STRUCTURE = RolloutRequest(structure=frozenset({"turn_ids", "turn_rewards", "tool_calls", "truncated"}))


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return build_tiny_causal_lm(tmp_path_factory.mktemp("models") / "qwen2", vocab_size=96)


def make_policy(model_path, environments, engine="static", stop=(), **multi_turn):
    options = MultiTurnOptions(environments=environments, **multi_turn)
    config = CausalLMPolicyConfig(model=str(model_path), max_new_tokens=5, temperature=0.9, use_chat_template=True,
                                  engine=engine, multi_turn=options, stop=list(stop))  # fmt: skip
    return build_policy(config, "cpu")


#: the engines of a multi-turn rollout: static with the KV cache kept between turns, static re-encoding, hf
SAMPLERS = {"static": {}, "static_re_encoding": {"keep_kv_cache": False}, "hf": {"engine": "hf"}}


class Recorder:
    """Wraps the engine that samples the turns (``turn_engine`` when it keeps the caches, else ``engine``) and keeps
    what each call sampled, per row."""

    def __init__(self, policy):
        self.attribute = "turn_engine" if policy.turn_engine is not None else "engine"
        self.engine, self.calls = getattr(policy, self.attribute), []
        setattr(policy, self.attribute, self)

    def generate(self, *args, **kwargs):
        generation = self.engine.generate(*args, **kwargs)
        lengths = generation.completion_mask.sum(1).long().tolist()
        self.calls.append([generation.completion_ids[i, :n].tolist() for i, n in enumerate(lengths)])
        return generation


def scores(policy, rollout, parts=1):
    bounds = torch.linspace(0, len(rollout), parts + 1).long().tolist()
    with torch.no_grad():
        return torch.cat([policy.score(rollout.select(range(a, b))).logp for a, b in itertools.pairwise(bounds)])


@pytest.mark.parametrize("sampler", list(SAMPLERS))
def test_tokens_scored_are_tokens_sampled_and_the_first_ratio_is_one(model_path, sampler):
    policy = make_policy(model_path, f"{HERE}:Scripted", **SAMPLERS[sampler])
    recorder = Recorder(policy)
    assert recorder.attribute == ("turn_engine" if sampler == "static" else "engine")
    rollout = policy.rollout(ROWS, 3, request=STRUCTURE)
    mask = rollout.action_mask > 0
    ids = rollout.per_sample["completion_ids"]
    attention = rollout.per_sample["completion_attention"] > 0
    # every sample took 3 turns (the engine saw the 6 samples, then the active ones), environment tokens between
    assert [len(call) for call in recorder.calls] == [6, 6, 6]
    for i in range(len(rollout)):
        sampled = [token for call in recorder.calls for token in call[i]]
        assert ids[i][mask[i]].tolist() == sampled, "the model tokens are the sampled tokens, in order"
        assert bool((attention[i] & ~mask[i]).any()), "environment tokens are context between the turns"
    turn_ids = rollout.structure["turn_ids"]
    assert turn_ids.max() == 2 and bool((turn_ids.diff(dim=1) >= 0).all())
    assert torch.allclose(rollout.structure["turn_rewards"], torch.tensor([0.0, 0.1, 0.2]).expand(6, 3))
    assert not rollout.structure["truncated"].any() and rollout.counts["turns"] == 18
    assert all(row["environment_reward"] == 0.5 for row in rollout.rows)
    whole = scores(policy, rollout)
    assert torch.equal(whole, scores(policy, rollout)), "re-scoring is exact: the first ratio is exactly 1"
    assert torch.equal(whole, scores(policy, rollout, parts=2)), "independent of the micro-batch split"
    assert torch.equal(whole, scores(policy, rollout, parts=6))
    assert bool((whole[~mask] == 0).all()) and bool((rollout.old_logp[~mask] == 0).all())
    # the sampler's log-probs (KV cache) are the scored ones up to float rounding: same tokens, same positions
    assert torch.allclose(whole[mask], rollout.old_logp[mask], atol=1e-4)


def test_the_kept_kv_cache_samples_what_re_encoding_samples(model_path):
    """Same seed, float32 CPU: rows end after 2, 3 and 4 turns (they drop out of the cache), answers differ in
    length, turns end at different steps (stop strings): the tokens are identical and the behaviour log-probs agree
    to 1e-5 (the same context computed in other chunks: prompt, decoded tokens, answers, instead of one prefill)."""
    environments = {"a": {"name": f"{HERE}:Scripted", "turns": 2},
                    "b": {"name": f"{HERE}:Scripted", "turns": 4, "observation": "w1 w2 w3 w4 w5 w6 w7"},
                    "c": {"name": f"{HERE}:Scripted", "turns": 3}}  # fmt: skip
    rows = [{**row, "env": env} for row, env in zip([*ROWS, {"prompt": "a b"}], "abc")]
    rollouts = []
    for keep in (True, False):
        policy = make_policy(model_path, environments, stop=("a",), keep_kv_cache=keep)
        assert (policy.turn_engine is not None) == keep
        rollouts.append(policy.rollout(rows, 4, request=STRUCTURE))
    kept, re_encoded = rollouts
    assert torch.equal(kept.per_sample["completion_ids"], re_encoded.per_sample["completion_ids"])
    assert torch.equal(kept.action_mask, re_encoded.action_mask)
    assert float((kept.old_logp - re_encoded.old_logp).abs().max()) <= 1e-5
    assert kept.structure["turn_ids"].max(dim=1).values.tolist() == [1] * 4 + [3] * 4 + [2] * 4
    lengths = kept.action_mask.sum(1)
    assert len(set(lengths.tolist())) > 3, "turns of different lengths"
    assert kept.counts == re_encoded.counts


def test_a_huge_advantage_on_environment_tokens_gives_no_gradient(model_path):
    policy = make_policy(model_path, f"{HERE}:Scripted")
    rollout = policy.rollout(ROWS, 2)
    environment = (rollout.per_sample["completion_attention"] > 0) & (rollout.action_mask == 0)
    assert bool(environment.any())
    policy.model.train()

    def gradients(advantages):
        policy.model.zero_grad()
        out = policy.score(rollout, ScoreRequest.of("entropy"))
        (-(advantages * out.logp).sum() - (advantages * out.features["entropy"]).sum()).backward()
        return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in policy.trainable_parameters()]

    on_environment = gradients(torch.where(environment, 1e9, 0.0))
    assert all(bool((g == 0).all()) for g in on_environment), "environment tokens carry no gradient"
    on_model = gradients((rollout.action_mask > 0).float())
    assert any(bool((g != 0).any()) for g in on_model)


def test_a_template_that_is_not_prefix_preserving_is_refused(model_path):
    numbered = "{{ messages | length }} {% for m in messages %}{{ m['role'] }} : {{ m['content'] }} ; {% endfor %}"
    options = MultiTurnOptions(environments=f"{HERE}:Scripted")
    config = CausalLMPolicyConfig(model=str(model_path), use_chat_template=True, chat_template=numbered,
                                  multi_turn=options)  # fmt: skip
    with pytest.raises(TemplateNotPrefixPreserving, match=r"not prefix-preserving.*policy.chat_template"):
        build_policy(config, "cpu")


def test_tool_and_environment_failures_are_counted_and_never_stop_the_run(model_path):
    policy = make_policy(model_path, f"{HERE}:ScriptedTools", max_turns=6)
    rollout = policy.rollout(ROWS[:1], 2, request=STRUCTURE)
    info = rollout.counts
    assert info["tools/bad_json"] == 2 and info["tools/unknown_tool"] == 2 and info["tools/tool_error"] == 2
    assert info["tools/timeout"] == 2 and info["tools/truncated"] == 2 and info["tools/ok"] == 4
    assert info["tools/calls"] == 12 and rollout.structure["tool_calls"].tolist() == [6, 6]
    assert info["turns"] == 10 and not rollout.structure["truncated"].any()
    for kind, count in (("RaisesInReset", "reset"), ("RaisesInStep", "step"), ("RaisesInReward", "reward")):
        policy = make_policy(model_path, f"{HERE}:{kind}")
        rollout = policy.rollout(ROWS, 2)
        assert rollout.counts[f"environment_errors/{count}"] == 4, kind
        assert len(rollout) == 4 and len(policy.environment_failures) == (0 if count == "reward" else 4)
        assert all(row["environment_reward"] is None for row in rollout.rows)
    assert rollout.counts["turns"] == 12  # RaisesInReward: its episodes ran to their end


def test_limits_end_trajectories_as_truncated(model_path):
    policy = make_policy(model_path, {"name": f"{HERE}:Scripted", "turns": 5}, max_turns=2)
    rollout = policy.rollout(ROWS, 2, request=STRUCTURE)
    assert rollout.structure["truncated"].all() and rollout.counts["turns"] == 8
    policy = make_policy(model_path, f"{HERE}:Scripted", max_observation_tokens=1)
    rollout = policy.rollout(ROWS, 2, request=STRUCTURE)
    assert rollout.structure["truncated"].all() and rollout.counts["observations_too_long"] == 4
    assert (rollout.per_sample["completion_attention"] == rollout.action_mask).all(), "the answer is not appended"


def test_config_errors_name_the_field_and_the_fix(model_path):
    with pytest.raises(ValueError, match=r"policy.multi_turn.max_turns=0 must be >= 1"):
        make_policy(model_path, f"{HERE}:Scripted", max_turns=0)
    with pytest.raises(ValueError, match=r"policy.multi_turn.environments: .*guess_numbr.*guess_number"):
        make_policy(model_path, "guess_numbr")
    with pytest.raises(ValueError, match=r"policy.multi_turn.tool_limits: .*timeout_sec.*timeout_s"):
        make_policy(model_path, "guess_number", tool_limits={"timeout_sec": 1})
    config = CausalLMPolicyConfig(model=str(model_path), multi_turn=MultiTurnOptions(environments="guess_number"))
    with pytest.raises(ValueError, match="use_chat_template=true"):
        config.validate()


def test_single_turn_policies_are_unchanged(model_path):
    config = CausalLMPolicyConfig(model=str(model_path), max_new_tokens=5)
    policy = build_policy(config, "cpu")
    assert "completion_attention" not in policy.rollout(ROWS, 2).per_sample
    assert policy.capabilities.forced_completions and "turn_ids" not in policy.capabilities.signals


def training_config(model_path, environments, output_dir) -> dict:
    """Two steps of a tiny multi-turn run: the environment's reward, else the contract test's reward."""
    return {
        "policy": {"family": "causal_lm", "model": str(model_path), "max_new_tokens": 4, "max_prompt_tokens": 128,
                   "use_chat_template": True, "multi_turn": {"environments": environments, "max_turns": 2,
                                                            "tool_limits": {"timeout_s": 5}}},
        "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 16, "seed": 0, "digits": 1}}},
        "rewards": [{"fn": "environment", "args": {"fallback": "tests.policies.contract_reward:contract_reward"}}],
        "algorithm": {"group_size": 2, "prompts_per_step": 2, "micro_batch_size": 2, "inner_epochs": 2},
        "optim": {"lr": 1.0e-3},
        "eval": {"at_start": False},
        "run": {"output_dir": str(output_dir), "max_steps": 2, "save_every": 0, "sample_every": 0,
                "num_threads": 1, "progress_bar": False},
    }  # fmt: skip


ENVIRONMENTS = {
    "trl_class": f"{HERE}:CountdownTRL",
    "tool_list": {"name": "tools", "tools": ["calculator", f"{HERE}:add"]},
}


@pytest.mark.parametrize("kind", list(ENVIRONMENTS))
def test_trains_from_python(model_path, tmp_path, kind):
    from genalign.trainer.recipe import train
    from tests.policies.lm.scripted_environments import CountdownTRL, add

    objects = {"trl_class": CountdownTRL, "tool_list": {"name": "tools", "tools": ["calculator", add]}}
    config = from_dict(TrainConfig, training_config(model_path, objects[kind], tmp_path / "run"))
    train(config)
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["policy"]["multi_turn"]["environments"]
    assert saved == ENVIRONMENTS[kind], "the Python objects are saved by import path"
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["rollout/turns"] >= 4 and r["rollout/trajectories"] == 4 for r in records)
    assert all("rollout/tools/calls" in r for r in records)


def test_trains_from_yaml_with_the_cli(model_path, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(training_config(model_path, ENVIRONMENTS["trl_class"], tmp_path / "run")))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = prepared_python.run([sys.executable, "-m", "genalign.cli", "train", str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 2


def test_an_unknown_multi_turn_key_is_refused_with_a_suggestion(model_path, tmp_path):
    data = training_config(model_path, f"{HERE}:Scripted", tmp_path / "run")
    data["policy"]["multi_turn"]["max_turn"] = 3
    with pytest.raises(ValueError, match=r"max_turn.*max_turns"):
        from_dict(TrainConfig, data)


def test_the_environment_reward_falls_back_where_the_environment_owns_none():
    from genalign.rewards import reward_factory

    reward = reward_factory("environment")(fallback={"fn": "exact_match"})
    scores = reward(["p", "p", "p"], ["4", "5", "x"], environment_reward=[0.25, None, None], answer=["4", "5", "4"])
    assert scores == [0.25, 1.0, 0.0]
    assert reward_factory("environment")()(["p"], ["4"], environment_reward=[None]) == [None]


CALL = '<tool_call>{"name":"add","arguments":{"a":1,"b":2}}</tool_call>'


def test_a_tool_call_the_model_writes_runs_and_its_answer_is_the_next_context(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from genalign.policies.lm.engines import Generation
    from genalign.policies.lm.tiny import CHAT_TEMPLATE, tiny_vocabulary

    vocab = {word: i for i, word in enumerate([*tiny_vocabulary(95), CALL])}  # the call is one word of the vocabulary
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>",
                                        bos_token="<bos>", unk_token="<unk>")  # fmt: skip
    tokenizer.chat_template = CHAT_TEMPLATE
    path = build_tiny_causal_lm(tmp_path / "model", vocab_size=96, tokenizer=tokenizer)
    policy = make_policy(path, {"name": "tools", "tools": [f"{HERE}:add"]})
    engine, call, eos = policy.turn_engine, vocab[CALL], tokenizer.eos_token_id

    class CallsFirst:  # the first turn writes the call (a random tiny model would not), later turns are sampled
        calls = 0  # (the sampled turns continue a KV cache that holds nothing of the written one: it is rebuilt)

        def generate(self, caches, keys, contexts, params, generator):
            self.calls += 1
            if self.calls > 1:
                return engine.generate(caches, keys, contexts, params, generator)
            rows = len(keys)
            return Generation(torch.tensor([[call, eos]] * rows), torch.ones(rows, 2), torch.full((rows, 2), -1.0),
                              torch.zeros(rows, dtype=torch.bool))  # fmt: skip

    policy.turn_engine = CallsFirst()
    rollout = policy.rollout(ROWS[:1], 2, request=STRUCTURE)
    assert rollout.counts["tools/ok"] == 2 and rollout.structure["tool_calls"].tolist() == [1, 1]
    for i in range(2):
        ids, mask = rollout.per_sample["completion_ids"][i], rollout.action_mask[i] > 0
        assert ids[:2].tolist() == [call, eos] and mask[:2].all()
        answer = ids[2 : int(torch.nonzero(mask[2:])[0]) + 2]  # the environment tokens before the next turn
        assert tokenizer.decode(answer) == "; <unk> : 3 ; assistant :"  # "tool : 3 ; assistant : " rendered


def test_a_row_naming_no_environment_of_the_run_is_a_data_error(model_path):
    policy = make_policy(model_path, {"a": f"{HERE}:Scripted", "b": f"{HERE}:ScriptedTools"})
    with pytest.raises(Exception, match="'c'"):
        policy.rollout([{"prompt": "1 + 2 =", "env": "c"}], 1)
    rollout = policy.rollout(
        [{"prompt": "1 + 2 =", "env": "a"}, {"prompt": "1 + 2 =", "env": "b"}], 1, request=STRUCTURE
    )
    assert rollout.structure["tool_calls"].tolist() == [0, 5]  # max_turns=4: 1 + 1 + 1 + 2 calls


def test_a_guidance_hint_conditions_the_prompt_and_never_reaches_the_environment(model_path):
    """RC-GRPO's reward-goal tokens [128] reach a multi-turn rollout as a guidance ``hint``: added to the user prompt
    (prompt ids, never actions); the environment's ``reset`` gets the row's columns without the guidance."""
    from genalign.policies.base import GUIDANCE_KEY
    from tests.policies.lm.scripted_environments import RowEcho

    policy = make_policy(model_path, {"name": f"{HERE}:RowEcho", "turns": 1})
    assert policy.config.capabilities().guidance == frozenset({"hint"})
    RowEcho.seen_rows.clear()
    rows = [{"prompt": "1 + 2 =", GUIDANCE_KEY: {"hint": " answer"}}, {"prompt": "1 + 2 ="}]  # words of the tiny vocab
    rollout = policy.rollout(rows, 1, request=STRUCTURE)
    prompts = [policy.tokenizer.decode(ids[mask > 0]) for ids, mask in
               zip(rollout.per_sample["prompt_ids"], rollout.per_sample["prompt_mask"])]  # fmt: skip
    assert "1 + 2 = answer" in prompts[0] and "answer" not in prompts[1]
    assert RowEcho.seen_rows == [{"prompt": "1 + 2 ="}, {"prompt": "1 + 2 ="}]
    assert rollout.rows[0]["prompt"] == "1 + 2 ="  # the data's prompt; the hint is in the ids
