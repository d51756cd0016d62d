"""Step markers (``policy.probes.step_markers``, Step-GRPO's linguistic markers [114]): a marker token opens a new
segment of ``segment_ids``, and ``dynamic_truncation`` cuts its paths before the same markers."""

from __future__ import annotations

import pytest
import torch

from genalign.experimental.sampling.exits import DynamicTruncation
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.options import ProbeOptions
from genalign.policies.lm.segments import SegmentBoundaries

WORDS = ["<pad>", "<eos>", "<unk>", "a", "b", ".", "x\n", "Wait", "Alternatively"]
VOCAB = {w: i for i, w in enumerate(WORDS)}


def _tokenizer():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(vocab=VOCAB, unk_token="<unk>"))
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def _ids(*rows: list[str]) -> torch.Tensor:
    return torch.tensor([[VOCAB[w] for w in row] for row in rows])


def test_a_marker_opens_a_segment_without_making_an_empty_one_after_a_boundary():
    rows = _ids(
        ["a", ".", "Wait", "b", "x\n", "Wait", "a"], ["Wait", "a", "Wait", "Alternatively", "b", "<pad>", "<pad>"]
    )
    mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2])
    plain = SegmentBoundaries(_tokenizer())(rows, mask)
    assert plain.tolist() == [[0, 0, 1, 1, 1, 2, 2], [0, 0, 0, 0, 0, 0, 0]]
    marked = SegmentBoundaries(_tokenizer(), ["Wait", " Alternatively "])(rows, mask)
    # row 0: '.' closes a segment and the 'Wait' after it opens the same one; the 'Wait' after 'x\n' likewise
    # row 1: a marker at t = 0 opens nothing (segment 0 starts there), each later marker opens one; padding continues
    assert marked.tolist() == [[0, 0, 1, 1, 1, 2, 2], [0, 0, 1, 2, 2, 2, 2]]
    assert SegmentBoundaries(_tokenizer(), ["Wait"])(_ids(["a", "Wait", "b", "Wait"]), torch.ones(1, 4)).tolist() == [
        [0, 1, 1, 2]
    ]


def test_a_marker_that_is_no_single_token_is_named():
    with pytest.raises(ValueError, match=r"\['Hmm'\] is not the text of any single token"):
        SegmentBoundaries(_tokenizer(), ["Wait", "Hmm"])(_ids(["a"]), torch.ones(1, 1))
    with pytest.raises(ValueError, match=r"policy\.probes\.step_markers=.* blank"):
        ProbeOptions(step_markers=["Wait", " "]).validate()


def test_the_policy_segments_with_its_configured_markers():
    config = CausalLMPolicyConfig(model="builtin:arith-lm")
    config.probes.step_markers = ["+"]
    policy = build_policy(config, "cpu")
    ids = torch.tensor([policy.tokenizer.convert_tokens_to_ids(list("12+3=4+"))])
    assert policy.segments(ids, torch.ones(1, 7)).tolist() == [[0, 0, 1, 1, 1, 1, 2]]


def test_dynamic_truncation_cuts_before_the_markers_too():
    path = "10+20=30\n30+5=35\n35-1=34\nA:34"  # '\n' ends steps at tokens 8, 16, 24; '+' at 2 and 11
    plain = DynamicTruncation(tokenizer="builtin:chain-lm", cue="A:", answer_marker="A:")
    marked = DynamicTruncation(tokenizer="builtin:chain-lm", cue="A:", answer_marker="A:", step_markers=["+"])
    tokens = torch.tensor([*plain.tokens.encode(path), 1])
    assert plain.step_cuts(tokens) == [9, 17]
    assert marked.step_cuts(tokens) == [2, 9, 11, 17]
    with pytest.raises(ValueError, match="step_markers"):
        DynamicTruncation(tokenizer="builtin:chain-lm", step_markers=[""])
