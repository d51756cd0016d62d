"""The masked diffusion LM policy: rollout, on-policy ratio 1 for every proxy, seeds per inner epoch, KL, capabilities,
resumable state, errors."""

from __future__ import annotations

import io
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import BertConfig, BertForMaskedLM, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from genalign.algorithms import aggregate, loss_normalizer, policy_loss
from genalign.policies import load_family
from genalign.policies.base import Policy, PolicyCapabilities, ScoreRequest
from genalign.policies.dlm.policy import DiffusionLMPolicyConfig, bidirectional_attention_bias, build_policy

SPECIALS = ["[PAD]", "[MASK]", "[EOS]", "[UNK]"]
ROWS = [{"prompt": "12+34=", "answer": "46"}, {"prompt": "5+6=", "answer": "11"}]


def char_tokenizer(with_mask: bool = True) -> PreTrainedTokenizerFast:
    specials = SPECIALS if with_mask else [s for s in SPECIALS if s != "[MASK]"]
    vocab = {t: i for i, t in enumerate(specials + list("0123456789+="))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(specials)
    extra = {"mask_token": "[MASK]"} if with_mask else {}
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", eos_token="[EOS]", unk_token="[UNK]", **extra
    )


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> str:
    torch.manual_seed(0)
    tokenizer = char_tokenizer()
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    path = tmp_path_factory.mktemp("tiny-bert")
    BertForMaskedLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def make_policy(path: str, **overrides):
    config = DiffusionLMPolicyConfig(model=path, gen_length=6, block_length=3, steps=4, **overrides)
    return build_policy(config)


def test_family_module_exposes_config_and_builder(tiny_bert):
    module = load_family("diffusion_lm")
    assert module.CONFIG_CLASS is DiffusionLMPolicyConfig
    assert isinstance(make_policy(tiny_bert), Policy)


def test_rollout_holds_what_scoring_needs(tiny_bert):
    policy = make_policy(tiny_bert)
    rollout = policy.rollout(ROWS, group_size=3)
    assert len(rollout) == 6 and rollout.group_ids.tolist() == [0, 0, 0, 1, 1, 1]
    data = rollout.per_sample
    assert data["completion_ids"].shape == (6, 6) and data["decode_step"].shape == (6, 6)
    assert not (data["completion_ids"] == policy.mask_id).any()
    assert data["mask_seed"].dtype == torch.long and data["mask_seed"].unique().numel() == 6
    assert rollout.old_logp.shape == rollout.action_mask.shape == (6, 6)  # one_step: token level
    assert all(isinstance(o, str) for o in rollout.outputs)
    assert rollout.info["nfe_per_sample"] == 4


PROXIES = [
    ("one_step", {}),
    ("mc_elbo", {"num_samples": 2}),
    ("coupled", {"num_samples": 1}),
    ("spg", {"num_samples": 2}),
    ("trace", {}),
    ("mc_elbo", {"level": "token"}),
]


@pytest.mark.parametrize(("proxy", "args"), PROXIES)
def test_on_policy_ratio_is_exactly_one_for_every_proxy(tiny_bert, proxy, args):
    policy = make_policy(tiny_bert, likelihood_proxy={"name": proxy, **args})
    rollout = policy.rollout(ROWS, group_size=2)
    policy.model.train()
    scored = policy.score(rollout)
    assert torch.equal(scored.logp, rollout.old_logp)  # same seeds, same code path: ratio exp(0) = 1 exactly
    assert scored.logp.requires_grad
    half = policy.score(rollout.select([1, 2]))
    assert torch.allclose(half.logp, scored.logp[[1, 2]], atol=1e-5)  # micro-batch split changes nothing


def test_inner_epochs_redraw_masks_only_when_asked(tiny_bert):
    for mode, should_change in [("per_inner_epoch", True), ("per_rollout", False)]:
        policy = make_policy(tiny_bert, likelihood_proxy={"name": "mc_elbo", "num_samples": 1}, mask_seeds=mode)
        rollout = policy.rollout(ROWS, group_size=2)
        with torch.no_grad():
            policy.on_inner_epoch(1)
            epoch_one = policy.score(rollout).logp
            policy.on_inner_epoch(0)
            epoch_zero = policy.score(rollout).logp
        assert torch.equal(epoch_zero, rollout.old_logp)
        assert (not torch.equal(epoch_one, epoch_zero)) == should_change


def test_one_training_step_moves_the_likelihood_of_rewarded_samples(tiny_bert):
    policy = make_policy(tiny_bert, likelihood_proxy={"name": "mc_elbo", "num_samples": 2})
    rollout = policy.rollout(ROWS, group_size=2)
    advantages = torch.tensor([1.0, -1.0, 1.0, -1.0])
    optimizer = torch.optim.SGD(policy.trainable_parameters(), lr=0.5)
    policy.model.train()
    logp = policy.score(rollout).logp
    loss, metrics = policy_loss(logp, rollout.old_logp, advantages, rollout.action_mask)
    assert metrics["ratio_mean"].item() == 1.0
    mode = "seq_mean_token_mean"
    aggregate(loss, rollout.action_mask, mode, loss_normalizer(rollout.action_mask, mode)).backward()
    optimizer.step()
    with torch.no_grad():
        after = policy.score(rollout).logp
    change = (after - rollout.old_logp)[:, 0]
    assert (change[advantages > 0] > change[advantages < 0]).all()


def test_kl_to_the_frozen_reference_is_zero_before_training(tiny_bert):
    policy = make_policy(tiny_bert, likelihood_proxy="coupled")
    rollout = policy.rollout(ROWS, group_size=2)
    scored = policy.score(rollout, ScoreRequest.of(kl="k2"))
    assert scored.get("kl") is not None and scored["kl"].shape == rollout.action_mask.shape
    assert torch.allclose(scored["kl"], torch.zeros_like(scored["kl"]), atol=1e-10)
    with pytest.raises(ValueError, match="no per-action entropy"):
        policy.score(rollout, ScoreRequest.of("entropy"))
    with pytest.raises(ValueError, match="reference='none'"):
        make_policy(tiny_bert, reference="none").score(rollout, ScoreRequest.of(kl="k1"))


def test_save_and_load_round_trip(tiny_bert, tmp_path):
    policy = make_policy(tiny_bert)
    with torch.no_grad():
        next(policy.model.parameters()).add_(1.0)
    policy.save(tmp_path)
    fresh = make_policy(tiny_bert)
    fresh.load(tmp_path)
    for a, b in zip(policy.model.parameters(), fresh.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_model_without_mask_token_is_rejected_with_the_fix(tmp_path):
    tokenizer = char_tokenizer(with_mask=False)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=1,
        intermediate_size=16,
        max_position_embeddings=16,
    )
    BertForMaskedLM(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"no mask token.*Set policy\.mask_token_id"):
        build_policy(DiffusionLMPolicyConfig(model=str(tmp_path), gen_length=4, block_length=4, steps=4))


def test_config_rejects_impossible_schedules_and_unknown_proxies():
    with pytest.raises(ValueError, match="block_length=3 must divide gen_length=8"):
        DiffusionLMPolicyConfig(gen_length=8, block_length=3, steps=8).validate()
    with pytest.raises(ValueError, match="steps=5 must be divisible by the number of blocks"):
        DiffusionLMPolicyConfig(gen_length=8, block_length=4, steps=5).validate()
    with pytest.raises(KeyError, match="Did you mean 'coupled'"):
        DiffusionLMPolicyConfig(likelihood_proxy="couple").validate()
    with pytest.raises(TypeError, match="num_sample"):
        DiffusionLMPolicyConfig(likelihood_proxy={"name": "mc_elbo", "num_sample": 2}).validate()
    with pytest.raises(ValueError, match=r"policy.likelihood_proxy: the mapping .* has no 'name'"):
        DiffusionLMPolicyConfig(likelihood_proxy={"num_samples": 2})


def test_dream_style_shifted_logits_are_realigned(tiny_bert):
    policy = make_policy(tiny_bert, shifted_logits=True)
    ids = torch.tensor([[4, 5, 6, 7]])
    raw = policy.model(input_ids=ids).logits
    aligned = policy.model_fn(policy.model)(ids, None)
    assert torch.equal(aligned[:, 1:], raw[:, :-1]) and torch.equal(aligned[:, 0], raw[:, 0])


def test_causal_decoder_body_becomes_bidirectional(tmp_path):
    tokenizer = char_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    policy = build_policy(
        DiffusionLMPolicyConfig(
            model=str(tmp_path), architecture="bidirectional_causal_lm", gen_length=4, block_length=4, steps=4
        )
    )
    fn = policy.model_fn(policy.model)
    a, b = torch.tensor([[4, 5, 6, 7]]), torch.tensor([[4, 5, 6, 8]])
    assert not torch.allclose(fn(a, None)[0, 0], fn(b, None)[0, 0])  # position 0 sees the last token
    bias = bidirectional_attention_bias(a, torch.tensor([[0, 1, 1, 1]]), dtype=torch.float32)
    assert bias.shape == (1, 1, 4, 4) and (bias[0, 0, :, 0] < -1e30).all() and (bias[0, 0, :, 1:] == 0).all()
    assert len(policy.rollout(ROWS, group_size=2)) == 4


def test_capabilities_are_declared_by_the_config():
    from genalign.policies.dlm.config import DLM_TEACHER_LIMITS

    assert DiffusionLMPolicyConfig().capabilities() == PolicyCapabilities(
        False,
        frozenset({"kl", "ref_logp"}),
        teacher_limits=DLM_TEACHER_LIMITS,  # hosts no teacher (genalign.teachers)
    )
    assert DiffusionLMPolicyConfig(reference="none").capabilities().signals == frozenset()


def test_state_dict_roundtrip_restores_sampler_mask_seeds_and_epoch(tiny_bert):
    policy = make_policy(tiny_bert, likelihood_proxy={"name": "mc_elbo", "num_samples": 1})
    policy.rollout(ROWS, group_size=2)  # move both generators away from their seeds
    policy.on_inner_epoch(2)
    buffer = io.BytesIO()
    torch.save(policy.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert set(state) == {"generator", "seed_generator", "inner_epoch"} and state["inner_epoch"] == 2
    after_save = policy.rollout(ROWS, group_size=2)
    resumed = make_policy(tiny_bert, likelihood_proxy={"name": "mc_elbo", "num_samples": 1})
    resumed.load_state_dict(state)
    assert resumed.inner_epoch == 2
    again = resumed.rollout(ROWS, group_size=2)
    assert torch.equal(again.per_sample["completion_ids"], after_save.per_sample["completion_ids"])
    assert torch.equal(again.per_sample["mask_seed"], after_save.per_sample["mask_seed"])
    assert torch.equal(again.old_logp, after_save.old_logp)
    with pytest.raises(ValueError, match="lacks 'inner_epoch'"):
        resumed.load_state_dict({k: v for k, v in state.items() if k != "inner_epoch"})
    with pytest.raises(ValueError, match=r"needs \['generator', 'seed_generator'\]"):
        resumed.load_state_dict({"generator": state["generator"], "inner_epoch": 0})


def test_attn_implementation_and_all_linear_lora_reach_the_model(tiny_bert):
    from genalign.policies.lm.core import LoRAConfig

    assert make_policy(tiny_bert, attn_implementation="eager").hf_model.config._attn_implementation == "eager"
    default = BertForMaskedLM.from_pretrained(tiny_bert).config._attn_implementation
    assert make_policy(tiny_bert).hf_model.config._attn_implementation == default  # None: transformers' choice
    policy = make_policy(tiny_bert, lora=LoRAConfig(rank=2, target_modules=["all-linear"]))
    base = BertForMaskedLM.from_pretrained(tiny_bert)
    head = base.get_output_embeddings()
    linear = {n for n, m in base.named_modules() if isinstance(m, torch.nn.Linear) and m is not head}
    assert {n for n, m in policy.hf_model.named_modules() if hasattr(m, "lora_A")} == linear


def test_lora_on_a_masked_lm_trains_saves_and_loads(tiny_bert, tmp_path):
    from genalign.policies.lm.core import LoRAConfig

    lora = LoRAConfig(rank=2, alpha=4.0, target_modules=["query", "value"])
    policy = make_policy(tiny_bert, lora=lora)
    assert policy.reference.mode == "lora_disabled"
    rollout = policy.rollout(ROWS, group_size=2)
    with torch.no_grad():
        for param in policy.trainable_parameters():
            param.add_(0.1)
        scored = policy.score(rollout).logp
    policy.save(tmp_path / "ckpt")
    fresh = make_policy(tiny_bert, lora=lora)
    fresh.load(tmp_path / "ckpt")
    with torch.no_grad():
        assert torch.equal(fresh.score(rollout).logp, scored)
    assert "AutoModelForMaskedLM" in (tmp_path / "ckpt" / "README.md").read_text()
