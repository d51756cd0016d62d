"""Causal-LM policy adapter: on-policy exactness, masks, chunked log-probs, token features, rollout structure, LoRA,
reference model, prompts, resumable state, config."""

from __future__ import annotations

import io
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.algorithms import bind_vocab_term
from genalign.policies.base import Policy, PolicyCapabilities, RolloutRequest, ScoreRequest
from genalign.policies.lm.causal import CausalLMPolicyConfig, LoRAConfig, build_policy
from genalign.policies.lm.logprobs import (
    naive_completion_logprobs,
    position_ids_from_mask,
    token_scores_from_hidden,
)
from genalign.policies.lm.tiny import build_tiny_causal_lm

torch.set_num_threads(1)
PROMPTS = [{"prompt": "1 + 2 ="}, {"prompt": "what is 3 * 4 ? answer :"}, {"prompt": "a b c"}]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {arch: build_tiny_causal_lm(root / arch, architecture=arch, vocab_size=96) for arch in ("qwen2", "llama")}


def make_policy(model_dirs, arch="qwen2", **overrides):
    config = CausalLMPolicyConfig(model=str(model_dirs[arch]), max_new_tokens=8)
    for key, value in overrides.items():
        setattr(config, key, value)
    return build_policy(config, "cpu")


def test_policy_satisfies_the_protocol(model_dirs):
    assert isinstance(make_policy(model_dirs), Policy)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("engine", ["hf", "static"])
def test_score_reproduces_rollout_and_is_micro_batch_invariant(model_dirs, arch, engine):
    policy = make_policy(model_dirs, arch, engine=engine, temperature=0.9)
    rollout = policy.rollout(PROMPTS, group_size=3)
    assert len(rollout) == 9 and rollout.group_ids.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    with torch.no_grad():
        first = policy.score(rollout).logp
        second = policy.score(rollout).logp
        pieces = torch.cat([policy.score(rollout.select(idx)).logp for idx in ([0, 1], [2, 3, 4, 5], [6, 7, 8])])
    assert torch.equal(first, second)
    assert (first - pieces).abs().max().item() <= 1e-6
    assert (first - rollout.old_logp).abs().max().item() < 1e-4  # behaviour log-probs from the engine's KV cache
    assert torch.all(first[rollout.action_mask == 0] == 0)
    assert policy.capabilities.rollout_logp_is_exact is False


def test_masks_include_eos_exclude_padding_and_flag_truncation(model_dirs):
    policy = make_policy(model_dirs, max_new_tokens=6)
    eos = policy.tokenizer.eos_token_id
    head = policy.hf_model.get_output_embeddings()
    head.bias = torch.nn.Parameter(torch.zeros(head.out_features).index_fill(0, torch.tensor([eos]), 2.5))
    rollout = policy.rollout(PROMPTS, group_size=4)
    data = rollout.per_sample
    lengths = rollout.action_mask.sum(1).long()
    for row in range(len(rollout)):
        n = int(lengths[row])
        ids = data["completion_ids"][row]
        ended = ids[n - 1].item() == eos
        assert eos not in ids[: n - 1].tolist()
        assert bool(rollout.structure.get("truncated")[row]) == (not ended)
        assert not ended or data["completion_ids"][row, n:].eq(policy.pad_token_id).all()
        if rollout.structure.get("truncated")[row]:
            assert n == 6
    assert data["prompt_mask"][:, 0].sum() < len(rollout), "prompts are left-padded"
    assert data["prompt_mask"][:, -1].all()
    assert rollout.counts["completion_tokens"] == int(lengths.sum())


def test_empty_completion_has_exactly_one_action(model_dirs):
    policy = make_policy(model_dirs)
    eos = policy.tokenizer.eos_token_id
    head = policy.hf_model.get_output_embeddings()
    head.bias = torch.nn.Parameter(torch.zeros(head.out_features).index_fill(0, torch.tensor([eos]), 50.0))
    rollout = policy.rollout(PROMPTS[:1], group_size=2)
    assert rollout.outputs == ["", ""]
    assert rollout.action_mask.tolist() == [[1.0], [1.0]]
    score = policy.score(rollout)
    assert score.logp.shape == (2, 1) and torch.isfinite(score.logp).all()


def test_stop_strings_end_the_completion_and_are_cut_from_text(model_dirs):
    policy = make_policy(model_dirs, stop=["STOP"], max_new_tokens=10)
    stop_id = policy.tokenizer.convert_tokens_to_ids("STOP")
    head = policy.hf_model.get_output_embeddings()
    head.bias = torch.nn.Parameter(torch.zeros(head.out_features).index_fill(0, torch.tensor([stop_id]), 4.0))
    rollout = policy.rollout(PROMPTS[:1], group_size=8)
    stopped = ~rollout.structure.get("truncated")
    assert stopped.sum() >= 4
    for row in torch.nonzero(stopped).flatten().tolist():
        n = int(rollout.action_mask[row].sum())
        assert rollout.per_sample["completion_ids"][row, n - 1].item() == stop_id
        assert "STOP" not in rollout.outputs[row]


@pytest.mark.parametrize("chunk_size", [1, 5, 1000])
def test_chunked_logprobs_and_entropy_equal_the_naive_full_logits(model_dirs, chunk_size):
    policy = make_policy(model_dirs, logprob_chunk_size=chunk_size, temperature=0.7)
    rollout = policy.rollout(PROMPTS, group_size=2)
    data = rollout.per_sample
    score = policy.score(rollout, ScoreRequest.of("entropy"))
    naive = naive_completion_logprobs(
        policy.hf_model,
        data["prompt_ids"],
        data["prompt_mask"],
        data["completion_ids"],
        data["completion_mask"],
        temperature=0.7,
    )
    torch.testing.assert_close(score.logp, naive, atol=1e-5, rtol=0)
    # Entropy by hand for one token.
    hidden = torch.randn(1, 1, policy.hf_model.config.hidden_size)
    head = policy.hf_model.get_output_embeddings()
    entropy = token_scores_from_hidden(
        hidden, torch.tensor([[3]]), torch.ones(1, 1), head, temperature=0.7, chunk_size=chunk_size, with_entropy=True
    ).entropy
    probs = (head(hidden[0, 0]) / 0.7).softmax(-1)
    assert entropy.item() == pytest.approx(-(probs * probs.log()).sum().item(), abs=1e-5)


def test_chunked_gradients_equal_naive_gradients(model_dirs):
    policy = make_policy(model_dirs, logprob_chunk_size=3)
    rollout = policy.rollout(PROMPTS, group_size=2)
    data = rollout.per_sample
    policy.score(rollout).logp.sum().backward()
    chunked = [p.grad.clone() for p in policy.trainable_parameters()]
    policy.model.zero_grad()
    naive_completion_logprobs(
        policy.hf_model,
        data["prompt_ids"],
        data["prompt_mask"],
        data["completion_ids"],
        data["completion_mask"],
        temperature=1.0,
    ).sum().backward()
    for a, b in zip(chunked, [p.grad for p in policy.trainable_parameters()], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def _lora_policy(model_dirs, **overrides):
    policy = make_policy(model_dirs, lora=LoRAConfig(rank=4, alpha=8.0), **overrides)
    torch.manual_seed(5)
    for name, param in policy.model.named_parameters():
        if "lora_B" in name:
            param.data.normal_(0, 0.5)  # LoRA starts as the identity; make it change the outputs
    return policy


def test_lora_trains_only_adapters_and_roundtrips_through_save_load(model_dirs, tmp_path):
    policy = _lora_policy(model_dirs)
    trainable = {id(p) for p in policy.trainable_parameters()}
    assert trainable and all("lora_" in n for n, p in policy.model.named_parameters() if id(p) in trainable)
    rollout = policy.rollout(PROMPTS, group_size=2)
    policy.score(rollout).logp.sum().backward()
    for name, param in policy.model.named_parameters():
        assert (param.grad is not None) == ("lora_" in name), name
    policy.save(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "adapter_model.safetensors").exists()
    assert not (tmp_path / "ckpt" / "model.safetensors").exists()
    fresh = make_policy(model_dirs, lora=LoRAConfig(rank=4, alpha=8.0))
    with torch.no_grad():
        assert not torch.allclose(fresh.score(rollout).logp, policy.score(rollout).logp)
        fresh.load(tmp_path / "ckpt")
        torch.testing.assert_close(fresh.score(rollout).logp, policy.score(rollout).logp, atol=0, rtol=0)


def test_full_weights_roundtrip_and_mismatched_checkpoint_errors(model_dirs, tmp_path):
    policy = make_policy(model_dirs)
    with torch.no_grad():
        for param in policy.trainable_parameters():
            param.add_(0.01)
    rollout = policy.rollout(PROMPTS, group_size=1)
    policy.save(tmp_path / "full")
    fresh = make_policy(model_dirs)
    fresh.load(tmp_path / "full")
    with torch.no_grad():
        torch.testing.assert_close(fresh.score(rollout).logp, policy.score(rollout).logp, atol=0, rtol=0)
    with pytest.raises(FileNotFoundError, match="LoRA"):
        _lora_policy(model_dirs).save(tmp_path / "lora") or fresh.load(tmp_path / "lora")


def test_reference_with_adapters_disabled_equals_the_base_model(model_dirs):
    policy = _lora_policy(model_dirs)
    base = make_policy(model_dirs)
    rollout = policy.rollout(PROMPTS, group_size=2)
    with torch.no_grad():
        torch.testing.assert_close(policy.reference_logprobs(rollout), base.score(rollout).logp, atol=1e-6, rtol=0)
    score = policy.score(rollout, ScoreRequest.of(kl="k3"))
    assert score["kl"].shape == rollout.action_mask.shape and (score["kl"] >= 0).all() and score["kl"].sum() > 0


def test_frozen_copy_reference_is_lazy_and_kl_is_zero_before_updates(model_dirs):
    policy = make_policy(model_dirs, reference="auto")
    assert policy.reference.mode == "frozen_copy" and not policy.reference.loaded
    rollout = policy.rollout(PROMPTS, group_size=2)
    assert not policy.reference.loaded
    score = policy.score(rollout, ScoreRequest.of(kl="k3"))
    assert policy.reference.loaded
    assert score["kl"].abs().max().item() < 1e-6
    with torch.no_grad():
        for param in policy.trainable_parameters():
            param.add_(0.05 * torch.randn_like(param))
    assert policy.score(rollout, ScoreRequest.of(kl="k3"))["kl"].sum() > 0
    none_policy = make_policy(model_dirs, reference="none")
    with pytest.raises(ValueError, match="reference='none'"):
        none_policy.score(rollout, ScoreRequest.of(kl="k1"))


def test_reference_log_probs_come_from_the_kl_reference_pass(model_dirs):
    """``ref_logp`` (the preference objectives' reference) is the reference's scoring of the stored actions, from the
    same single reference pass as the KL when both are asked."""
    policy = _lora_policy(model_dirs)
    rollout = policy.rollout(PROMPTS, group_size=2)
    calls = []
    reference_logprobs = policy.reference_logprobs
    policy.reference_logprobs = lambda r: calls.append(1) or reference_logprobs(r)
    with torch.no_grad():
        score = policy.score(rollout, ScoreRequest.of("ref_logp", kl="k1"))
        expected = reference_logprobs(rollout)
    assert len(calls) == 1 and not score["ref_logp"].requires_grad
    torch.testing.assert_close(score["ref_logp"], expected, atol=0, rtol=0)
    torch.testing.assert_close(score["kl"], (score.logp - score["ref_logp"]) * rollout.action_mask, atol=0, rtol=0)
    assert (score.logp - score["ref_logp"]).abs().max() > 0.01  # the adapters moved the policy off the reference
    with pytest.raises(ValueError, match="reference='none'"):
        make_policy(model_dirs, reference="none").score(rollout, ScoreRequest.of("ref_logp"))


def test_reference_entropy_comes_from_the_reference_pass(model_dirs):
    policy = make_policy(model_dirs, reference="auto")
    rollout = policy.rollout(PROMPTS, group_size=2)
    with torch.no_grad():
        before = policy.score(rollout, ScoreRequest.of("entropy", "ref_entropy", kl="k3"))
    torch.testing.assert_close(before["ref_entropy"], before["entropy"] * rollout.action_mask, atol=1e-5, rtol=1e-5)
    assert before["kl"].abs().max().item() < 1e-6  # one reference pass gives both
    with torch.no_grad():
        for param in policy.trainable_parameters():
            param.add_(0.05 * torch.randn_like(param))
        after = policy.score(rollout, ScoreRequest.of("entropy", "ref_entropy"))
    torch.testing.assert_close(after["ref_entropy"], before["ref_entropy"])  # the reference did not move
    assert not torch.allclose(after["entropy"], before["entropy"])


def test_gradient_checkpointing_gives_the_same_gradients(model_dirs):
    plain = make_policy(model_dirs)
    checkpointed = make_policy(model_dirs, gradient_checkpointing=True)
    rollout = plain.rollout(PROMPTS, group_size=2)
    for policy in (plain, checkpointed):
        policy.model.train()
        policy.score(rollout).logp.sum().backward()
    for a, b in zip(plain.trainable_parameters(), checkpointed.trainable_parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-6, rtol=1e-5)


def test_long_prompts_error_truncate_or_skip_with_counts(model_dirs):
    rows = [{"prompt": "1 + 2 ="}, {"prompt": " ".join("abcdefghij")}]
    with pytest.raises(ValueError, match=r"row 1 of the batch: prompt has 10 tokens.*max_prompt_tokens=5"):
        make_policy(model_dirs, max_prompt_tokens=5).rollout(rows, group_size=2)
    truncated = make_policy(model_dirs, max_prompt_tokens=5, on_long_prompt="truncate_left").rollout(rows, group_size=2)
    assert truncated.counts["prompts_truncated"] == 1 and len(truncated) == 4
    assert truncated.per_sample["prompt_ids"].shape[1] == 5
    kept_tokens = truncated.per_sample["prompt_ids"][2].tolist()
    assert kept_tokens == make_policy(model_dirs).tokenizer("f g h i j")["input_ids"]
    skipped = make_policy(model_dirs, max_prompt_tokens=5, on_long_prompt="skip").rollout(rows, group_size=2)
    assert skipped.counts["prompts_skipped_too_long"] == 1 and len(skipped) == 2
    assert [r["prompt"] for r in skipped.rows] == ["1 + 2 ="] * 2
    all_skipped = make_policy(model_dirs, max_prompt_tokens=1, on_long_prompt="skip").rollout(rows, group_size=2)
    assert len(all_skipped) == 0 and all_skipped.counts["prompts_skipped_too_long"] == 2


def test_chat_template_with_system_prompt_and_message_lists(model_dirs):
    policy = make_policy(model_dirs, use_chat_template=True, system_prompt="answer")
    rollout = policy.rollout([{"prompt": "1 + 2"}, {"prompt": [{"role": "user", "content": "3 + 4"}]}], group_size=1)
    decoded = [policy.tokenizer.decode(ids[mask.bool()]) for ids, mask in zip(*rollout_prompt(rollout), strict=True)]
    assert decoded == ["system : answer ; user : 1 + 2 ; assistant :", "system : answer ; user : 3 + 4 ; assistant :"]
    with pytest.raises(TypeError, match="use_chat_template"):
        make_policy(model_dirs).rollout([{"prompt": [{"role": "user", "content": "1"}]}], group_size=1)
    with pytest.raises(KeyError, match="no 'prompt' column"):
        make_policy(model_dirs).rollout([{"question": "1"}], group_size=1)


def rollout_prompt(rollout):
    return rollout.per_sample["prompt_ids"], rollout.per_sample["prompt_mask"]


def _saved_and_loaded(state):
    """``state`` through ``torch.save`` / ``torch.load(weights_only=True)``, as the trainer's checkpoints do."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_state_dict_roundtrip_restores_the_sampler(model_dirs):
    policy = make_policy(model_dirs)
    policy.rollout(PROMPTS, group_size=2)  # move the generator away from its seed
    state = _saved_and_loaded(policy.state_dict())
    assert set(state) == {"generator"}
    after_save = policy.rollout(PROMPTS, group_size=2)
    resumed = make_policy(model_dirs)  # a fresh process resuming from the checkpoint
    resumed.load_state_dict(state)
    again = resumed.rollout(PROMPTS, group_size=2)
    assert again.outputs == after_save.outputs
    assert torch.equal(again.per_sample["completion_ids"], after_save.per_sample["completion_ids"])
    with pytest.raises(ValueError, match=r"policy state holds \['generator', 'seed_generator'\]"):
        resumed.load_state_dict(state | {"seed_generator": state["generator"]})


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"temperature": 0.0}, "policy.temperature=0.0"),
        ({"top_p": 1.5}, "policy.top_p=1.5"),
        ({"lora": LoRAConfig(rank=-1)}, "policy.lora.rank=-1"),
        ({"reference": "lora_disabled"}, "lora_disabled"),
        ({"system_prompt": "hi"}, "use_chat_template"),
        ({"stop": [""]}, "empty string"),
    ],
)
def test_config_validation_names_field_value_and_fix(overrides, message):
    config = CausalLMPolicyConfig(**overrides)
    with pytest.raises(ValueError, match=message):
        config.validate()


@pytest.mark.parametrize("fused", [True, False])
def test_head_logprob_and_entropy_gradients_equal_autograd_through_full_logits(fused):
    """The fused linear-head function (and the checkpointed fallback) against plain autograd on full logits."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(6, 11, bias=True).double()
    head = linear if fused else torch.nn.Sequential(linear)
    hidden = torch.randn(2, 5, 6, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 11, (2, 5))
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    weights_logp, weights_entropy = torch.randn(2, 5), torch.randn(2, 5)

    def objective(logp, entropy):
        return (logp * weights_logp).sum() + (entropy * weights_entropy).sum()

    scores = token_scores_from_hidden(hidden, targets, mask, head, temperature=0.7, chunk_size=3, with_entropy=True)
    logp, entropy = scores.logp, scores.entropy
    objective(logp, entropy).backward()
    got = [hidden.grad.clone(), linear.weight.grad.clone(), linear.bias.grad.clone()]
    for tensor in (hidden, linear.weight, linear.bias):
        tensor.grad = None
    log_probs = (linear(hidden) / 0.7).log_softmax(-1)  # [2, 5, V]
    ref_logp = log_probs.gather(2, targets[..., None]).squeeze(2) * mask
    ref_entropy = -(log_probs.exp() * log_probs).sum(-1) * mask
    torch.testing.assert_close(logp.double(), ref_logp, atol=1e-6, rtol=0)
    torch.testing.assert_close(entropy.double(), ref_entropy, atol=1e-6, rtol=0)
    objective(ref_logp, ref_entropy).backward()
    for a, b in zip(got, [hidden.grad, linear.weight.grad, linear.bias.grad], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("engine", ["hf", "static"])
def test_engines_sample_through_the_lora_adapters(model_dirs, engine):
    policy = _lora_policy(model_dirs, engine=engine)
    rollout = policy.rollout(PROMPTS, group_size=2)
    with torch.no_grad():
        with_adapters = policy.score(rollout).logp
        without = policy.reference_logprobs(rollout)
    assert (with_adapters - rollout.old_logp).abs().max().item() < 1e-4
    assert (without - rollout.old_logp).abs().max().item() > 1e-3


VOCAB_OPTIONS = [("low_probability", {"noise_ratio": 0.05}), ("distribution_entropy", {"temperature": 1.5})]


@pytest.mark.parametrize("chunk_size", [1, 3, 10])
@pytest.mark.parametrize("name, hp", VOCAB_OPTIONS, ids=[name for name, _ in VOCAB_OPTIONS])
@pytest.mark.parametrize("fused", [True, False])
def test_vocab_term_chunked_equals_full_logits_with_the_same_gradients(name, hp, chunk_size, fused):
    """A vocabulary term evaluated chunk by chunk (any head) against autograd through the full ``[B, C, V]``."""
    torch.manual_seed(1)
    linear = torch.nn.Linear(6, 11, bias=True).double()
    head = linear if fused else torch.nn.Sequential(linear)
    hidden = torch.randn(2, 5, 6, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 11, (2, 5))
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])  # 8 real tokens: chunk 10 = all at once
    weights_logp, weights_term = torch.randn(2, 5), torch.randn(2, 5)
    term = bind_vocab_term(name, **hp)

    scores = token_scores_from_hidden(
        hidden, targets, mask, head, temperature=0.7, chunk_size=chunk_size, vocab_term=term
    )
    assert scores.entropy is None and scores.vocab_term.shape == (2, 5) and scores.vocab_term.dtype == torch.float32
    ((scores.logp * weights_logp).sum() + (scores.vocab_term * weights_term).sum()).backward()
    got = [hidden.grad.clone(), linear.weight.grad.clone(), linear.bias.grad.clone()]
    for tensor in (hidden, linear.weight, linear.bias):
        tensor.grad = None

    scaled = linear(hidden).float() / 0.7  # [2, 5, V] the naive full logits, same float32 arithmetic
    ref_logp = scaled.log_softmax(-1).gather(2, targets[..., None]).squeeze(2) * mask
    ref_term = term(scaled.reshape(-1, 11)).view(2, 5) * mask
    torch.testing.assert_close(scores.logp, ref_logp, atol=1e-6, rtol=0)
    torch.testing.assert_close(scores.vocab_term, ref_term, atol=1e-6, rtol=1e-6)
    assert torch.all(scores.vocab_term[mask == 0] == 0) and scores.vocab_term[mask > 0].abs().sum() > 0
    ((ref_logp * weights_logp).sum() + (ref_term * weights_term).sum()).backward()
    for a, b in zip(got, [hidden.grad, linear.weight.grad, linear.bias.grad], strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name, hp", VOCAB_OPTIONS, ids=[name for name, _ in VOCAB_OPTIONS])
def test_policy_score_returns_the_vocab_term_of_the_full_logits(model_dirs, name, hp):
    policy = make_policy(model_dirs, logprob_chunk_size=4, temperature=0.8)
    rollout = policy.rollout(PROMPTS, group_size=2)
    data = rollout.per_sample
    term = bind_vocab_term(name, **hp)
    with torch.no_grad():
        plain = policy.score(rollout)
    assert plain.get("vocab_term") is None
    score = policy.score(rollout, ScoreRequest.of(vocab_term=term))
    assert torch.equal(score.logp.detach(), plain.logp)  # the term does not change the log-probs
    score["vocab_term"].sum().backward()
    chunked = [p.grad.clone() for p in policy.trainable_parameters()]
    policy.model.zero_grad()
    ids = torch.cat([data["prompt_ids"], data["completion_ids"]], dim=1)
    attention = torch.cat([data["prompt_mask"], data["completion_mask"]], dim=1).long()
    logits = policy.hf_model(
        input_ids=ids, attention_mask=attention, position_ids=position_ids_from_mask(attention), use_cache=False
    ).logits  # [n, P + T, V]
    width = data["prompt_ids"].shape[1]
    scaled = logits[:, width - 1 : -1].float() / 0.8  # [n, T, V]
    naive = term(scaled.reshape(-1, scaled.shape[-1])).view(scaled.shape[:2]) * rollout.action_mask  # [n, T]
    torch.testing.assert_close(score["vocab_term"], naive, atol=1e-5, rtol=1e-5)
    naive.sum().backward()
    for a, b in zip(chunked, [p.grad for p in policy.trainable_parameters()], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


# ---- capabilities, token features, rollout structure -------------------------------------------------------------
def test_capabilities_are_declared_by_the_config_and_follow_the_reference_option(model_dirs):
    features = frozenset(
        {"entropy", "kl", "ref_logp", "ref_entropy", "vocab_term", "topk_logp", "hidden", "logit_stats"}
    ) | {"ref_forward_kl", "ref_vocab_term"}  # terms against the reference's distribution (TDPO [48], RLPT [227])
    structure = frozenset({"truncated", "segment_ids", "action_ids", "prefix_tree"})
    structure |= {"segment_values", "answer_probe", "teacher_logp", "prefix_rewards"}  # probes (policy.probes)
    structure |= {"attention_entropy", "answer_attention_flow", "answer_saliency"}  # genalign.policies.lm.internals
    guidance = frozenset({"hint", "prefix", "temperature", "self_hint"})  # genalign.policies.lm.guidance
    teachers = frozenset({"model", "self", "reference", "context", "remote", "generate", "distribution"})  # teachers
    assert CausalLMPolicyConfig().capabilities() == PolicyCapabilities(
        False,
        features | structure,
        forced_completions=True,
        guidance=guidance,
        teachers=teachers,
        teacher_limits="",
        trained_action_scoring=True,  # NAT [220] / S-GRPO [312]: the scoring pass can stop at the last trained token
    )
    without_reference = (features | structure) - {"kl", "ref_logp", "ref_entropy", "ref_forward_kl", "ref_vocab_term"}
    assert CausalLMPolicyConfig(reference="none").capabilities().signals == without_reference
    assert CausalLMPolicyConfig(reference="none").capabilities().teachers == teachers - {"reference"}
    assert CausalLMPolicyConfig(lora=LoRAConfig(rank=4), reference="lora_disabled").capabilities().signals == (
        features | structure
    )
    assert make_policy(model_dirs, reference="none").capabilities.missing(["kl", "topk_logp", "block_ids"]) == [
        "block_ids",  # only with policy.probes.block_markers
        "kl",
    ]


def _naive_features(policy, rollout, temperature: float, k: int):
    """Top-k log-probs ``[n, T, k]`` and hidden states ``[n, T, H]`` through the full ``[n, P + T, V]`` logits."""
    data = rollout.per_sample
    ids = torch.cat([data["prompt_ids"], data["completion_ids"]], dim=1)
    attention = torch.cat([data["prompt_mask"], data["completion_mask"]], dim=1).long()
    width = data["prompt_ids"].shape[1]
    mask = rollout.action_mask[..., None]  # [n, T, 1]
    with torch.no_grad():
        outputs = policy.hf_model(
            input_ids=ids,
            attention_mask=attention,
            position_ids=position_ids_from_mask(attention),
            use_cache=False,
            output_hidden_states=True,
        )
    full_logits = outputs.logits[:, width - 1 : -1].float()  # [n, T, V]
    topk = torch.topk((full_logits / temperature).log_softmax(-1), k).values * mask  # [n, T, k]
    hidden = outputs.hidden_states[-1][:, width - 1 : -1] * mask  # [n, T, H] the backbone's last hidden states
    return topk, hidden


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_topk_and_hidden_features_equal_the_naive_pass_for_every_chunk_size(model_dirs, arch):
    policy = make_policy(model_dirs, arch, temperature=0.7)
    rollout = policy.rollout(PROMPTS, group_size=3)
    naive_topk, naive_hidden = _naive_features(policy, rollout, 0.7, k=5)
    outputs = []
    for chunk_size in (1, 3, int(rollout.action_mask.sum())):
        policy.config.logprob_chunk_size = chunk_size
        plain = policy.score(rollout).logp.detach()
        out = policy.score(rollout, ScoreRequest.of("hidden", topk_logp=5))  # with grad: the features stay detached
        assert torch.equal(out.logp.detach(), plain)  # extra features leave the log-prob path untouched
        assert out["topk_logp"].shape == (*rollout.action_mask.shape, 5) and not out["topk_logp"].requires_grad
        assert out["hidden"].shape == (*rollout.action_mask.shape, policy.hf_model.config.hidden_size)
        assert not out["hidden"].requires_grad and out.get("entropy") is None and out.get("kl") is None
        torch.testing.assert_close(out["topk_logp"], naive_topk, atol=1e-5, rtol=0)
        torch.testing.assert_close(out["hidden"], naive_hidden, atol=1e-5, rtol=0)
        assert torch.all(out["topk_logp"][rollout.action_mask == 0] == 0) and torch.all(
            out["hidden"][rollout.action_mask == 0] == 0
        )
        assert torch.all(out["topk_logp"][..., :-1] >= out["topk_logp"][..., 1:])  # descending
        outputs.append(out)
    for other in outputs[1:]:
        assert torch.equal(other["hidden"], outputs[0]["hidden"])  # the head pass does not touch the hidden states
        # BLAS picks another kernel for 1 or 3 rows than for many, so chunked logits agree to float rounding (as logp)
        torch.testing.assert_close(other["topk_logp"], outputs[0]["topk_logp"], atol=1e-6, rtol=0)


def test_topk_larger_than_the_vocabulary_is_rejected(model_dirs):
    policy = make_policy(model_dirs)
    rollout = policy.rollout(PROMPTS[:1], group_size=1)
    with pytest.raises(ValueError, match=r"topk=97 must be in \[0, 96\]"):
        policy.score(rollout, ScoreRequest.of(topk_logp=97))


def _segment_tokenizer():
    """A word-level tokenizer whose single tokens decode to the texts the segment rule distinguishes."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<eos>", "<unk>", "a", "b", ".", "?", "!", "3.14", "x\n", "end.", "e.g", "ok!\t"]
    backend = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    return tokenizer, {w: i for i, w in enumerate(words)}


def test_segment_ids_by_hand():
    from genalign.policies.lm.segments import SegmentBoundaries

    tokenizer, vocab = _segment_tokenizer()
    segments = SegmentBoundaries(tokenizer)
    boundary = {w for w, i in vocab.items() if segments.table()[i]}
    assert boundary == {".", "?", "!", "x\n", "end.", "ok!\t"}  # "3.14" and "e.g": no whitespace or end after '.'
    rows = [
        ["a", ".", "b", "3.14", "x\n", "a", "e.g", "?", "<eos>", "<pad>"],
        ["!", "ok!\t", "a", ".", "<pad>", "<pad>", "<pad>", "<pad>", "<pad>", "<pad>"],
    ]
    ids = torch.tensor([[vocab[w] for w in row] for row in rows])  # [2, 10]
    mask = torch.tensor([[1] * 9 + [0], [1] * 3 + [0] * 7])  # the '.' of row 1 is padding: it starts nothing
    expected = [[0, 0, 1, 1, 1, 2, 2, 2, 3, 3], [0, 1, 2, 2, 2, 2, 2, 2, 2, 2]]
    assert segments(ids, mask).tolist() == expected and segments(ids, mask).dtype == torch.long
    # ids beyond the tokenizer's vocabulary (padded embedding tables) are not boundaries
    assert segments(torch.tensor([[5, 40, 5]]), torch.ones(1, 3)).tolist() == [[0, 1, 1]]


def test_rollout_structure_holds_truncation_always_and_segment_ids_on_request(model_dirs):
    policy = make_policy(model_dirs, max_new_tokens=12)
    head = policy.hf_model.get_output_embeddings()
    bias = torch.zeros(head.out_features)
    bias[policy.tokenizer.convert_tokens_to_ids([".", "?"])] = 2.0  # sentence ends are frequent
    head.bias = torch.nn.Parameter(bias)
    plain = policy.rollout(PROMPTS, group_size=2)
    # truncation flags and action ids always (forced_completions: every training sample can be stored)
    assert set(plain.structure) == {"truncated", "action_ids"} and plain.structure.get("truncated").dtype == torch.bool
    rollout = policy.rollout(PROMPTS, group_size=2, request=RolloutRequest(structure=frozenset({"segment_ids"})))
    segment_ids = rollout.structure.get("segment_ids")
    assert segment_ids.shape == rollout.action_mask.shape and segment_ids.dtype == torch.long
    assert torch.all(segment_ids[:, 1:] >= segment_ids[:, :-1])
    for row, (ids, mask) in enumerate(zip(rollout.per_sample["completion_ids"], rollout.action_mask, strict=True)):
        texts = [policy.tokenizer.decode([i], skip_special_tokens=True) for i in ids.tolist()]
        ends = [bool(m) and (t in {".", "?", "!"} or "\n" in t) for t, m in zip(texts, mask.tolist(), strict=True)]
        assert segment_ids[row].tolist() == [sum(ends[:t]) for t in range(len(ends))]  # loop vs vectorised
    assert segment_ids.max() > 0
    assert rollout.select([3, 0]).structure.get("segment_ids").tolist() == segment_ids[[3, 0]].tolist()


# ---- LoRA options (peft's LoraConfig) and the attention kernel -------------------------------------------------------
def _adapted(policy) -> dict[str, torch.nn.Module]:
    """The LoRA layers of ``policy`` by the name of the base layer they wrap."""
    return {name: module for name, module in policy.hf_model.named_modules() if hasattr(module, "lora_A")}


def test_all_linear_targets_every_linear_layer_but_the_head(model_dirs):
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dirs["llama"])
    linear = {name for name, module in base.named_modules() if isinstance(module, torch.nn.Linear)}
    assert "lm_head" in linear
    policy = make_policy(model_dirs, "llama", lora=LoRAConfig(rank=4, target_modules=["all-linear"]))
    assert set(_adapted(policy)) == linear - {"lm_head"}


def test_dora_adds_a_magnitude_vector_and_rslora_scales_by_the_square_root_of_the_rank(model_dirs, tmp_path):
    policy = make_policy(model_dirs, "llama", lora=LoRAConfig(rank=4, alpha=8.0, use_dora=True, use_rslora=True))
    layers = _adapted(policy)
    assert layers and all(layer.lora_magnitude_vector["default"].weight.requires_grad for layer in layers.values())
    assert all(layer.scaling["default"] == 8.0 / 4**0.5 for layer in layers.values())  # plain LoRA: 8 / 4
    assert (
        make_policy(model_dirs, "llama", lora=LoRAConfig(rank=4, alpha=8.0))
        .hf_model.model.layers[0]
        .self_attn.q_proj.scaling["default"]
        == 2.0
    )
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_B" in name or "magnitude" in name:
                param.add_(0.1)
    rollout = policy.rollout(PROMPTS, group_size=1)
    policy.save(tmp_path / "dora")
    fresh = make_policy(model_dirs, "llama", lora=LoRAConfig(rank=4, alpha=8.0, use_dora=True, use_rslora=True))
    fresh.load(tmp_path / "dora")
    with torch.no_grad():
        assert torch.equal(fresh.score(rollout).logp, policy.score(rollout).logp)


def test_modules_to_save_trains_and_saves_the_whole_module(model_dirs, tmp_path):
    lora = LoRAConfig(rank=4, modules_to_save=["lm_head"])
    policy = make_policy(model_dirs, "llama", lora=lora)
    names = [name for name, param in policy.model.named_parameters() if param.requires_grad]
    assert any("lm_head.modules_to_save" in name for name in names)
    rollout = policy.rollout(PROMPTS, group_size=1)
    policy.score(rollout).logp.sum().backward()
    head = policy.hf_model.lm_head.modules_to_save["default"].weight
    assert head.grad is not None and head.grad.abs().sum() > 0
    with torch.no_grad():
        head.add_(0.5)
    policy.save(tmp_path / "ckpt")
    fresh = make_policy(model_dirs, "llama", lora=lora)
    fresh.load(tmp_path / "ckpt")
    assert torch.equal(fresh.hf_model.lm_head.modules_to_save["default"].weight, head)


def test_base_rewriting_options_use_a_frozen_copy_reference_and_roundtrip(model_dirs, tmp_path):
    pissa = LoRAConfig(rank=4, init_lora_weights="pissa")
    policy = make_policy(model_dirs, "llama", lora=pissa)
    assert policy.reference.mode == "frozen_copy"  # adapters off is the residual, not the original model
    assert make_policy(model_dirs, "llama", lora=LoRAConfig(rank=4, bias="all")).reference.mode == "frozen_copy"
    assert make_policy(model_dirs, "llama", lora=LoRAConfig(rank=4)).reference.mode == "lora_disabled"
    rollout = policy.rollout(PROMPTS, group_size=1)
    with torch.no_grad():
        kl = policy.score(rollout, ScoreRequest.of(kl="k3"))["kl"]
        assert kl.abs().max() < 1e-5  # PiSSA starts at the original model: residual + principal part
        for name, param in policy.model.named_parameters():
            if "lora_" in name:
                param.add_(0.05)
    policy.save(tmp_path / "pissa")
    fresh = make_policy(model_dirs, "llama", lora=pissa)
    fresh.load(tmp_path / "pissa")  # the deterministic SVD rebuilds the same residual
    with torch.no_grad():
        assert torch.equal(fresh.score(rollout).logp, policy.score(rollout).logp)
    with pytest.raises(ValueError, match=r"lora_disabled.*frozen_copy"):
        CausalLMPolicyConfig(lora=pissa, reference="lora_disabled").validate()


@pytest.mark.parametrize(
    ("lora", "message"),
    [
        (
            {"init_lora_weights": "pisa"},
            r"policy.lora.init_lora_weights='pisa' is not a LoRA initialisation; use one of",
        ),
        ({"init_lora_weights": "pissa_niter_4"}, r"'pissa_niter_4' is not supported: it randomised SVD.*'pissa'"),
        ({"init_lora_weights": "eva"}, r"'eva' is not supported: it needs a data-driven calibration"),
        ({"init_lora_weights": "orthogonal", "rank": 3}, r"'orthogonal' needs an even LoRA rank, got rank 3"),
        ({"init_lora_weights": 1}, r"policy.lora.init_lora_weights: 1 is not"),
        ({"bias": "some"}, r"policy.lora.bias: 'some' is not valid; use one of 'none', 'all', 'lora_only'"),
        ({"target_modules": ["all-linear", "q_proj"]}, r"mixes 'all-linear' with layer names"),
        ({"modules_to_save": [""]}, r"modules_to_save=\[''\] contains an empty name"),
    ],
)
def test_lora_options_are_checked_at_config_load(lora, message):
    from genalign.config.core import ConfigError, from_dict

    with pytest.raises(ConfigError, match=message):
        from_dict(CausalLMPolicyConfig, {"family": "causal_lm", "lora": {"rank": 4} | lora}, "policy")


def test_default_lora_options_build_the_same_adapters_as_plain_peft(model_dirs):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(11)
    policy = make_policy(model_dirs, "llama", lora=LoRAConfig(rank=4, alpha=8.0))
    torch.manual_seed(11)
    plain = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model_dirs["llama"]),
        LoraConfig(r=4, lora_alpha=8.0, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                   task_type="CAUSAL_LM"),
    )  # fmt: skip
    ours, theirs = policy.model.state_dict(), plain.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert policy.model.peft_config["default"].to_dict() == plain.peft_config["default"].to_dict()


def test_attn_implementation_reaches_the_model_and_defaults_to_transformers_choice(model_dirs):
    from transformers import AutoModelForCausalLM

    default = AutoModelForCausalLM.from_pretrained(model_dirs["llama"]).config._attn_implementation
    assert make_policy(model_dirs, "llama").hf_model.config._attn_implementation == default
    policy = build_policy(CausalLMPolicyConfig(model=str(model_dirs["llama"]), attn_implementation="eager"))
    assert policy.hf_model.config._attn_implementation == "eager"
    policy = build_policy(
        CausalLMPolicyConfig(model=str(model_dirs["llama"]), attn_implementation="eager", reference="frozen_copy")
    )
    rollout = policy.rollout(PROMPTS, group_size=1)
    policy.reference_logprobs(rollout)  # loads the frozen copy with the same kernel
    assert policy.reference._frozen.config._attn_implementation == "eager"


def test_lora_options_without_adapters_are_rejected():
    from genalign.config.core import ConfigError, from_dict

    with pytest.raises(ConfigError, match=r"policy.lora.use_dora=True has no effect with policy.lora.rank=0"):
        from_dict(CausalLMPolicyConfig, {"family": "causal_lm", "lora": {"use_dora": True}}, "policy")
