"""Token log-probs of completions at the sampling temperature, without materialising ``[B, T, V]`` float32 logits.

The backbone runs once over ``[prompt | completion]``; the head, the softmax and the gather then run over the hidden
states of the *real* completion tokens only (padding is skipped), ``chunk_size`` tokens at a time. For the usual
``nn.Linear`` head a custom autograd function keeps only one log-normaliser per token and recomputes each chunk's logits
in backward, turning them in place into the logit gradient; any other head is run chunk by chunk under activation
checkpointing. Either way, at most one chunk's ``[chunk_size, V]`` float32 logits (and their gradient) exist at a
time. Each token's value depends only on its own hidden state, so the result does not depend on how the batch or the
chunks are split.

A *vocabulary term* ``fn(logits [n, V]) -> [n]`` (e.g. a regulariser over the whole next-token distribution,
:func:`genalign.algorithms.bind_vocab_term`) is evaluated in the same pass, with gradient: :func:`completion_scores`
then runs every head (linear or not) through the checkpointed per-chunk path, so the term's autograd graph also
exists for one chunk at a time (recomputed in backward). Without a term, the fused linear-head path is unchanged.

Two detached token features come on request without changing how ``logp`` is computed: ``topk`` (the ``k`` largest
next-token log-probs at the sampling temperature, from a separate no-grad pass over the head, one chunk of logits at a
time), ``hidden`` (the last hidden state predicting each target, which the head reads anyway) and ``logit_stats``
(self-certainty ``logsumexp(s) − mean(s)`` of the logits at the temperature and the target's raw logit, from the same
kind of no-grad chunked pass).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from genalign.algorithms.scores import VocabTerm
from genalign.policies.lm.reference import get_base_model


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """Positions ``[B, L]`` that skip left padding: ``cumsum(mask) - 1`` clamped at 0 (what ``generate`` uses)."""
    return (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)


class TokenScores(NamedTuple):
    """Per-token results of one scoring pass, 0 on padding; a feature not asked for is ``None``.

    Attributes:
        logp: ``[B, C]`` float32 log-probs of the target tokens at the sampling temperature.
        entropy: ``[B, C]`` float32 entropy of ``softmax(logits / T)``.
        vocab_term: ``[B, C]`` float32 value of the vocabulary term.
        topk_logp: ``[B, C, k]`` float32, the ``k`` largest log-probs of ``softmax(logits / T)``, descending (detached).
        hidden: ``[B, C, H]`` the hidden state predicting each target, in the model's dtype (detached).
        logit_stats: ``[B, C, 2]`` float32 self-certainty and raw target logit (detached), see
            :func:`_head_logit_stats`.
        ref_forward_kl: ``[B, C]`` float32 ``KL(π_ref(·|s_t) ‖ πθ(·|s_t))`` over the whole vocabulary, with gradient
            (:func:`chunked_forward_kl`).
        ref_vocab_term: ``[B, C]`` float32 value of a regulariser's term of the policy's and the reference's
            distributions, with gradient (:func:`chunked_reference_terms`).
    """

    logp: Tensor
    entropy: Tensor | None = None
    vocab_term: Tensor | None = None
    topk_logp: Tensor | None = None
    hidden: Tensor | None = None
    logit_stats: Tensor | None = None
    ref_forward_kl: Tensor | None = None
    ref_vocab_term: Tensor | None = None


#: ``term(log_probs [c, V] (grad), other_log_probs [c, V]) -> [c]``: a per-token function of the policy's and another
#: model's next-token distributions at the same position, both at the sampling temperature
ReferenceTerm = Callable[[Tensor, Tensor], Tensor]


#: the score features computed against the reference's distribution in the head pass: asked with their term as the
#: parameter (``ref_forward_kl``: none, :func:`forward_kl_term`), passed to the family's scoring pass with the
#: reference's :class:`OtherModel` (every requested term) instead
REFERENCE_TERMS = ("ref_forward_kl", "ref_vocab_term")


class OtherModel(NamedTuple):
    """Another model at the same positions (the reference): its ``hidden`` ``[B, C, H]`` states, its ``head`` and the
    ``terms`` to compute against it, by score feature (``ref_forward_kl``, ``ref_vocab_term``)."""

    hidden: Tensor
    head: nn.Module
    terms: dict[str, ReferenceTerm]


def forward_kl_term(log_probs: Tensor, other_log_probs: Tensor) -> Tensor:
    """``[c]`` ``KL(p_other ‖ p) = Σ_v p_other(v) (log p_other(v) − log p(v))`` (the score feature ``ref_forward_kl``)."""
    return (other_log_probs.exp() * (other_log_probs - log_probs)).sum(dim=-1)


def _chunk_reference_terms(hidden: Tensor, other_hidden: Tensor, head: nn.Module, other_head: nn.Module,
                           temperature: float, *terms: ReferenceTerm) -> Tensor:  # fmt: skip
    """``[c, len(terms)]`` each term of one chunk's two next-token distributions; the other model's side is a
    constant (no gradient reaches its head or hidden states)."""
    with torch.no_grad():
        other = torch.log_softmax(other_head(other_hidden).float() / temperature, dim=-1)  # [c, V]
    own = torch.log_softmax(head(hidden).float() / temperature, dim=-1)  # [c, V]
    if own.shape[-1] != other.shape[-1]:
        raise ValueError(
            f"a term against the reference needs one vocabulary: the policy's head gives {own.shape[-1]} logits, the "
            f"other model's {other.shape[-1]}."
        )
    return torch.stack([term(own, other).float() for term in terms], dim=-1)  # [c, k]


def chunked_reference_terms(
    hidden: Tensor, other_hidden: Tensor, head: nn.Module, other_head: nn.Module, *, temperature: float,
    chunk_size: int, terms: tuple[ReferenceTerm, ...],
) -> Tensor:  # fmt: skip
    """``[n, len(terms)]`` per-token terms of the policy's and the other model's next-token distributions
    (``softmax(head(h) / T)`` of each side) for every row of ``hidden`` / ``other_hidden`` ``[n, H]``: one chunk of
    ``[chunk_size, V]`` logits per side at a time, the policy's side checkpointed (recomputed in backward), so no
    ``[n, V]`` tensor is ever held. Gradients reach the policy's side only, exactly (e.g. the forward KL's
    ``∂KL/∂s = (pθ − p_other) / T`` per logit). Any model whose hidden states at the same positions and head are given
    can be the other side (the reference here; a teacher of the same vocabulary alike)."""
    use_checkpoint = torch.is_grad_enabled() and hidden.shape[0] > chunk_size
    values = [hidden.new_zeros(0, len(terms), dtype=torch.float32)]
    for start in range(0, hidden.shape[0], chunk_size):
        rows = slice(start, start + chunk_size)
        args = (hidden[rows], other_hidden[rows], head, other_head, temperature, *terms)
        values.append(checkpoint(_chunk_reference_terms, *args, use_reentrant=False) if use_checkpoint
                      else _chunk_reference_terms(*args))  # fmt: skip
    return torch.cat(values)


def chunked_forward_kl(
    hidden: Tensor, other_hidden: Tensor, head: nn.Module, other_head: nn.Module, *, temperature: float,
    chunk_size: int,
) -> Tensor:  # fmt: skip
    """``[n]`` forward KL ``KL(p_other ‖ pθ)`` of every row (:func:`chunked_reference_terms` with
    :func:`forward_kl_term`)."""
    return chunked_reference_terms(hidden, other_hidden, head, other_head, temperature=temperature,
                                   chunk_size=chunk_size, terms=(forward_kl_term,))[:, 0]  # fmt: skip


def _chunk_logprobs(
    hidden: Tensor,
    targets: Tensor,
    head: nn.Module,
    temperature: float,
    with_entropy: bool,
    vocab_term: VocabTerm | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """``hidden`` ``[n, H]``, ``targets`` ``[n]`` -> log-probs, entropies and vocabulary-term values, ``[n]`` each
    (zeros when not asked)."""
    scaled = head(hidden).float() / temperature  # [n, V]
    log_norm = torch.logsumexp(scaled, dim=-1)  # [n]
    logp = scaled.gather(1, targets[:, None]).squeeze(1) - log_norm  # [n]
    term = vocab_term(scaled).float() if vocab_term is not None else torch.zeros_like(logp)  # [n]
    if not with_entropy:
        return logp, torch.zeros_like(logp), term
    probs = torch.exp(scaled - log_norm[:, None])  # [n, V]
    entropy = log_norm - (probs * scaled).sum(dim=-1)  # [n]
    return logp, entropy, term


class _LinearHeadLogprobs(torch.autograd.Function):
    """Log-probs (and entropies) of ``targets`` through a linear head, chunk by chunk, with a hand-written backward.

    Forward keeps only the per-token log-normaliser; backward recomputes each chunk's logits and turns them in place
    into the logit gradient (``d logp_t / d s_j = 1[j = t] − p_j``; ``d H / d s_j = −p_j (s_j − Σ_k p_k s_k)``), so a
    chunk costs about two ``[chunk, V]`` float32 buffers in either pass instead of the five or six that autograd keeps
    for the same expression.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk_size, with_entropy):
        n = hidden.shape[0]
        logp = hidden.new_empty(n, dtype=torch.float32)  # [n]
        entropy = hidden.new_zeros(n, dtype=torch.float32)  # [n]
        log_norm = hidden.new_empty(n, dtype=torch.float32)  # [n]
        for start in range(0, n, chunk_size):
            rows = slice(start, start + chunk_size)
            scaled = F.linear(hidden[rows], weight, bias).float().div_(temperature)  # [c, V]
            log_norm[rows] = torch.logsumexp(scaled, dim=-1)
            logp[rows] = scaled.gather(1, targets[rows, None]).squeeze(1) - log_norm[rows]
            if with_entropy:
                mean_scaled = (scaled.sub(log_norm[rows, None]).exp_().mul_(scaled)).sum(dim=-1)  # [c] E_p[s]
                entropy[rows] = log_norm[rows] - mean_scaled
        ctx.save_for_backward(hidden, weight, bias, targets, log_norm)
        ctx.temperature, ctx.chunk_size, ctx.with_entropy = temperature, chunk_size, with_entropy
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, bias, targets, log_norm = ctx.saved_tensors
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        grad_hidden = torch.zeros_like(hidden) if need_hidden else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if need_weight else None
        grad_bias = torch.zeros_like(bias, dtype=torch.float32) if need_bias else None
        use_entropy = ctx.with_entropy and grad_entropy is not None
        for start in range(0, hidden.shape[0], ctx.chunk_size):
            rows = slice(start, start + ctx.chunk_size)
            h = hidden[rows]  # [c, H]
            scaled = F.linear(h, weight, bias).float().div_(ctx.temperature)  # [c, V]
            probs = scaled.sub(log_norm[rows, None]).exp_()  # [c, V]
            if use_entropy:
                mean_scaled = (probs * scaled).sum(dim=-1, keepdim=True)  # [c, 1]
                # d H / d s = -p (s - E_p[s]) times the incoming entropy gradient
                scaled.sub_(mean_scaled).mul_(probs).mul_(-grad_entropy[rows, None])  # reuse as the entropy gradient
            else:
                scaled = None
            grad = probs.mul_(-grad_logp[rows, None])  # [c, V] d logp / d s = onehot - p
            grad.scatter_add_(1, targets[rows, None], grad_logp[rows, None].float())
            if scaled is not None:
                grad.add_(scaled)
            grad.div_(ctx.temperature)  # d s / d logits = 1 / T
            grad = grad.to(weight.dtype)
            if need_hidden:
                grad_hidden[rows] = grad @ weight  # [c, H]
            if need_weight:
                grad_weight.addmm_(grad.t().float(), h.float())  # [V, H]
            if need_bias:
                grad_bias.add_(grad.float().sum(dim=0))
        grad_weight = grad_weight.to(weight.dtype) if need_weight else None
        grad_bias = grad_bias.to(bias.dtype) if need_bias else None
        return grad_hidden, grad_weight, grad_bias, None, None, None, None


def _head_logprobs(
    hidden: Tensor,
    targets: Tensor,
    head: nn.Module,
    *,
    temperature: float,
    chunk_size: int,
    with_entropy: bool,
    vocab_term: VocabTerm | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """``[n]`` log-probs, entropies and vocabulary-term values (``None`` without a term) of ``targets`` from
    ``hidden`` ``[n, H]``, one chunk of logits at a time."""
    if vocab_term is None and type(head) is nn.Linear:  # the usual head: fused, lean backward
        logp, entropy = _LinearHeadLogprobs.apply(
            hidden, head.weight, head.bias, targets, temperature, chunk_size, with_entropy
        )
        return logp, entropy, None
    # Any other head (e.g. a LoRA-wrapped one), or a vocabulary term: autograd per chunk, checkpointed so only one
    # chunk's graph lives at a time (recomputed in backward).
    use_checkpoint = torch.is_grad_enabled() and hidden.shape[0] > chunk_size
    columns: list[list[Tensor]] = [[], [], []]
    for start in range(0, hidden.shape[0], chunk_size):
        args = (
            hidden[start : start + chunk_size],
            targets[start : start + chunk_size],
            head,
            temperature,
            with_entropy,
            vocab_term,
        )
        values = checkpoint(_chunk_logprobs, *args, use_reentrant=False) if use_checkpoint else _chunk_logprobs(*args)
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    empty = hidden.new_zeros(0, dtype=torch.float32)
    logp, entropy, term = (torch.cat(column) if column else empty for column in columns)
    return logp, entropy, term if vocab_term is not None else None


@torch.no_grad()
def _head_topk(hidden: Tensor, head: nn.Module, *, temperature: float, chunk_size: int, k: int) -> Tensor:
    """``[n, k]`` the ``k`` largest log-probs of ``softmax(head(hidden) / T)`` for ``hidden`` ``[n, H]``, descending;
    one chunk of ``[chunk_size, V]`` logits at a time, without gradient."""
    values = [hidden.new_zeros(0, k, dtype=torch.float32)]
    for start in range(0, hidden.shape[0], chunk_size):
        scaled = head(hidden[start : start + chunk_size]).float() / temperature  # [c, V]
        values.append(scaled.topk(k, dim=-1).values - torch.logsumexp(scaled, dim=-1, keepdim=True))  # [c, k]
    return torch.cat(values)


@torch.no_grad()
def _head_logit_stats(
    hidden: Tensor, targets: Tensor, head: nn.Module, *, temperature: float, chunk_size: int
) -> Tensor:
    """``[n, 2]``: the self-certainty ``logsumexp(s) − mean_v(s)`` of ``s = head(hidden) / T`` (UCAS [210], equal to
    ``KL(uniform ‖ softmax(s)) + log V``) and the raw logit (before the temperature) of ``targets`` ``[n]``; one chunk
    of logits at a time, without gradient."""
    values = [hidden.new_zeros(0, 2, dtype=torch.float32)]
    for start in range(0, hidden.shape[0], chunk_size):
        logits = head(hidden[start : start + chunk_size]).float()  # [c, V]
        scaled = logits / temperature  # [c, V]
        certainty = torch.logsumexp(scaled, dim=-1) - scaled.mean(dim=-1)  # [c]
        raw = logits.gather(1, targets[start : start + chunk_size, None]).squeeze(1)  # [c]
        values.append(torch.stack([certainty, raw], dim=1))
    return torch.cat(values)


def _scatter(values: Tensor, flat_index: Tensor, mask: Tensor) -> Tensor:
    """Values ``[n, ...]`` of the real tokens back to ``mask``'s shape ``[B, C, ...]`` float32, 0 elsewhere."""
    full = torch.zeros(mask.numel(), *values.shape[1:], dtype=torch.float32, device=values.device)
    return full.index_put((flat_index,), values).view(*mask.shape, *values.shape[1:])


def token_scores_from_hidden(
    hidden: Tensor,
    targets: Tensor,
    mask: Tensor,
    head: nn.Module,
    *,
    temperature: float,
    chunk_size: int,
    with_entropy: bool = False,
    vocab_term: VocabTerm | None = None,
    topk: int = 0,
    with_hidden: bool = False,
    with_logit_stats: bool = False,
    reference: OtherModel | None = None,
) -> TokenScores:
    """Log-probs of ``targets`` given the hidden states that predict them (and entropy, vocabulary term, top-k, hidden,
    forward KL from a reference).

    Args:
        hidden: ``[B, C, H]`` hidden state at the position before each target token.
        targets: ``[B, C]`` long target token ids.
        mask: ``[B, C]`` 1 for real targets; others get 0 everywhere and cost nothing.
        head: the output projection ``H -> V``.
        temperature: logits are divided by it before the softmax.
        chunk_size: how many tokens go through the head at once.
        with_entropy: also return the per-token entropy of ``softmax(logits / T)``.
        vocab_term: ``fn(logits / T [n, V]) -> [n]``, evaluated chunk by chunk with gradient; ``None`` keeps the
            fused linear-head path.
        topk: ``k > 0`` also returns the ``k`` largest log-probs of each token (a separate no-grad chunked pass).
        with_hidden: also return ``hidden`` (detached, 0 on padding).
        with_logit_stats: also return the self-certainty and raw target logit (a separate no-grad chunked pass).
        reference: the reference at the same positions (:class:`OtherModel`): also return each of its ``terms``
            (``ref_forward_kl``: ``KL(π_ref ‖ πθ)`` of each token over the vocabulary; ``ref_vocab_term``: a
            regulariser's term), with gradient (:func:`chunked_reference_terms`).

    Returns:
        :class:`TokenScores`.
    """
    vocab = head.out_features if isinstance(head, nn.Linear) else None
    if topk < 0 or (vocab is not None and topk > vocab):
        raise ValueError(f"topk={topk} must be in [0, {vocab or 'vocabulary size'}].")
    flat_index = torch.nonzero(mask.reshape(-1) > 0).flatten()  # [n] real tokens
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])[flat_index]  # [n, H]
    flat_targets = targets.reshape(-1)[flat_index]  # [n]
    logp, entropy, term = _head_logprobs(
        flat_hidden,
        flat_targets,
        head,
        temperature=temperature,
        chunk_size=chunk_size,
        with_entropy=with_entropy,
        vocab_term=vocab_term,
    )
    top = None
    if topk > 0:
        top = _head_topk(flat_hidden, head, temperature=temperature, chunk_size=chunk_size, k=topk)  # [n, k]
    stats = None
    if with_logit_stats:
        stats = _head_logit_stats(flat_hidden, flat_targets, head, temperature=temperature, chunk_size=chunk_size)
    against = _against_reference(flat_hidden, flat_index, mask, head, reference, temperature, chunk_size)
    return TokenScores(
        logp=_scatter(logp, flat_index, mask),
        entropy=_scatter(entropy, flat_index, mask) if with_entropy else None,
        vocab_term=_scatter(term, flat_index, mask) if term is not None else None,
        topk_logp=_scatter(top, flat_index, mask) if top is not None else None,
        hidden=torch.where(mask[..., None] > 0, hidden.detach(), 0) if with_hidden else None,  # [B, C, H]
        logit_stats=_scatter(stats, flat_index, mask) if stats is not None else None,  # [B, C, 2]
        ref_forward_kl=against.get("ref_forward_kl"),  # [B, C]
        ref_vocab_term=against.get("ref_vocab_term"),  # [B, C]
    )


def _against_reference(
    flat_hidden: Tensor, flat_index: Tensor, mask: Tensor, head: nn.Module, reference: OtherModel | None,
    temperature: float, chunk_size: int,
) -> dict[str, Tensor]:  # fmt: skip
    """``{feature: [B, C]}`` each of the ``reference``'s terms at the real tokens (``flat_hidden`` ``[n, H]`` at
    ``flat_index`` of ``mask`` ``[B, C]``), 0 on padding; ``{}`` without a reference."""
    if reference is None or not reference.terms:
        return {}
    other = reference.hidden.reshape(-1, reference.hidden.shape[-1])[flat_index].to(flat_hidden.device)  # [n, H']
    values = chunked_reference_terms(flat_hidden, other, head, reference.head, temperature=temperature,
                                     chunk_size=chunk_size, terms=tuple(reference.terms.values()))  # fmt: skip
    return {name: _scatter(values[:, j], flat_index, mask) for j, name in enumerate(reference.terms)}  # [B, C] each


class SoftCappedHead(nn.Module):
    """An output head whose logits are soft-capped, ``cap · tanh(head(h) / cap)`` (Gemma's
    ``final_logit_softcapping``): the logits the model's own forward returns, so scores match its sampler's."""

    def __init__(self, head: nn.Module, cap: float) -> None:
        super().__init__()
        self.head, self.cap = head, cap

    def forward(self, hidden: Tensor) -> Tensor:
        return torch.tanh(self.head(hidden) / self.cap) * self.cap  # [n, V]


def output_head(causal_lm: nn.Module) -> nn.Module:
    """The head that turns the backbone's hidden states into the logits of ``causal_lm`` (a peft wrapper is fine):
    its output embeddings, soft-capped when the config caps the final logits (the chunked pass then runs it through
    the generic per-chunk path)."""
    model = get_base_model(causal_lm)
    head = model.get_output_embeddings()
    cap = getattr(model.config, "final_logit_softcapping", None)
    return head if cap is None else SoftCappedHead(head, cap)


def backbone_output(module: nn.Module, **inputs: Any) -> Any:
    """The output of the transformers backbone inside ``module`` (a ``*ForCausalLM`` or ``*ForConditionalGeneration``,
    possibly in a peft wrapper), from one call of ``module`` itself: a model output with ``last_hidden_state`` ``[B, L,
    H]`` (and ``hidden_states``, one ``[B, L, H]`` per layer and the embeddings, with ``output_hidden_states=True``).

    Calling the outermost module (not its backbone) lets hooks on it run: under sharded training they gather the
    module's own parameters (embeddings, final norm, output head) for the pass and its backward. The head is applied
    at one position only (``logits_to_keep=1``); the chunked log-prob pass reads it afterwards. The KV cache is off
    unless ``inputs`` turn it on (``use_cache=True``, e.g. with a cache to extend; the output then holds the cache).
    """
    backbone = get_base_model(module).base_model
    captured: list[Any] = []
    handle = backbone.register_forward_hook(lambda _module, _args, output: captured.append(output))
    try:
        module(**{"use_cache": False, **inputs}, logits_to_keep=1)
    finally:
        handle.remove()
    return captured[-1]


def backbone_hidden_states(module: nn.Module, **inputs: Tensor) -> Tensor:
    """``[B, L, H]`` last hidden state of the transformers backbone inside ``module``, from one call of ``module``
    itself (:func:`backbone_output`)."""
    output = backbone_output(module, **inputs)
    return output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]


#: ``fn(causal_lm, prompt_ids [B, P], prompt_mask [B, P], completion_ids [B, C], completion_attention [B, C]) ->
#: [B, C, H]``: the hidden states predicting each completion token (see :func:`completion_scores`)
HiddenStatesFn = Callable[[nn.Module, Tensor, Tensor, Tensor, Tensor], Tensor]


def full_pass_hidden_states(
    causal_lm: nn.Module, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor, completion_attention: Tensor
) -> Tensor:
    """``[B, C, H]`` the hidden states predicting each completion token, from one backbone pass over
    ``[prompt | completion]`` (left-padded prompts ``[B, P]``, right-padded completions ``[B, C]`` of which
    ``completion_attention`` ``[B, C]`` are attended)."""
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # [B, P + C]
    attention_mask = torch.cat([prompt_mask.long(), completion_attention.long()], dim=1)  # [B, P + C]
    hidden = backbone_hidden_states(
        causal_lm,
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
    )  # [B, P + C, H]
    width = prompt_ids.shape[1]
    return hidden[:, width - 1 : width - 1 + completion_ids.shape[1]]  # [B, C, H]


def completion_scores(
    causal_lm: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    temperature: float,
    chunk_size: int,
    completion_attention: Tensor | None = None,
    with_entropy: bool = False,
    vocab_term: VocabTerm | None = None,
    topk: int = 0,
    with_hidden: bool = False,
    with_logit_stats: bool = False,
    hidden_states: HiddenStatesFn | None = None,
    reference: OtherModel | None = None,
) -> TokenScores:
    """Score completions under ``causal_lm`` (a ``*ForCausalLM``, or the peft wrapper of one: LoRA layers apply).

    Args:
        prompt_ids: ``[B, P]`` left-padded prompt ids, ``prompt_mask`` ``[B, P]``.
        completion_ids: ``[B, C]`` right-padded completion ids, ``completion_mask`` ``[B, C]`` (the tokens scored).
        completion_attention: ``[B, C]`` the completion tokens attended to, when they are more than the scored ones
            (multi-turn: environment tokens are context); None: ``completion_mask``.
        vocab_term, topk, with_hidden, with_logit_stats, reference: optional features, see
            :func:`token_scores_from_hidden`.
        hidden_states: how the backbone's ``[B, C, H]`` hidden states predicting the completion tokens are computed,
            ``fn(causal_lm, prompt_ids, prompt_mask, completion_ids, completion_attention)``; None: one pass over
            ``[prompt | completion]`` (:func:`full_pass_hidden_states`). E.g.
            :func:`genalign.policies.lm.shared_prefix.shared_prefix_hidden_states` encodes each distinct prompt once.

    Returns:
        :class:`TokenScores` with ``[B, C]`` (``[B, C, k]``, ``[B, C, H]``) tensors.
    """
    attended = completion_mask if completion_attention is None else completion_attention  # [B, C]
    hidden = (hidden_states or full_pass_hidden_states)(causal_lm, prompt_ids, prompt_mask, completion_ids, attended)
    return token_scores_from_hidden(
        hidden,
        completion_ids,
        completion_mask,
        output_head(causal_lm),
        temperature=temperature,
        chunk_size=chunk_size,
        with_entropy=with_entropy,
        vocab_term=vocab_term,
        topk=topk,
        with_hidden=with_hidden,
        with_logit_stats=with_logit_stats,
        reference=reference,
    )


def naive_completion_logprobs(
    causal_lm: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    temperature: float,
) -> Tensor:
    """Reference implementation through the full ``[B, P + C, V]`` logits (for tests and the memory benchmark)."""
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask.long(), completion_mask.long()], dim=1)
    logits = causal_lm(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
    ).logits  # [B, P + C, V]
    width = prompt_ids.shape[1]
    logp_all = (logits[:, width - 1 : -1].float() / temperature).log_softmax(dim=-1)  # [B, C, V]
    logp = logp_all.gather(2, completion_ids[:, :, None]).squeeze(2)  # [B, C]
    return logp * completion_mask
