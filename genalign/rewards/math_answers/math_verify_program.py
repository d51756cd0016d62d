"""The program that grades answers with math-verify *inside the sandbox* (:mod:`genalign.rewards.sandbox`).

:mod:`genalign.rewards.math_answers.math_verify_grader` reads this file as text and runs it as the sandbox's program
(``python -I -S -B main.py``: no site-packages, no ``PYTHON*`` variables), so it must stand alone: standard library
only, until it puts the folders named in its request on ``sys.path`` and imports math-verify from there.

Standard input: one JSON object ``{"paths": [folders], "pairs": [[gold, completion], ...], "timeout_s": float,
"wrap_gold": bool}``.
Standard output: one JSON line per pair, in order, as each is decided: ``{"i": index, "outcome": ...}`` with outcome
``"equal"``, ``"not_equal"``, ``"no_answer"`` (nothing parsed in the completion), ``"reference_parse_failure"``
(nothing parsed in the gold answer), ``"timeout"`` or ``"error"``; or a single ``{"error": message}`` line when
math-verify cannot be imported.

Two processes: this one (the *supervisor*) imports math-verify, then forks a *worker* that grades pair after pair (it
gets an index on one pipe and answers on another). math-verify's own time limits are ``signal.alarm`` handlers, which
cannot interrupt a long computation inside C code (``10**10**10``, a huge factorial); so they are turned off and the
supervisor enforces ``timeout_s`` per pair itself: past it, the worker is killed, the pair is a ``"timeout"``, and a
fresh worker is forked (cheap: the imports are already done in the supervisor). The grading is TRL's
``accuracy_reward``: ``parse(gold)`` with math-verify's default extraction (with ``wrap_gold``, a gold answer without
``$``, ``\\(`` or ``\\boxed`` is parsed as ``$gold$``), the completion parsed with LaTeX extraction only
(``\\boxed{}`` first, no unanchored text, ``units=True``), then ``verify(gold, answer)``.
"""

import contextlib
import json
import os
import select
import signal
import sys
import time


def _grader(paths, wrap_gold):
    """The function that grades one pair: ``(gold, completion) -> outcome``; raises ImportError without math-verify."""
    sys.path[:0] = paths
    import logging

    from latex2sympy2_extended import NormalizationConfig
    from math_verify import LatexExtractionConfig, parse, verify

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # the "timeout is disabled" notice, parse failures
    answer_config = [
        LatexExtractionConfig(
            normalization_config=NormalizationConfig(units=True),
            boxed_match_priority=0,
            try_extract_without_anchor=False,
        )
    ]
    golds = {}

    def grade(gold, completion):
        if gold not in golds:
            bare = wrap_gold and "$" not in gold and "\\boxed" not in gold and "\\(" not in gold
            golds[gold] = parse(f"${gold}$" if bare else gold, parsing_timeout=None)
        gold_parsed = golds[gold]
        if not gold_parsed:
            return "reference_parse_failure"
        answer = parse(completion, answer_config, extraction_mode="first_match", parsing_timeout=None)
        if not answer:
            return "no_answer"
        return "equal" if verify(gold_parsed, answer, timeout_seconds=None) else "not_equal"

    return grade


def _work(grade, pairs, requests, replies):
    """The worker: read an index a line, grade that pair, write the outcome a line (never returns)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # whatever a library prints must not reach the supervisor's output
    with os.fdopen(requests, "r") as lines:
        for line in lines:
            index = int(line)
            try:
                outcome = grade(*pairs[index])
            except Exception:
                outcome = "error"
            os.write(replies, (outcome + "\n").encode())
    os._exit(0)


class _Worker:
    def __init__(self, grade, pairs):
        request_read, self.requests = os.pipe()
        self.replies, reply_write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self.requests)
            os.close(self.replies)
            _work(grade, pairs, request_read, reply_write)
        os.close(request_read)
        os.close(reply_write)
        self.buffer = b""
        self.dead = False

    def ask(self, index, timeout_s):
        """The worker's outcome for pair ``index``, or None when it did not answer within ``timeout_s``."""
        os.write(self.requests, f"{index}\n".encode())
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.replies], [], [], left)[0]:
                return None
            chunk = os.read(self.replies, 4096)
            if not chunk:  # the worker died (memory limit, a crash)
                self.dead = True
                return "error"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def stop(self):
        for fd in (self.requests, self.replies):
            os.close(fd)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


def main():
    request = json.load(sys.stdin)
    try:
        grade = _grader(request["paths"], request["wrap_gold"])
    except Exception as error:  # ImportError, or a library that does not load under this interpreter
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}), flush=True)
        return 2
    pairs = [(str(gold), str(completion)) for gold, completion in request["pairs"]]
    worker = None
    for index in range(len(pairs)):
        if worker is None:
            worker = _Worker(grade, pairs)
        outcome = worker.ask(index, request["timeout_s"])
        if outcome is None or worker.dead:  # stuck or dead: a fresh worker for the next pair
            worker.stop()
            worker = None
        print(json.dumps({"i": index, "outcome": outcome or "timeout"}), flush=True)
    if worker is not None:
        worker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
