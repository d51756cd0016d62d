"""Long prompts are measured in characters before the tokenizer sees them: far too long is refused (naming the file
line), skipped or cut without tokenizing millions of characters, and a cut in characters gives the same token ids as
the exact cut in tokens."""

from __future__ import annotations

import time

import pytest

from genalign.assets import resolve
from genalign.data.errors import LOCATION_KEY, DataError
from genalign.policies.lm.prompts import _keep_last_chars, chars_per_token_bound, encode_prompts
from genalign.policies.lm.tokenizer import load_tokenizer


class Recording:
    """A tokenizer that remembers the longest text it was asked to encode."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.longest = tokenizer, 0

    def __call__(self, text: str, **kwargs):
        self.longest = max(self.longest, len(text))
        return self.tokenizer(text, **kwargs)

    def get_vocab(self):
        return self.tokenizer.get_vocab()


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(str(resolve("builtin:arith-lm")))


def encode(rows, tokenizer, on_long_prompt, max_prompt_tokens=16):
    return encode_prompts(rows, tokenizer, use_chat_template=False, system_prompt=None,
                          max_prompt_tokens=max_prompt_tokens, on_long_prompt=on_long_prompt, pad_token_id=0)  # fmt: skip


def test_the_bound_is_twice_the_longest_token(tokenizer):
    longest = max(len(entry) for entry in tokenizer.get_vocab())
    assert chars_per_token_bound(tokenizer) == 2 * longest == 10
    assert chars_per_token_bound(object()) == 64  # nothing to measure: a generous default


def test_a_20m_character_prompt_is_refused_without_tokenizing_it(tokenizer):
    recording = Recording(tokenizer)
    rows = [{"prompt": "1+1="}, {"prompt": "1" * 20_000_000 + "+1=", LOCATION_KEY: "train.jsonl, line 7"}]
    started = time.perf_counter()
    with pytest.raises(DataError, match=r"^train\.jsonl, line 7: the prompt has 20000003 characters, more than "
                       r"policy\.max_prompt_tokens=16 tokens can hold \(160 characters, at most 10 per token"):  # fmt: skip
        encode(rows, recording, "error")
    assert time.perf_counter() - started < 2 and recording.longest < 100


def test_skip_and_truncate_left_never_tokenize_the_whole_prompt(tokenizer):
    rows = [{"prompt": "1+1="}, {"prompt": "1" * 20_000_000 + "+1="}]
    recording = Recording(tokenizer)
    skipped = encode(rows, recording, "skip")
    assert skipped.kept == [0] and skipped.skipped == [1] and recording.longest < 100
    recording = Recording(tokenizer)
    cut = encode(rows, recording, "truncate_left")
    assert cut.kept == [0, 1] and cut.truncated == [1] and recording.longest <= 160
    assert cut.ids[1].tolist() == tokenizer("1" * 13 + "+1=")["input_ids"][-16:]


def test_a_cut_in_characters_keeps_the_token_ids_of_the_exact_cut(tokenizer):
    prompt = "".join(f"{i}+{i * 7}=" for i in range(200))  # 2000+ characters, every token a character or two
    recording = Recording(tokenizer)
    cut = encode([{"prompt": prompt}], recording, "truncate_left")
    assert recording.longest <= 160 and cut.truncated == [0]
    assert cut.ids[0].tolist() == tokenizer(prompt)["input_ids"][-16:]


def test_prompts_within_the_bound_get_the_exact_token_check(tokenizer):
    with pytest.raises(
        DataError, match=r"^train\.jsonl, line 2: prompt has 20 tokens, more than policy\.max_prompt_tokens"
    ):
        encode([{"prompt": "1" * 17 + "+1=", LOCATION_KEY: "train.jsonl, line 2"}], tokenizer, "error")


def test_chat_messages_are_cut_from_the_left():
    messages = [{"role": "system", "content": "abc"}, {"role": "user", "content": "defgh"}]
    assert _keep_last_chars(messages, 6) == [{"role": "system", "content": "c"}, {"role": "user", "content": "defgh"}]
    assert _keep_last_chars(messages, 2) == [{"role": "user", "content": "gh"}]
    assert _keep_last_chars("abcdef", 2) == "ef"
