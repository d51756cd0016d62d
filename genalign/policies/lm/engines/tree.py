"""Shared-prefix tree rollouts of causal LMs in the static KV-cache engine (Tree-GRPO [165], GRPO-MA [173],
SPO-tree [41]; the tree TEMPO [255] reads).

The ``L`` completions of a tree are its leaves. Decoding starts with one cache row per tree (the root); at a *split*
a row is replaced by ``k`` children that copy its key/value cache (the shared prefix is computed once) and then
sample independently. A split happens at a fixed completion position (``split_positions[d]`` for the ``d``-th split
on a path, BranchGRPO-style schedule) or, with ``entropy_threshold``, at the first position from there on where the
sampling distribution's entropy reaches the threshold, or, with ``boundary_table``, at the first position from there
on that follows a segment boundary (a newline or a sentence end: a new reasoning step starts; forced
``entropy_window`` tokens later in both modes). A node whose sequence ends before a split does not split: its leaves
are identical copies of it.

Layout (as in :mod:`genalign.schedulers.branching`): leaves of tree ``b`` are rows ``b L .. b L + L - 1`` of the
result; a node covers a contiguous range of them, and the ``j``-th of its ``k`` children the ``j``-th ``1/k`` of that
range. Each step draws one uniform per row (:func:`~genalign.policies.lm.engines.sampling.draw_uniforms`), recorded for every leaf
the row decodes, so a leaf replays exactly through the ordinary engine
(:meth:`~genalign.policies.lm.engines.static.StaticCacheEngine.generate` with ``draws``). The sampling tree is returned as a
:class:`~genalign.algorithms.structure.PrefixTree` (a node per tree node, depth = splits on the path), from which the
credit rules compute node values as means of descendant outcomes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from genalign.algorithms.structure import PrefixTree
from genalign.policies.lm.engines.base import Generation, SamplingParams, StopStringMatcher, finalize_completions
from genalign.policies.lm.engines.lean_decoder import LeanDecoder
from genalign.policies.lm.engines.sampling import draw_uniforms, sample_next_token
from genalign.policies.lm.engines.static import COMPACT_BELOW


@dataclass(frozen=True)
class LMTreePlan:
    """The shape of every tree of one rollout.

    Attributes:
        split_positions: ``D`` strictly increasing completion positions ``>= 1``: the ``d``-th split on a path
            happens before the token at ``split_positions[d]`` is sampled (its earliest position in entropy mode).
        branching: ``D`` children counts ``>= 2``; leaves ``L = prod(branching)``.
        entropy_threshold: ``None`` for fixed positions, else the entropy (nats, sampling distribution) at which a
            node due to split splits.
        entropy_window: entropy and segment modes: a due node splits at the latest this many tokens after its earliest
            position.
        boundary_table: ``[V]`` bool, the segment-boundary tokens (:class:`~genalign.policies.lm.segments.
            SegmentBoundaries`), or None: a due node splits right after sampling one of them (segment mode).
    """

    split_positions: tuple[int, ...]
    branching: tuple[int, ...]
    entropy_threshold: float | None = None
    entropy_window: int = 0
    boundary_table: Tensor | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        positions = list(self.split_positions)
        if not positions or positions != sorted(set(positions)) or positions[0] < 1:
            raise ValueError(f"split_positions={positions} must be non-empty, strictly increasing and >= 1.")
        if len(self.branching) != len(positions) or min(self.branching) < 2:
            raise ValueError(f"branching={list(self.branching)} needs one count >= 2 per split position {positions}.")
        if self.entropy_threshold is not None and not self.entropy_threshold > 0:
            raise ValueError(f"entropy_threshold={self.entropy_threshold} must be > 0 or None.")
        if self.entropy_window < 0:
            raise ValueError(f"entropy_window={self.entropy_window} must be >= 0.")
        if self.entropy_threshold is not None and self.boundary_table is not None:
            raise ValueError("split at high entropy or at segment boundaries, not both.")

    @property
    def depth(self) -> int:
        return len(self.split_positions)

    @property
    def num_leaves(self) -> int:
        return math.prod(self.branching)

    def tokens_per_leaf(self, length: int) -> float:
        """Generated tokens per leaf when every leaf runs ``length`` tokens (fixed positions); independent: ``length``."""
        edges = [0, *(min(p, length) for p in self.split_positions), length]
        rows = [math.prod(self.branching[:d]) for d in range(self.depth + 1)]
        return (
            sum(r * (end - start) for r, start, end in zip(rows, edges[:-1], edges[1:], strict=True)) / self.num_leaves
        )


@dataclass
class TreeGeneration:
    """Leaves of ``B`` trees, ``N = B L``; ``C`` = longest completion.

    Attributes:
        generation: the leaves' completions (:class:`~genalign.policies.lm.engines.base.Generation`, ``[N, C]``).
        prefix_tree: the sampling tree, ``[N, C]`` (padding actions keep the node of the last token).
        draws: ``[N, max_new_tokens]`` float32, the uniform each leaf's sampling row consumed at each step.
        branch_steps: ``[N, D]`` long, the position of each split on the leaf's path, -1 where it did not happen.
        generated_tokens: tokens sampled for the whole rollout (a shared token counts once).
    """

    generation: Generation
    prefix_tree: PrefixTree
    draws: Tensor
    branch_steps: Tensor
    generated_tokens: int


@dataclass
class _Frontier:
    """The rows held in the cache, one per tree node being decoded (``R`` rows, ``N`` leaves)."""

    node: Tensor  # [R] node id
    lo: Tensor  # [R] first leaf of the node's subtree
    size: Tensor  # [R] leaves under the node
    depth: Tensor  # [R] splits above the node
    position: Tensor  # [R] rotary position of the next token
    done: Tensor  # [R] bool, the node's sequence has ended (still held in the cache)
    fresh: Tensor  # [R] bool, the row was created by a split at the last regroup
    leaf_row: Tensor  # [N] the row decoding each leaf, -1 once it has left the cache

    @classmethod
    def roots(cls, trees: int, leaves: int, position: Tensor) -> _Frontier:
        zeros = torch.zeros(trees, dtype=torch.long)
        return cls(
            node=torch.arange(trees),
            lo=torch.arange(trees) * leaves,
            size=torch.full((trees,), leaves),
            depth=zeros,
            position=position,
            done=zeros.bool(),
            fresh=zeros.bool(),
            leaf_row=torch.arange(trees * leaves) // leaves,
        )

    def regroup(self, counts: Tensor, next_node: int) -> tuple[Tensor, int]:
        """Replace row ``r`` by ``counts[r]`` rows: 0 drops it, 1 keeps it, ``k > 1`` splits it into ``k`` children
        with fresh node ids. Returns the source row of each new row ``[R']`` and the next free node id."""
        split = counts > 1  # [R]
        source = torch.repeat_interleave(torch.arange(len(counts)), counts)  # [R']
        first = torch.cumsum(counts, 0) - counts  # [R] first new row of each old row
        ordinal = torch.arange(len(source)) - first[source]  # [R'] child index within its parent
        child_size = torch.where(split, self.size // counts.clamp(min=1), self.size)  # [R]
        parent = self.leaf_row.clamp(min=0)  # [N]
        kept = (self.leaf_row >= 0) & (counts[parent] > 0)  # [N]
        offset = (torch.arange(len(parent)) - self.lo[parent]) // child_size[parent]  # [N] 0 unless split
        self.leaf_row = torch.where(kept, first[parent] + offset, -1)
        self.fresh = split[source]  # [R']
        new_ids = next_node + torch.cumsum(self.fresh.long(), 0) - 1  # [R']
        self.node = torch.where(self.fresh, new_ids, self.node[source])
        self.lo = self.lo[source] + ordinal * child_size[source]
        self.size, self.depth = child_size[source], self.depth[source] + self.fresh.long()
        self.position, self.done = self.position[source], self.done[source]
        return source, next_node + int(self.fresh.sum())


@dataclass
class _Record:
    """What the decode loop writes per leaf and step (``[N, W]``, ``W`` = ``max_new_tokens``)."""

    ids: Tensor
    logp: Tensor
    draws: Tensor
    node: Tensor
    depth: Tensor
    branch_steps: Tensor  # [N, D]

    @classmethod
    def empty(cls, leaves: int, width: int, depth: int, pad: int, device: torch.device) -> _Record:
        return cls(
            ids=torch.full((leaves, width), pad, dtype=torch.long, device=device),
            logp=torch.zeros(leaves, width, device=device),
            draws=torch.zeros(leaves, width, device=device),
            node=torch.full((leaves, width), -1, dtype=torch.long),
            depth=torch.zeros(leaves, width, dtype=torch.long),
            branch_steps=torch.full((leaves, depth), -1, dtype=torch.long),
        )

    def write(self, step: int, frontier: _Frontier, tokens: Tensor, logp: Tensor, uniforms: Tensor) -> None:
        """Give every leaf of a live row the row's token, log-prob, uniform and node at ``step``."""
        row = frontier.leaf_row.clamp(min=0)  # [N]
        live = (frontier.leaf_row >= 0) & ~frontier.done[row]  # [N]
        leaves, rows = live.nonzero().flatten(), row[live]
        device_rows = rows.to(tokens.device)
        self.ids[leaves.to(tokens.device), step] = tokens[device_rows]
        self.logp[leaves.to(tokens.device), step] = logp[device_rows].float()
        self.draws[leaves.to(tokens.device), step] = uniforms[device_rows, 0]
        self.node[leaves, step], self.depth[leaves, step] = frontier.node[rows], frontier.depth[rows]
        split_here = live & frontier.fresh[row]  # [N] the leaf's row was created by a split at this step
        self.branch_steps[split_here, frontier.depth[row[split_here]] - 1] = step

    def prefix_tree(self, width: int, device: torch.device) -> PrefixTree:
        """The sampling tree over the first ``width`` actions; actions after a leaf's end keep its last node."""
        written = self.node[:, :width] >= 0  # [N, C]
        steps = torch.arange(width).expand_as(written)
        last = torch.where(written, steps, 0).cummax(dim=1).values  # [N, C] last written step so far
        return PrefixTree(
            node_of_action=self.node[:, :width].gather(1, last).to(device),
            depth=self.depth[:, :width].gather(1, last).to(device),
        )


def sampling_entropy(logits: Tensor, temperature: float) -> Tensor:
    """``[R]`` entropy (nats) of ``softmax(logits / T)`` for ``logits`` ``[R, V]``."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)  # [R, V]
    return -(logp.exp() * logp).sum(dim=-1)


def splitting_rows(
    logits: Tensor, step: int, frontier: _Frontier, plan: LMTreePlan, params: SamplingParams, previous: Tensor | None
) -> Tensor:
    """``[R]`` bool: the rows that split before sampling the token at ``step``; ``previous`` ``[R]``: each row's token
    at ``step - 1`` (None at step 0)."""
    earliest_of_depth = torch.tensor([*plan.split_positions, params.max_new_tokens])  # [D + 1]
    due = ~frontier.done & (frontier.depth < plan.depth) & (step >= earliest_of_depth[frontier.depth])  # [R]
    adaptive = plan.entropy_threshold is not None or plan.boundary_table is not None
    if not adaptive or not bool(due.any()):
        return due
    latest = (earliest_of_depth[frontier.depth] + plan.entropy_window).clamp(max=params.max_new_tokens - 1)  # [R]
    ready = torch.zeros_like(due)
    if plan.entropy_threshold is not None:
        entropy = sampling_entropy(logits[due.to(logits.device)], params.temperature).cpu()  # [R_due]
        ready[due] = entropy >= plan.entropy_threshold
    elif previous is not None:
        table = plan.boundary_table.cpu()  # [V]
        tokens = previous.cpu()  # [R]
        ready = table[tokens.clamp(0, table.shape[0] - 1)] & (tokens < table.shape[0])  # [R] a segment just ended
    return due & (ready | (step >= latest))


class TreeCacheEngine:
    """Samples trees of completions of Llama-family models over one static cache per row (module docstring).

    Args:
        model: the ``*ForCausalLM`` module, or a peft model around it.
        tokenizer: used for stop strings only.
    """

    def __init__(self, model: nn.Module, tokenizer) -> None:
        self.decoder = LeanDecoder(model)
        self.tokenizer = tokenizer

    @torch.no_grad()
    def generate_tree(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        params: SamplingParams,
        generator: torch.Generator,
        plan: LMTreePlan,
    ) -> TreeGeneration:
        """Sample one tree of ``plan.num_leaves`` leaves per row of ``prompt_ids`` ``[B, P]`` (left-padded)."""
        trees, prompt_width = prompt_ids.shape
        device, width = prompt_ids.device, params.max_new_tokens
        matcher = StopStringMatcher(self.tokenizer, params.stop)
        eos = torch.tensor(params.eos_token_ids or (-1,), device=device)  # [E]
        record = _Record.empty(trees * plan.num_leaves, width, plan.depth, params.pad_token_id, device)
        cache = self.decoder.allocate(trees, prompt_width + width, device, self.decoder.lm_head.weight.dtype)
        mask = prompt_mask.bool()  # [B, P]
        positions = (mask.long().cumsum(dim=1) - 1).clamp(min=0)  # [B, P]
        logits = self.decoder.forward(prompt_ids, positions, mask, cache, start=0)  # [B, V]
        frontier = _Frontier.roots(trees, plan.num_leaves, positions[:, -1].cpu() + 1)
        children = torch.tensor([*plan.branching, 1])  # [D + 1] children of a split at each depth
        next_node, generated, previous = trees, 0, None
        for step in range(width):
            split = splitting_rows(logits, step, frontier, plan, params, previous)  # [R]
            frontier.fresh = torch.zeros_like(split)
            if bool(split.any()):
                counts = torch.where(frontier.done, 0, torch.where(split, children[frontier.depth], 1))  # [R]
                source, next_node = frontier.regroup(counts, next_node)
                cache, logits = cache.select_rows(source.to(device)), logits[source.to(device)]
            uniforms = draw_uniforms(len(frontier.done), generator, device)  # [R, 1]
            tokens, logp = sample_next_token(logits, params, None, uniforms)  # [R], [R]
            generated += int((~frontier.done).sum())
            record.write(step, frontier, tokens, logp, uniforms)
            frontier.done |= torch.isin(tokens, eos).cpu()
            if matcher:
                for row in torch.nonzero(~frontier.done).flatten().tolist():
                    frontier.done[row] = matcher.tail_contains_stop(record.ids[frontier.lo[row], : step + 1].tolist())
            if bool(frontier.done.all()) or step + 1 == width:
                break
            if (~frontier.done).sum() <= COMPACT_BELOW * len(frontier.done):
                source, next_node = frontier.regroup((~frontier.done).long(), next_node)
                cache, tokens = cache.select_rows(source.to(device)), tokens[source.to(device)]
            previous = tokens  # [R] the last token of each row, for the segment mode
            logits = self.decoder.forward(
                tokens[:, None], frontier.position[:, None].to(device), torch.ones_like(tokens[:, None]).bool(), cache,
                prompt_width + step,
            )  # fmt: skip
            frontier.position = frontier.position + 1
        generation = finalize_completions(record.ids, record.logp, params, matcher)
        return TreeGeneration(
            generation=generation,
            prefix_tree=record.prefix_tree(generation.completion_ids.shape[1], device),
            draws=record.draws,
            branch_steps=record.branch_steps,
            generated_tokens=generated,
        )
