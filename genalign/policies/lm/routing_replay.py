"""Routing Replay for mixture-of-experts causal LMs ([294]): the experts each token was routed to when its rollout
was scored are recorded once, and every later scoring pass of that rollout routes the token to the same experts.

Why: a MoE policy's token log-probs move not only with its weights but with its routing; after an update, a token
may be routed to other experts, and the importance ratio then mixes the two changes. [294] finds that once updates
go off-policy (several minibatches per rollout batch), clipping together with Routing Replay is what keeps training
stable. Reading chosen: the routes come from genalign's own scoring pass right after sampling (the pass whose
log-probs the trainer uses as the old policy's; the static engine samples with the same weights in the same process,
so the sampler's routes differ from them only by float rounding) and are replayed in every scoring pass of the
rollout: the old log-probs, each update micro-batch, and the reference pass (the KL compares like with like).

How: transformers' Qwen3-MoE router (``Qwen3MoeTopKRouter``, the ``mlp.gate`` of each sparse layer) is a module that
returns ``(router_logits [T, E], routing_weights [T, k], expert_index [T, k])`` for the ``T = B · L`` tokens of a
pass, so a forward hook reads the chosen experts (:func:`recording`), and a forward hook that replaces them
(:func:`replaying`) keeps the router's gradient: the routing weights are recomputed from the current router logits at
the replayed experts (softmax over all experts, gathered, renormalised when the model normalises its top-k). The
routers are found by ``model_type`` (:data:`ROUTERS`), so another MoE family is one entry.

Storage: ``[N, L, layers, k]`` int16 per rollout (prompt and completion columns kept apart, each padded like its ids);
at Qwen3-30B-A3B's 48 layers and 8 experts per token, 768 bytes per token.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from genalign.policies.lm.reference import get_base_model


@dataclass(frozen=True)
class RouterLayout:
    """Where a MoE architecture keeps its routers and how it turns router logits into routing weights.

    Attributes:
        path: the router's attribute path inside a decoder layer (``mlp.gate``).
        normalized_top_k: the routing weights of the chosen experts are renormalised to sum to 1 (read from this
            config field).
    """

    path: str
    normalized_top_k: str


#: MoE architectures by ``config.model_type``.
ROUTERS: dict[str, RouterLayout] = {"qwen3_moe": RouterLayout(path="mlp.gate", normalized_top_k="norm_topk_prob")}


def moe_routers(causal_lm: nn.Module) -> list[nn.Module]:
    """The routers of ``causal_lm`` (a peft wrapper is fine), in layer order; empty for a dense model or a MoE
    architecture outside :data:`ROUTERS`."""
    model = get_base_model(causal_lm)
    layout = ROUTERS.get(model.config.model_type)
    if layout is None:
        return []
    routers = []
    for layer in model.base_model.layers:
        router = layer
        for part in layout.path.split("."):
            router = getattr(router, part, None)
        if router is not None:
            routers.append(router)
    return routers


def routes_unsupported_reason(causal_lm: nn.Module) -> str | None:
    """Why ``causal_lm`` has no routes to replay (``None`` when it has)."""
    if moe_routers(causal_lm):
        return None
    return (
        f"model_type {get_base_model(causal_lm).config.model_type!r} has no mixture-of-experts router genalign knows "
        f"(known: {sorted(ROUTERS)})"
    )


@contextmanager
def recording(causal_lm: nn.Module, batch: int) -> Iterator[list[Tensor]]:
    """Within the context, the passes of ``causal_lm`` over ``batch`` sequences record their routes: the yielded list
    holds one ``[batch, L, layers, k]`` int16 tensor per pass, filled when the context exits."""
    routers = moe_routers(causal_lm)
    chosen: list[list[Tensor]] = [[] for _ in routers]  # per router, one [T, k] per pass
    handles = [
        router.register_forward_hook(lambda _m, _a, out, i=i: chosen[i].append(out[2].detach().to(torch.int16)))
        for i, router in enumerate(routers)
    ]
    passes: list[Tensor] = []
    try:
        yield passes
    finally:
        for handle in handles:
            handle.remove()
    for per_layer in zip(*chosen, strict=True):  # one pass: [T, k] per layer
        routes = torch.stack(per_layer, dim=1)  # [T, layers, k]
        passes.append(routes.view(batch, -1, *routes.shape[1:]))  # [B, L, layers, k]


@contextmanager
def replaying(causal_lm: nn.Module, routes: Tensor) -> Iterator[None]:
    """Within the context, one pass of ``causal_lm`` over ``[B, L]`` tokens routes token ``(b, l)`` of layer ``j`` to
    experts ``routes[b, l, j]`` (``routes``: ``[B, L, layers, k]`` long or int16), with routing weights from the
    current router logits at those experts (gradient flows to the router)."""
    routers = moe_routers(causal_lm)
    config = get_base_model(causal_lm).config
    normalized = bool(getattr(config, ROUTERS[config.model_type].normalized_top_k))
    if routes.shape[2] != len(routers):
        raise ValueError(f"recorded routes hold {routes.shape[2]} layers but the model has {len(routers)} routers")

    def replace(index: int):
        def hook(_module: nn.Module, _args, output: tuple[Tensor, Tensor, Tensor]):
            logits = output[0]  # [T, E]
            experts = routes[:, :, index].reshape(-1, routes.shape[-1]).to(logits.device).long()  # [T, k]
            weights = logits.float().softmax(dim=-1).gather(1, experts)  # [T, k]
            if normalized:
                weights = weights / weights.sum(dim=-1, keepdim=True)
            return logits, weights.to(output[1].dtype), experts

        return hook

    handles = [router.register_forward_hook(replace(index)) for index, router in enumerate(routers)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


__all__ = ["ROUTERS", "RouterLayout", "moe_routers", "recording", "replaying", "routes_unsupported_reason"]
