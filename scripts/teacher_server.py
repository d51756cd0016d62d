"""Reference server for the remote teacher protocol (``algorithm.teacher: {source: remote}``): serves the per-token
log-probs of a causal LM folder.

    python scripts/teacher_server.py --model path/to/teacher --temperature 1.0 --host 0.0.0.0 --port 8001

``POST`` (any path) ``{"prompts": [...], "completions": [...], "completion_token_ids": [[...], ...]}`` answers
``200 {"logprobs": [[...], ...]}``: for each sample, the log-probability of each of its token ids after the prompt and
the ids before it, at ``--temperature`` (use the policy's sampling temperature, as a local teacher does). A prompt is
a string (tokenized with the model's tokenizer, special tokens added) or chat messages (rendered with its chat
template; ``--use-chat-template`` also renders string prompts as one user message). The scoring is genalign's chunked
log-prob pass (:func:`genalign.policies.lm.logprobs.completion_scores`): no ``[B, L, V]`` logits. The model must use
the student's tokenizer: the ids are the student's. A malformed request answers ``400 {"error": ...}``, a failure
``500``. ``GET /health`` answers ``{"status": "ok", "model": path}``.

Requests are served by threads, the model by one at a time. Once listening, the server prints ``serving teacher
'<path>' on http://<host>:<port>`` (``--port 0`` picks a free port). No authentication, no TLS: a trusted network only.
"""

from __future__ import annotations

import argparse
import threading
from http.server import ThreadingHTTPServer
from typing import Any

from json_http import JSONHandler


def check_request(body: Any, vocabulary_size: int) -> tuple[list[Any], list[list[int]]]:
    """``(prompts, completion_token_ids)`` of a request body; ValueError naming what is wrong."""
    if not isinstance(body, dict):
        raise ValueError('the request must be a JSON object {"prompts": [...], "completion_token_ids": [[...], ...]}')
    prompts, ids = body.get("prompts"), body.get("completion_token_ids")
    if not isinstance(prompts, list) or not isinstance(ids, list) or len(prompts) != len(ids):
        raise ValueError("'prompts' and 'completion_token_ids' must be lists of the same length")
    for i, tokens in enumerate(ids):
        valid = (
            isinstance(tokens, list) and tokens and all(isinstance(t, int) and not isinstance(t, bool) for t in tokens)
        )
        if not valid or not all(0 <= t < vocabulary_size for t in tokens):
            raise ValueError(f"completion_token_ids[{i}] must be a non-empty list of ids in [0, {vocabulary_size})")
    return prompts, ids


class Scorer:
    """The model and tokenizer of ``path`` and how prompts are rendered."""

    def __init__(self, path: str, *, temperature: float, use_chat_template: bool, chunk_size: int = 256) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        from genalign.policies.lm.tokenizer import load_tokenizer

        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(path).eval()
        self.tokenizer = load_tokenizer(path)
        self.temperature, self.use_chat_template, self.chunk_size = temperature, use_chat_template, chunk_size
        self.pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0

    def prompt_ids(self, prompt: Any) -> list[int]:
        if isinstance(prompt, list) or self.use_chat_template:
            messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
            return list(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
        if not isinstance(prompt, str):
            raise ValueError(f"a prompt must be a string or chat messages, got {type(prompt).__name__}")
        return list(self.tokenizer(prompt)["input_ids"])

    def __call__(self, prompts: list[Any], ids: list[list[int]]) -> list[list[float]]:
        from genalign.policies.lm.logprobs import completion_scores
        from genalign.policies.lm.probes import left_pad

        torch = self.torch
        prompt_ids, prompt_mask = left_pad([self.prompt_ids(p) for p in prompts], self.pad)
        width = max(len(t) for t in ids)
        completion = torch.tensor([t + [self.pad] * (width - len(t)) for t in ids])
        mask = torch.tensor([[1.0] * len(t) + [0.0] * (width - len(t)) for t in ids])
        with torch.no_grad():
            scores = completion_scores(self.model, prompt_ids, prompt_mask, completion, mask,
                                       temperature=self.temperature, chunk_size=self.chunk_size)  # fmt: skip
        return [scores.logp[i, : len(t)].tolist() for i, t in enumerate(ids)]


def make_server(scorer: Scorer, path: str, host: str = "127.0.0.1", port: int = 8001) -> ThreadingHTTPServer:
    """A server (not yet serving: call ``serve_forever``) answering with ``scorer``."""
    lock = threading.Lock()
    size = int(scorer.model.get_output_embeddings().weight.shape[0])

    class Handler(JSONHandler):
        def do_GET(self) -> None:
            if self.path == "/health":
                self.send_json(200, {"status": "ok", "model": path})
            else:
                self.send_json(404, {"error": "GET /health; POST a batch to score it"})

        def do_POST(self) -> None:
            try:
                prompts, ids = check_request(self.read_json(), size)
            except (ValueError, UnicodeDecodeError) as error:
                self.send_json(400, {"error": f"bad request: {error}"})
                return
            try:
                with lock:
                    logprobs = scorer(prompts, ids)
            except Exception as error:
                self.send_json(500, {"error": f"{type(error).__name__}: {error}"})
                return
            self.send_json(200, {"logprobs": logprobs})

    return ThreadingHTTPServer((host, port), Handler)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the teacher's causal LM folder (the student's tokenizer)")
    parser.add_argument("--temperature", type=float, default=1.0, help="the policy's sampling temperature")
    parser.add_argument("--use-chat-template", action="store_true", help="render string prompts as a user message")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    parser.add_argument("--port", type=int, default=8001, help="port (0: a free one, printed at start)")
    options = parser.parse_args(argv)
    if not options.temperature > 0:
        parser.error(f"--temperature must be > 0, got {options.temperature}")
    scorer = Scorer(options.model, temperature=options.temperature, use_chat_template=options.use_chat_template)
    server = make_server(scorer, options.model, options.host, options.port)
    host, port = server.server_address[:2]
    print(f"serving teacher {options.model!r} on http://{host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
