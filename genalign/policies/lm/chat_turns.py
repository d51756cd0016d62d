"""The chat template's side of a multi-turn rollout: an episode's prompt, the tokens of what the environment says after
a model turn (appended as a suffix), the end-of-turn token, and the check that a template is prefix-preserving.

Earlier turns are never tokenized again: the sequence of a trajectory is the prompt's ids, then each model turn's
sampled ids, then the ids of the text the template puts between that turn and the next generation prompt (the end of
the assistant message the model did not write itself, the tool / user messages, the next ``assistant`` header). That
text is found by rendering the conversation with and without the new messages: it is what the longer rendering adds.

A template is *prefix-preserving* when rendering a conversation with more messages only appends text: the rendering of
the conversation so far (with its generation prompt) starts the rendering that includes the model's turn, and that
starts the rendering with the environment's answer. Templates that rewrite earlier turns (drop the reasoning of past
assistant messages, number the messages, move a system message) are not: the token sequence the model was sampled
on would differ from the one the template gives, and such a template is refused
(:class:`TemplateNotPrefixPreserving`). The check compares rendered text; the suffix is then tokenized on its own, so
the trained sequence is exactly the sampled one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from genalign.environments import Observation

Message = dict[str, Any]

#: the synthetic conversation a template is checked with when the policy is built
_PROBE = [
    {"role": "user", "content": "What is 2 + 3?"},
    {"role": "assistant", "content": "Let me compute it."},
    {"role": "tool", "name": "calculator", "content": "5"},
    {"role": "user", "content": "One more step."},
]


class TemplateNotPrefixPreserving(ValueError):
    """A chat template whose rendering of a longer conversation does not extend the shorter one's."""


def _not_prefix_preserving(what: str, shorter: str, longer: str) -> TemplateNotPrefixPreserving:
    return TemplateNotPrefixPreserving(
        f"the tokenizer's chat template is not prefix-preserving: {what} changes the text rendered before it "
        f"(rendered so far: {shorter[-120:]!r}; then: {longer[: len(shorter)][-120:]!r}). A multi-turn rollout "
        "appends each observation as a suffix and never re-tokenizes earlier turns, so the template must only append "
        "text when a message is added. Fix: give policy.chat_template a template that renders each message "
        "independently of the later ones (e.g. one that keeps past assistant turns verbatim)."
    )


def text_content(content: Any) -> str:
    """A message content as text: a string as it is; content blocks' texts joined (images are dropped: a causal LM
    cannot see them)."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, Mapping) and b.get("type") == "text")
    return str(content)


class ChatRenderer:
    """Renders an episode's conversation with a chat template (``tools=`` the episode's tool schemas).

    Args:
        tokenizer: a Hugging Face tokenizer (it encodes the text and names the special tokens).
        system_prompt: a system message prepended to prompts that have none.
        chat: what renders the messages (its ``apply_chat_template`` and ``chat_template``): the tokenizer when None;
            a VLM passes its processor, whose template renders image content blocks.
    """

    def __init__(self, tokenizer, system_prompt: str | None = None, *, chat: Any = None) -> None:
        self.chat = tokenizer if chat is None else chat
        if getattr(self.chat, "chat_template", None) is None:
            raise ValueError(
                "policy.multi_turn needs a chat template (turns are rendered as chat messages) and the tokenizer has "
                "none; set policy.chat_template."
            )
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt

    def render(self, messages: list[Message], tools: list[dict[str, Any]], *, generation_prompt: bool) -> str:
        extra = {"tools": tools} if tools else {}
        return self.chat.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt, **extra)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_messages(self, prompt: Any, observation: Observation | None, index: int) -> list[Message]:
        """The chat messages of a row's ``prompt`` (a string or messages) with the first observation appended to the
        last user message, and the system prompt."""
        if isinstance(prompt, str):
            messages = [{"role": "user", "content": prompt}]
        elif isinstance(prompt, list) and all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in prompt):
            messages = [dict(m) for m in prompt]
        else:
            raise TypeError(
                f"row {index}: prompt must be a string or a list of {{'role', 'content'}} dicts, got {prompt!r:.80}"
            )
        if observation:
            users = [i for i, m in enumerate(messages) if m["role"] == "user"]
            if users:
                last = messages[users[-1]]
                last["content"] = "\n\n".join(filter(None, [text_content(last["content"]), observation.text]))
            else:
                messages.append({"role": "user", "content": observation.text})
        if self.system_prompt is not None and messages[0]["role"] != "system":
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return messages

    def observation_ids(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        turn: Message,
        model_text: str,
        answer: list[Message],
    ) -> list[int]:
        """The ids of :meth:`observation_text` (tokenized on their own: earlier turns are never tokenized again)."""
        return self.encode(self.observation_text(messages, tools, turn, model_text, answer))

    def observation_text(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        turn: Message,
        model_text: str,
        answer: list[Message],
    ) -> str:
        """The text that follows a model turn: the rest of its assistant message the model did not write (e.g. the
        newline after the end-of-turn token), then ``answer`` (tool / user messages) and the next generation prompt.

        Args:
            messages: the conversation before the turn. turn: the turn as an assistant message.
            model_text: the turn decoded with its special tokens (what the model wrote, end token included).
            answer: the environment's messages.

        Raises:
            TemplateNotPrefixPreserving: a rendering does not extend the one before it.
        """
        before = self.render(messages, tools, generation_prompt=True)
        closed = self.render([*messages, turn], tools, generation_prompt=False)
        if not closed.startswith(before):
            raise _not_prefix_preserving("adding the model's turn", before, closed)
        segment = closed[len(before) :]
        content = str(turn["content"])
        written = next((text for text in (model_text, content, content.strip()) if segment.startswith(text)), None)
        if written is None:
            raise _not_prefix_preserving(
                "rendering the model's turn as an assistant message", before + model_text, closed
            )
        after = self.render([*messages, turn, *answer], tools, generation_prompt=True)
        if not after.startswith(closed):
            raise _not_prefix_preserving("adding the environment's answer", closed, after)
        return segment[len(written) :] + after[len(closed) :]

    def check(self) -> None:
        """Raise :class:`TemplateNotPrefixPreserving` when the template fails on a synthetic conversation (a user
        question, an assistant turn, a tool answer, a user message)."""
        try:
            renderings = [self.render(_PROBE[:size], [], generation_prompt=False) for size in range(1, len(_PROBE) + 1)]
        except Exception as err:  # a Jinja error of the template (e.g. it refuses the tool role)
            raise ValueError(
                f"the chat template cannot render a conversation with a tool answer ({type(err).__name__}: {err}); "
                "a multi-turn rollout renders tool results as role 'tool' messages. Fix: give policy.chat_template a "
                "template that renders user, assistant and tool messages."
            ) from None
        for size in range(1, len(_PROBE)):
            shorter, longer = renderings[size - 1], renderings[size]
            if not longer.startswith(shorter):
                raise _not_prefix_preserving(f"adding a {_PROBE[size]['role']} message", shorter, longer)

    def end_of_turn_ids(self) -> tuple[int, ...]:
        """The special token the template closes an assistant message with (``<|im_end|>``, ``<|eot_id|>``), when it
        is one; sampling stops there as at the end-of-sequence token."""
        marker = "MARKER-7f3a"
        text = self.render([_PROBE[0], {"role": "assistant", "content": marker}], [], generation_prompt=False)
        tail = text.split(marker, 1)[-1] if marker in text else ""
        ids = self.encode(tail.lstrip()) if tail.strip() else []
        if not ids:
            return ()
        special = set(self.tokenizer.all_special_ids) | set(self.tokenizer.get_added_vocab().values())
        return (ids[0],) if ids[0] in special else ()


__all__ = ["ChatRenderer", "TemplateNotPrefixPreserving", "text_content"]
