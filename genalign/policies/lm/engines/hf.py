"""Rollouts through Hugging Face ``generate``: works for every ``AutoModelForCausalLM``, the reference back-end.

The behaviour log-probs are recorded by a logits processor placed before the temperature / top-k / top-p warpers (where
``generate`` puts user processors), so it sees the raw logits. At step ``t`` it holds ``log softmax(logits_t / T)`` for
one step only (``[B, V]``) and reads the token chosen from it at step ``t + 1``; the full ``[B, C, V]`` score history of
``output_logits=True`` never exists.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from genalign.policies.lm.engines.base import Generation, SamplingParams, StopStringMatcher, finalize_completions


class _BehaviourLogprobRecorder(LogitsProcessor):
    """Records ``log softmax(logits / T)`` of each sampled token; leaves the scores untouched."""

    def __init__(self, temperature: float, prompt_width: int) -> None:
        self.temperature = temperature
        self.prompt_width = prompt_width
        self.previous: Tensor | None = None  # [B, V] log-probs of the step before
        self.logps: list[Tensor] = []  # C x [B]

    def _collect(self, chosen: Tensor) -> None:
        if self.previous is not None:
            self.logps.append(self.previous.gather(1, chosen[:, None]).squeeze(1))

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        if input_ids.shape[1] > self.prompt_width:
            self._collect(input_ids[:, -1])
        self.previous = torch.log_softmax(scores.float() / self.temperature, dim=-1)  # [B, V]
        return scores

    def finish(self, sequences: Tensor) -> Tensor:
        """Collect the last token and return ``[B, C]`` log-probs of ``sequences[:, prompt_width:]``."""
        self._collect(sequences[:, -1])
        self.previous = None
        return torch.stack(self.logps, dim=1)


class _StopStringCriteria(StoppingCriteria):
    """Per-row stop-string check on the decoded tail, the same rule as the static engine.

    (``generate(stop_strings=...)`` precomputes token/string overlaps from the vocabulary, which fails for tokenizers
    whose tokens do not concatenate into text, e.g. word-level ones.)
    """

    def __init__(self, matcher: StopStringMatcher, prompt_width: int) -> None:
        self.matcher = matcher
        self.prompt_width = prompt_width

    def __call__(self, input_ids: Tensor, scores: Tensor, **kwargs) -> Tensor:
        completions = input_ids[:, self.prompt_width :].tolist()
        return torch.tensor([self.matcher.tail_contains_stop(row) for row in completions], device=input_ids.device)


class HFGenerateEngine:
    """Samples with ``model.generate`` (any architecture, any cache implementation transformers picks).

    Args:
        model: the causal LM (a peft model is fine: generation runs through the active adapters).
        tokenizer: decodes completion tails for stop strings.
    """

    def __init__(self, model: nn.Module, tokenizer) -> None:
        self.model = model
        self.tokenizer = tokenizer

    @torch.no_grad()
    def generate(
        self, prompt_ids: Tensor, prompt_mask: Tensor, params: SamplingParams, generator: torch.Generator
    ) -> Generation:
        recorder = _BehaviourLogprobRecorder(params.temperature, prompt_ids.shape[1])
        matcher = StopStringMatcher(self.tokenizer, params.stop)
        stopping = [_StopStringCriteria(matcher, prompt_ids.shape[1])] if matcher else []
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        devices = [prompt_ids.device] if prompt_ids.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            sequences = self.model.generate(
                input_ids=prompt_ids,
                attention_mask=prompt_mask,
                do_sample=True,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k,
                max_new_tokens=params.max_new_tokens,
                eos_token_id=list(params.eos_token_ids) or None,
                pad_token_id=params.pad_token_id,
                stopping_criteria=StoppingCriteriaList(stopping),
                logits_processor=LogitsProcessorList([recorder]),
                return_dict_in_generate=False,
            )
        raw_ids = sequences[:, prompt_ids.shape[1] :]  # [B, C]
        raw_logp = recorder.finish(sequences)  # [B, C]
        return finalize_completions(raw_ids, raw_logp, params, matcher)
