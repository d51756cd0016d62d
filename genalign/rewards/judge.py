"""``llm_judge``: a generative model reads a filled-in prompt template and gives a verdict, parsed into a reward.

**The judge** is a local causal LM folder (``model_path``; loaded on the first call, once, never downloaded) or an
OpenAI-compatible chat endpoint (``base_url`` such as ``http://host:8000/v1`` and ``model``; the request goes to
``{base_url}/chat/completions``, with ``Authorization: Bearer $<api_key_env>`` when ``api_key_env`` is set). Exactly
one of ``model_path`` and ``base_url`` is given.

**The template** is a ``str.format`` string with ``{prompt}``, ``{completion}`` (required) and any dataset column
(``{reference}``); literal braces are written ``{{`` and ``}}``. Its syntax is checked at construction, its column
names against the batch before anything is generated (an unknown name raises, naming it and the columns there are).
A row whose column value is None scores None (not applicable, counted as ``not_applicable``). The filled-in template
is the user message (after ``system_prompt`` if set), rendered with the local tokenizer's chat template when it has
one (``chat_template``, as in ``reward_model``), with the generation prompt.

**The verdict** (:func:`parse_verdict`; any ``<think>...</think>`` block is removed first):

- ``verdict="number"``: the first number in the reply, clipped to ``[min_score, max_score]`` and rescaled to
  ``[0, 1]``: ``(x - min_score) / (max_score - min_score)``;
- ``verdict="yes_no"``: the first standalone "yes" (1.0) or "no" (0.0), in any case. With a local judge and
  ``yes_no_mode="logprob"`` nothing is generated: the reward is ``P(yes) / (P(yes) + P(no))`` of the next token after
  the rendered prompt, each summed over the single-token spellings ``yes``, ``Yes``, ``YES`` (with and without a
  leading space) that the tokenizer has.

A reply without a verdict scores 0.0 and is counted (``unparsable``), never silently. Local generation is greedy
(``max_new_tokens``); remote requests use ``temperature: 0``, each attempt within one deadline (``timeout_s``: connect,
send and receive) and ``max_response_mb``. A request that still fails after ``retries`` (see
:mod:`genalign.rewards.remote` for what fails and how retries back off) raises (``on_failure="raise"``) or scores None
(``on_failure="skip"``); both are counted in ``request_errors``. :meth:`LLMJudge.pop_metrics` reports ``judged``,
``unparsable``, ``not_applicable``, ``request_errors``, ``requests``, ``retries`` and the failures by kind (as
``remote_reward``: ``timeouts``, ``too_large_responses``, ...) since the previous call.
"""

from __future__ import annotations

import re
import string
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from genalign.remote_calls import CallFailed
from genalign.rewards.base import register_reward
from genalign.rewards.inputs import completion_text
from genalign.rewards.preference_models import existing_folder
from genalign.rewards.remote import (
    CALL_METRICS,
    Counters,
    HTTPSettings,
    OnFailure,
    api_key_headers,
    check_choice,
    check_positive,
    is_http_address,
)
from genalign.rewards.reward_models import (
    Device,
    DType,
    check_bool_or_none,
    pad_batch,
    pad_token_id,
    resolve_device,
    torch_dtype,
    truncate,
    wants_chat_template,
)

Verdict = Literal["number", "yes_no"]
YesNoMode = Literal["generate", "logprob"]
DEFAULT_TEMPLATES = {
    "number": "Rate how well the response answers the question, from {min_score:g} (worst) to {max_score:g} (best). "
    "Reply with the number only.\n\nQuestion:\n{{prompt}}\n\nResponse:\n{{completion}}",
    "yes_no": "Is the response a correct and helpful answer to the question? Reply yes or no.\n\nQuestion:\n{{prompt}}"
    "\n\nResponse:\n{{completion}}",
}
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")
_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)
_METRICS = ("judged", "unparsable", "not_applicable", "request_errors", *CALL_METRICS)


def template_fields(template: str) -> list[str]:
    """The placeholder names of ``template``; raise a ValueError for anything but plain ``{name}`` placeholders."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as error:
        raise ValueError(
            f"llm_judge: template is not a valid format string ({error}); write literal braces as {{{{ and }}}}."
        ) from None
    names = []
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if not field.isidentifier() or spec or conversion:
            raise ValueError(
                f"llm_judge: template placeholder {{{field}{'!' + conversion if conversion else ''}"
                f"{':' + spec if spec else ''}}} is not valid; use plain names such as {{prompt}}, {{completion}} or "
                "{reference} (a dataset column), and {{ }} for literal braces."
            )
        names.append(field)
    if "completion" not in names:
        raise ValueError("llm_judge: the template has no {completion} placeholder; a judge must see the completion.")
    return list(dict.fromkeys(names))


def parse_verdict(reply: str, *, verdict: Verdict, min_score: float = 0.0, max_score: float = 10.0) -> float | None:
    """The reward in ``[0, 1]`` read from a judge's ``reply``, or None when it holds no verdict (module docstring)."""
    reply = _THINK.sub(" ", reply)
    if verdict == "yes_no":
        match = _YES_NO.search(reply)
        return None if match is None else float(match.group(1).lower() == "yes")
    match = _NUMBER.search(reply)
    if match is None:
        return None
    value = min(max(float(match.group(0)), min_score), max_score)
    return (value - min_score) / (max_score - min_score)


def yes_no_token_ids(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The ids of the single-token spellings of "yes" and of "no" (module docstring); raise when one has none."""
    found = []
    for word in ("yes", "no"):
        ids = set()
        for spelling in (word, word.title(), word.upper()):
            for text in (spelling, " " + spelling):
                tokens = tokenizer.encode(text, add_special_tokens=False)
                if len(tokens) == 1 and tokens[0] != tokenizer.unk_token_id:
                    ids.add(tokens[0])
        if not ids:
            raise ValueError(
                f"llm_judge: yes_no_mode='logprob' but the judge's tokenizer has no single token for {word!r}; use "
                "yes_no_mode: generate."
            )
        found.append(sorted(ids))
    return found[0], found[1]


class LocalJudge:
    """A local causal LM that renders, generates greedily and reads yes/no next-token probabilities."""

    def __init__(self, model_path: str, *, device: Device, dtype: DType, chat_template: bool | None,
                 system_prompt: str | None, max_length: int | None, batch_size: int) -> None:  # fmt: skip
        self.model_dir = existing_folder("llm_judge", "model_path", model_path)
        self.device, self.dtype, self.chat_template = device, dtype, chat_template
        self.system_prompt, self.max_length, self.batch_size = system_prompt, max_length, batch_size
        self.model: Any = None
        self.tokenizer: Any = None
        self._use_chat = False
        self._lock = threading.Lock()

    def load(self) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        with self._lock:
            if self.model is not None:
                return
            device = resolve_device("llm_judge", self.device)
            tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir), local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(
                str(self.model_dir), local_files_only=True, dtype=torch_dtype(self.dtype)
            )
            self._use_chat = wants_chat_template("llm_judge", tokenizer, self.chat_template)
            self.pad_id = pad_token_id("llm_judge", tokenizer)
            self.tokenizer, self.model = tokenizer, model.to(device).eval()

    def render(self, user_message: str) -> str:
        """The text the judge continues: the chat template with its generation prompt, or the message itself."""
        if not self._use_chat:
            return user_message if self.system_prompt is None else f"{self.system_prompt}\n\n{user_message}"
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt is not None else []
        messages.append({"role": "user", "content": user_message})
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def tokens(self, user_message: str) -> list[int]:
        ids = self.tokenizer(self.render(user_message), add_special_tokens=not self._use_chat)["input_ids"]
        return truncate(list(ids), self.max_length, "left")  # keep the end: the completion and the question to answer

    def generate(self, messages: Sequence[str], max_new_tokens: int) -> list[str]:
        """Greedy replies to ``messages``, in batches, left-padded."""
        import torch

        self.load()
        device = next(self.model.parameters()).device
        replies: list[str] = []
        for start in range(0, len(messages), self.batch_size):
            ids, mask = pad_batch([self.tokens(m) for m in messages[start : start + self.batch_size]], self.pad_id,
                                  side="left")  # fmt: skip
            with torch.no_grad():
                out = self.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), do_sample=False,
                                          max_new_tokens=max_new_tokens, pad_token_id=self.pad_id)  # fmt: skip
            new = out[:, ids.shape[1] :]  # [B, max_new_tokens at most]
            replies.extend(self.tokenizer.batch_decode(new, skip_special_tokens=True))
        return replies

    def yes_probabilities(self, messages: Sequence[str]) -> list[float]:
        """``P(yes) / (P(yes) + P(no))`` of the next token after each rendered message, in batches, right-padded."""
        import torch

        self.load()
        yes_ids, no_ids = yes_no_token_ids(self.tokenizer)
        device = next(self.model.parameters()).device
        probabilities: list[float] = []
        for start in range(0, len(messages), self.batch_size):
            sequences = [self.tokens(m) for m in messages[start : start + self.batch_size]]
            ids, mask = pad_batch(sequences, self.pad_id, side="right")
            last = torch.tensor([len(s) - 1 for s in sequences], device=device)  # [B]
            with torch.no_grad():
                logits = self.model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits  # [B, T, V]
            log_probs = torch.log_softmax(logits[torch.arange(len(sequences), device=device), last].float(), -1)
            log_yes = torch.logsumexp(log_probs[:, yes_ids], dim=-1)  # [B]
            log_no = torch.logsumexp(log_probs[:, no_ids], dim=-1)  # [B]
            probabilities.extend(torch.sigmoid(log_yes - log_no).tolist())
        return probabilities


def _chat_reply(answer: Any) -> str:
    """The text of an OpenAI chat-completions answer (``choices[0].message.content``)."""
    content = answer["choices"][0]["message"]["content"]
    if not isinstance(content, str):
        raise ValueError(f"choices[0].message.content is {type(content).__name__}, not a string")
    return content


@register_reward("llm_judge", source="LLM-as-a-judge", path_args=("model_path",))
class LLMJudge:
    """A generative judge's verdict as the reward (module docstring).

    Args:
        template: the judge prompt with ``{prompt}``, ``{completion}`` and column placeholders (default: a rating
            or yes/no question, by ``verdict``).
        verdict: ``"number"`` or ``"yes_no"``.
        min_score: the lowest number of the judge's scale (``verdict="number"``).
        max_score: the highest number of the scale.
        yes_no_mode: ``"generate"`` a reply and parse it, or read the next-token ``"logprob"`` (local judge only).
        model_path: local causal LM folder.
        base_url: OpenAI-compatible endpoint, e.g. ``http://host:8000/v1``.
        model: the model name sent to ``base_url``.
        api_key_env: environment variable holding the endpoint's API key.
        system_prompt: a system message before the template.
        max_new_tokens: reply length limit.
        batch_size: samples per local forward or generate call.
        max_length: prompt tokens kept by a local judge (the start is dropped).
        device: local judge device (``"auto"``, ``"cpu"``, ``"cuda"``).
        dtype: local judge dtype.
        chat_template: use the local tokenizer's chat template (null: when it has one).
        timeout_s: deadline of one attempt at the endpoint (connect, send and receive).
        retries: further attempts of a failed request.
        backoff_s: wait before retry ``k``: ``backoff_s * 2**k`` seconds, plus up to half as much again.
        total_timeout_s: deadline of a request's attempts and waits together (None: ``retries + 1`` attempts).
        max_response_mb: an endpoint answer larger than this (MiB) fails as ``too_large``.
        max_concurrency: requests in flight at once.
        on_failure: a request failing after its retries: ``"raise"``, or ``"skip"`` (the sample scores None).
    """

    def __init__(
        self,
        *,
        template: str | None = None,
        verdict: Verdict = "number",
        min_score: float = 0.0,
        max_score: float = 10.0,
        yes_no_mode: YesNoMode = "generate",
        model_path: str | None = None,
        base_url: str | None = None,
        model: str | None = None,
        api_key_env: str | None = None,
        system_prompt: str | None = None,
        max_new_tokens: int = 32,
        batch_size: int = 8,
        max_length: int | None = 4096,
        device: Device = "auto",
        dtype: DType = "float32",
        chat_template: bool | None = None,
        timeout_s: float = 60.0,
        retries: int = 2,
        backoff_s: float = 1.0,
        total_timeout_s: float | None = None,
        max_response_mb: float = 16.0,
        max_concurrency: int = 8,
        on_failure: OnFailure = "raise",
    ) -> None:
        name = "llm_judge"
        for field, value, options in (("verdict", verdict, Verdict), ("yes_no_mode", yes_no_mode, YesNoMode),
                                      ("device", device, Device), ("dtype", dtype, DType),
                                      ("on_failure", on_failure, OnFailure)):  # fmt: skip
            check_choice(name, field, value, options)
        for field, value in (("min_score", min_score), ("max_score", max_score)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name}: {field}={value!r} must be a number.")
        if not min_score < max_score:
            raise ValueError(f"{name}: min_score={min_score} must be below max_score={max_score}.")
        for field, value, minimum in (("max_new_tokens", max_new_tokens, 1), ("batch_size", batch_size, 1),
                                      ("max_concurrency", max_concurrency, 1)):  # fmt: skip
            check_positive(name, field, value, integer=True, minimum=minimum)
        if max_length is not None:
            check_positive(name, "max_length", max_length, integer=True, minimum=1)
        self.http = HTTPSettings(name, timeout_s, total_timeout_s, retries, backoff_s, max_response_mb)
        check_bool_or_none(name, "chat_template", chat_template)
        if template is None:
            template = DEFAULT_TEMPLATES[verdict].format(min_score=min_score, max_score=max_score)
        if not isinstance(template, str):
            raise ValueError(f"{name}: template={template!r} must be a string.")
        self.fields = template_fields(template)
        self.template, self.verdict, self.yes_no_mode = template, verdict, yes_no_mode
        self.min_score, self.max_score = float(min_score), float(max_score)
        self.max_new_tokens, self.system_prompt = max_new_tokens, system_prompt
        self.max_concurrency, self.on_failure = max_concurrency, on_failure
        self._counters = Counters(_METRICS)
        self.local: LocalJudge | None = None
        if (model_path is None) == (base_url is None):
            raise ValueError(
                "llm_judge: give exactly one of model_path (a local causal LM folder) and base_url (an "
                f"OpenAI-compatible endpoint such as http://host:8000/v1); got model_path={model_path!r}, "
                f"base_url={base_url!r}."
            )
        if model_path is not None:
            self.local = LocalJudge(model_path, device=device, dtype=dtype, chat_template=chat_template,
                                    system_prompt=system_prompt, max_length=max_length, batch_size=batch_size)  # fmt: skip
        else:
            self._configure_endpoint(base_url, model, api_key_env)

    def _configure_endpoint(self, base_url: str, model: str | None, api_key_env: str | None) -> None:
        if not is_http_address(base_url):
            raise ValueError(f"llm_judge: base_url={base_url!r} is not valid; use e.g. http://host:8000/v1.")
        if not model:
            raise ValueError("llm_judge: base_url is set but model is not; name the model the endpoint serves.")
        if self.yes_no_mode == "logprob":
            raise ValueError(
                "llm_judge: yes_no_mode='logprob' needs the judge's logits, i.e. a local judge (model_path); with "
                "base_url use yes_no_mode: generate."
            )
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.headers = model, api_key_headers("llm_judge", api_key_env)

    def messages(self, prompts: Sequence[str], completions: Sequence[Any], columns: dict[str, Sequence[Any]]):
        """The filled-in template of each sample, None where a column it uses is None."""
        unknown = [f for f in self.fields if f not in ("prompt", "completion") and f not in columns]
        if unknown:
            raise ValueError(
                f"llm_judge: template placeholder(s) {', '.join('{' + f + '}' for f in unknown)} name no column of "
                f"the batch (columns: {sorted(columns)}); fix the template or add the column to the data."
            )
        filled: list[str | None] = []
        for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            values = {f: columns[f][i] for f in self.fields if f not in ("prompt", "completion")}
            if any(v is None for v in values.values()):
                filled.append(None)
                continue
            values |= {"prompt": prompt, "completion": completion_text(completion)}
            filled.append(self.template.format_map({key: str(value) for key, value in values.items()}))
        return filled

    def _remote_reply(self, message: str) -> str | CallFailed:
        chat = [{"role": "system", "content": self.system_prompt}] if self.system_prompt is not None else []
        payload = {"model": self.model, "messages": [*chat, {"role": "user", "content": message}],
                   "max_tokens": self.max_new_tokens, "temperature": 0}  # fmt: skip
        try:
            return self.http.post(self.url, payload, _chat_reply, self._counters, self.headers)
        except CallFailed as failure:
            self._counters.add("request_errors")
            return failure

    def replies(self, messages: Sequence[str]) -> list[str | CallFailed]:
        """The judge's raw reply to each filled-in message (local: greedy generation; remote: one request each, a
        :class:`~genalign.remote_calls.CallFailed` where it failed after its retries, counted). Also used by judges
        that parse their own format (:mod:`genalign.rewards.comparative`, :mod:`genalign.environments.llm_judge`)."""
        if self.local is not None:
            return list(self.local.generate(messages, self.max_new_tokens))
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, max(len(messages), 1))) as pool:
            return list(pool.map(self._remote_reply, messages))

    def _verdicts(self, messages: list[str]) -> list[float | None]:
        """The reward of each filled-in template (None: a failed request with ``on_failure="skip"``)."""
        if self.local is not None and self.verdict == "yes_no" and self.yes_no_mode == "logprob":
            return list(self.local.yes_probabilities(messages))
        replies = self.replies(messages)
        failures = [r for r in replies if isinstance(r, CallFailed)]
        if failures and self.on_failure == "raise":
            raise RuntimeError(
                f"llm_judge: {len(failures)} of {len(replies)} requests to {self.url} failed after retries="
                f"{self.http.retries} retries; last error ({failures[-1].kind}): {failures[-1]}. Check the endpoint, raise "
                "timeout_s or retries, or set on_failure: skip to score those samples None (counted)."
            )
        rewards: list[float | None] = []
        for reply in replies:
            if isinstance(reply, CallFailed):
                rewards.append(None)
                continue
            value = parse_verdict(reply, verdict=self.verdict, min_score=self.min_score, max_score=self.max_score)
            self._counters.add("unparsable", int(value is None))
            rewards.append(0.0 if value is None else value)
        return rewards

    def __call__(
        self, prompts: Sequence[str], completions: Sequence[Any], **columns: Sequence[Any]
    ) -> list[float | None]:
        if len(prompts) != len(completions):
            raise ValueError(f"llm_judge: {len(prompts)} prompts for {len(completions)} completions.")
        filled = self.messages(prompts, completions, dict(columns))
        todo = [i for i, message in enumerate(filled) if message is not None]
        self._counters.add("not_applicable", len(filled) - len(todo))
        rewards: list[float | None] = [None] * len(filled)
        if todo:
            for i, value in zip(todo, self._verdicts([filled[i] for i in todo]), strict=True):
                rewards[i] = value
            self._counters.add("judged", len(todo))
        return rewards

    def pop_metrics(self) -> dict[str, float]:
        """The judgement, parsing and request counts since the previous call (module docstring)."""
        return self._counters.pop()
