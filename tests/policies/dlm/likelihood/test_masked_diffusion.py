"""Likelihood proxies for masked diffusion LMs on a toy model small enough to enumerate (vocabulary 4, length 3)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from genalign.policies.dlm.likelihood import LIKELIHOOD_PROXIES
from genalign.policies.dlm.likelihood.masked_diffusion import masked_token_logp
from genalign.registry import UnknownOptionError

VOCAB, MASK = 4, 4  # tokens 0..3, mask id 4
PROMPT = torch.tensor([[1, 3]])
ANSWER = torch.tensor([[2, 0, 3]])
FULL = torch.ones(1, 3)


def toy_model(seed: int = 0):
    """Bidirectional toy: logits at each position depend on the whole (partly masked) input."""
    g = torch.Generator().manual_seed(seed)
    embed = torch.randn(VOCAB + 1, 6, generator=g)
    position = torch.randn(32, 6, generator=g)
    head = torch.randn(6, VOCAB + 1, generator=g)

    def model_fn(ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        h = embed[ids] + position[: ids.shape[1]]  # [B, L, 6]
        return torch.tanh(h + h.mean(dim=1, keepdim=True)) @ head  # [B, L, V+1]

    return model_fn


def log_softmax_without_mask(logits: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.index_fill(-1, torch.tensor([MASK]), -torch.inf), dim=-1)


def exact_elbo(model_fn, prompt, answer) -> float:
    """Σ over non-empty mask subsets S of the answer: Σ_{j∈S} log p(x_j | x with S masked) / (|S| · C(L, |S|))."""
    length = answer.shape[1]
    total = 0.0
    for size in range(1, length + 1):
        for subset in itertools.combinations(range(length), size):
            noise = torch.zeros(1, 1, length, dtype=torch.bool)
            noise[0, 0, list(subset)] = True
            logp = masked_token_logp(
                model_fn,
                prompt,
                answer,
                torch.zeros(1, 1, prompt.shape[1], dtype=torch.bool),
                noise,
                mask_id=MASK,
                prompt_attention_mask=None,
            )[0, 0]  # [T]
            total += logp[list(subset)].sum().item() / (size * math.comb(length, size))
    return total


def sequence_estimates(proxy: str, num: int, **hp) -> torch.Tensor:
    """``[num]`` estimates of the answer's log-likelihood, one per mask seed (token terms summed)."""
    out = LIKELIHOOD_PROXIES.get(proxy)(
        toy_model(),
        PROMPT.expand(num, -1),
        ANSWER.expand(num, -1),
        FULL.expand(num, -1),
        mask_id=MASK,
        seeds=torch.arange(num),
        level="token",
        **hp,
    )
    return out.logp.sum(dim=1).double()


def test_registry_holds_every_proxy_and_suggests_names():
    assert set(LIKELIHOOD_PROXIES.names()) == {
        *["coupled", "mc_elbo", "one_step", "spg", "trace", "gdpo_quadrature", "left_to_right"]
    }
    with pytest.raises(UnknownOptionError, match="Did you mean 'mc_elbo'"):
        LIKELIHOOD_PROXIES.get("mc_elb")


def test_exact_elbo_is_below_the_exact_log_likelihood_of_the_enumerated_chain_rule():
    # sanity of the enumeration: for a length-1 answer the ELBO is exactly log p(x | prompt, [MASK])
    model = toy_model()
    answer = torch.tensor([[2]])
    direct = log_softmax_without_mask(model(torch.tensor([[1, 3, MASK]]), None))[0, 2, 2].item()
    assert exact_elbo(model, PROMPT, answer) == pytest.approx(direct, abs=1e-6)


@pytest.mark.parametrize("mask_sampling", ["count", "rate"])
def test_monte_carlo_elbo_converges_to_the_enumerated_elbo(mask_sampling):
    exact = exact_elbo(toy_model(), PROMPT, ANSWER)
    estimates = sequence_estimates("mc_elbo", 6000, num_samples=1, mask_sampling=mask_sampling)
    standard_error = estimates.std().item() / math.sqrt(estimates.numel())
    assert abs(estimates.mean().item() - exact) < 4 * standard_error
    # sharp enough to catch a wrong weight (1/t weights of "rate" have a heavy tail, hence its looser bound)
    assert standard_error < {"count": 0.05, "rate": 0.25}[mask_sampling]


def test_stratified_counts_lower_the_variance_at_equal_forward_passes():
    stratified = sequence_estimates("mc_elbo", 3000, num_samples=3, mask_sampling="count")
    exact = exact_elbo(toy_model(), PROMPT, ANSWER)
    assert abs(stratified.mean().item() - exact) < 4 * stratified.std().item() / math.sqrt(3000)
    single = sequence_estimates("mc_elbo", 3000, num_samples=1, mask_sampling="count")
    assert stratified.var() < single.var() / 3  # better than averaging 3 independent draws


def test_coupled_estimator_is_unbiased_and_beats_independent_masks_at_equal_forward_passes():
    exact = exact_elbo(toy_model(), PROMPT, ANSWER)
    coupled = sequence_estimates("coupled", 6000, num_samples=1)  # 2 forward passes, complementary masks
    assert abs(coupled.mean().item() - exact) < 4 * coupled.std().item() / math.sqrt(6000)
    # same per-pass mask law (rate t ~ U(0, 1)), same 2 forward passes: complementary vs independent masks
    coupled_rate = sequence_estimates("coupled", 6000, num_samples=1, mask_sampling="rate")
    independent_rate = sequence_estimates("mc_elbo", 6000, num_samples=2, mask_sampling="rate")
    assert abs(coupled_rate.mean().item() - exact) < 4 * coupled_rate.std().item() / math.sqrt(6000)
    assert coupled_rate.var() < 0.5 * independent_rate.var()
    assert coupled.var() < coupled_rate.var()  # bounded count weights beat 1/t weights


def test_coupled_masks_score_every_token_exactly_once_per_pair():
    model_calls = []

    def recording(ids, attention_mask):
        model_calls.append(ids.clone())
        return toy_model()(ids, attention_mask)

    LIKELIHOOD_PROXIES.get("coupled")(recording, PROMPT, ANSWER, FULL, mask_id=MASK, seeds=torch.tensor([5]))
    pass_a, pass_b = model_calls[0][:, 2:] == MASK  # [2, T] the two complementary answer masks
    assert torch.equal(pass_a, ~pass_b)


def test_one_step_masks_the_whole_answer_and_prompt_tokens_with_their_probability():
    model = toy_model()
    out = LIKELIHOOD_PROXIES.get("one_step")(
        model, PROMPT, ANSWER, FULL, mask_id=MASK, seeds=torch.tensor([0]), prompt_mask_prob=0.0
    )
    expected = log_softmax_without_mask(model(torch.tensor([[1, 3, MASK, MASK, MASK]]), None))[0, 2:]  # [T, V+1]
    assert torch.allclose(out.logp[0], expected[torch.arange(3), ANSWER[0]])
    assert out.logp.shape == (1, 3) and out.num_forward == 1

    seen = []
    LIKELIHOOD_PROXIES.get("one_step")(
        lambda ids, att: (seen.append(ids.clone()), model(ids, att))[1],
        torch.ones(2000, 10, dtype=torch.long),
        ANSWER.expand(2000, -1),
        FULL.expand(2000, -1),
        mask_id=MASK,
        seeds=torch.arange(2000),
        prompt_mask_prob=0.15,
    )
    prompt_masked = (seen[0][:, :10] == MASK).double().mean().item()
    assert prompt_masked == pytest.approx(0.15, abs=0.01)


def test_one_step_never_masks_prompt_padding_and_depends_only_on_the_seed():
    prompt = torch.tensor([[0, 0, 1, 3], [0, 2, 1, 3]])
    attention = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]])
    seen = []

    def model(ids, att):
        seen.append(ids.clone())
        return toy_model()(ids, att)

    one_step = LIKELIHOOD_PROXIES.get("one_step")
    answers, mask = ANSWER.expand(2, -1), FULL.expand(2, -1)
    for seed in range(50):
        one_step(
            model,
            prompt,
            answers,
            mask,
            mask_id=MASK,
            seeds=torch.tensor([seed, seed]),
            prompt_attention_mask=attention,
            prompt_mask_prob=0.9,
        )
        assert not (seen[-1][:, :4][attention == 0] == MASK).any()
    a = one_step(model, prompt, answers, mask, mask_id=MASK, seeds=torch.tensor([7, 8]), prompt_mask_prob=0.5)
    b = one_step(model, prompt[1:], answers[1:], mask[1:], mask_id=MASK, seeds=torch.tensor([8]), prompt_mask_prob=0.5)
    assert torch.equal(a.logp[1:], b.logp)  # a sample's estimate never depends on its micro-batch neighbours


def test_trace_replay_scores_each_token_in_the_state_it_was_decoded():
    model = toy_model()
    decode_step = torch.tensor([[1, 0, 2]])  # answer token 1 first, then 0, then 2
    out = LIKELIHOOD_PROXIES.get("trace")(
        model, PROMPT, ANSWER, FULL, mask_id=MASK, seeds=torch.tensor([0]), decode_step=decode_step
    )

    def logp(ids, position):
        return log_softmax_without_mask(model(torch.tensor([ids]), None))[0, 2 + position, ANSWER[0, position]]

    expected = torch.stack(
        [
            logp([1, 3, MASK, 0, MASK], 0),  # decoded at step 1: token 1 visible
            logp([1, 3, MASK, MASK, MASK], 1),  # decoded at step 0: all masked
            logp([1, 3, 2, 0, MASK], 2),  # decoded at step 2
        ]
    )
    assert torch.allclose(out.logp[0], expected, atol=1e-6)
    assert out.num_forward == 3
    merged = LIKELIHOOD_PROXIES.get("trace")(
        model, PROMPT, ANSWER, FULL, mask_id=MASK, seeds=torch.tensor([0]), decode_step=decode_step, steps_per_forward=3
    )
    one_step = LIKELIHOOD_PROXIES.get("one_step")(
        model, PROMPT, ANSWER, FULL, mask_id=MASK, seeds=torch.tensor([0]), prompt_mask_prob=0.0
    )
    assert torch.allclose(merged.logp, one_step.logp)
    with pytest.raises(ValueError, match="needs decode_step"):
        LIKELIHOOD_PROXIES.get("trace")(model, PROMPT, ANSWER, FULL, mask_id=MASK, seeds=torch.tensor([0]))


def test_spg_returns_the_elbo_and_an_upper_mixture():
    seeds = torch.arange(16)
    args = dict(mask_id=MASK, seeds=seeds)
    prompts, answers, mask = PROMPT.expand(16, -1), ANSWER.expand(16, -1), FULL.expand(16, -1)
    spg = LIKELIHOOD_PROXIES.get("spg")(
        toy_model(), prompts, answers, mask, num_samples=3, beta=2.0, mixture=0.5, **args
    )
    elbo = LIKELIHOOD_PROXIES.get("mc_elbo")(toy_model(), prompts, answers, mask, num_samples=3, **args)
    assert spg.logp.shape == (16, 2)
    assert torch.allclose(spg.logp[:, 0], elbo.logp[:, 0], atol=1e-6)
    assert (spg.logp[:, 1] >= spg.logp[:, 0] - 1e-6).all()
    lower_only = LIKELIHOOD_PROXIES.get("spg")(toy_model(), prompts, answers, mask, num_samples=3, mixture=0.0, **args)
    assert torch.allclose(lower_only.logp[:, 0], lower_only.logp[:, 1])


def test_sequence_level_divides_by_the_number_of_trained_tokens():
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    token = LIKELIHOOD_PROXIES.get("mc_elbo")(
        toy_model(), PROMPT, ANSWER, mask, mask_id=MASK, seeds=torch.tensor([3]), level="token"
    )
    sequence = LIKELIHOOD_PROXIES.get("mc_elbo")(
        toy_model(), PROMPT, ANSWER, mask, mask_id=MASK, seeds=torch.tensor([3]), level="sequence"
    )
    assert sequence.logp.shape == (1, 1) and sequence.mask.tolist() == [[1.0]]
    assert sequence.logp[0, 0].item() == pytest.approx(token.logp[0, :2].sum().item() / 2, abs=1e-6)


@pytest.mark.parametrize("name", ["one_step", "mc_elbo", "coupled", "spg", "trace", "gdpo_quadrature", "left_to_right"])
def test_same_seed_gives_the_same_estimate_and_gradients_flow(name):
    embed = torch.nn.Parameter(torch.randn(VOCAB + 1, VOCAB + 1))

    def model(ids, att):
        return embed[ids] + embed[ids].mean(dim=1, keepdim=True)

    kwargs = dict(mask_id=MASK, seeds=torch.tensor([11, 12]), decode_step=torch.tensor([[0, 1, 2], [2, 1, 0]]))
    answers, mask = ANSWER.expand(2, -1), FULL.expand(2, -1)
    first = LIKELIHOOD_PROXIES.get(name)(model, PROMPT.expand(2, -1), answers, mask, **kwargs)
    second = LIKELIHOOD_PROXIES.get(name)(model, PROMPT.expand(2, -1), answers, mask, **kwargs)
    assert torch.equal(first.logp, second.logp)  # on-policy ratio exp(first - second) is exactly 1
    (first.logp * first.mask).sum().backward()
    assert embed.grad is not None and embed.grad.abs().sum() > 0


def test_bad_hyper_parameters_raise_with_the_fix():
    call = LIKELIHOOD_PROXIES.get("mc_elbo")
    with pytest.raises(ValueError, match="num_samples=0 must be a positive integer"):
        call(toy_model(), PROMPT, ANSWER, FULL, mask_id=MASK, seeds=torch.tensor([0]), num_samples=0)
    with pytest.raises(ValueError, match="need 0 <= t_min < t_max <= 1"):
        call(toy_model(), PROMPT, ANSWER, FULL, mask_id=MASK, seeds=torch.tensor([0]), t_min=0.8, t_max=0.2)
    with pytest.raises(ValueError, match=r"prompt_mask_prob=1\.5"):
        LIKELIHOOD_PROXIES.get("one_step")(
            toy_model(), PROMPT, ANSWER, FULL, mask_id=MASK, seeds=torch.tensor([0]), prompt_mask_prob=1.5
        )
