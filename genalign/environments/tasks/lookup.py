"""Search and lookup over a local document set (task and environment ``lookup``).

A *world* is a procedural set of people, each described by one document: name, profession, birth year, birth city
and mentor (another person). The world is a pure function of ``(world_seed, world_size)``, so rows carry only those
two numbers and the environment rebuilds (and caches) the documents. Questions ask for one fact of one person
(``hops=1``: "In which year was Ilda Varnok born?") or for a fact of that person's mentor (``hops=2``: "In which
city was the mentor of Ilda Varnok born?"). The names are invented, so the answer can only come from the documents:
the model finds them with ``search(query)`` and reads them with ``read(title)``.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from genalign.environments.base import register_environment
from genalign.environments.tasks.common import (
    TASKS,
    AnswerEnvironment,
    Split,
    check_common,
    final_answer,
    normalize,
    split_of,
)
from genalign.environments.tools import tool
from genalign.registry import did_you_mean

ENV_NAME = "lookup"

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kl", "st", "th", "vr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ei", "ou")
_CODAS = ("", "", "n", "r", "s", "l", "k", "th")
_PROFESSIONS = ("baker", "cartographer", "chemist", "glassblower", "astronomer", "weaver", "botanist", "clockmaker",
                "linguist", "sculptor", "mason", "violinist")  # fmt: skip
_ATTRIBUTES = ("year", "city", "profession")


@dataclass(frozen=True)
class Person:
    name: str
    profession: str
    year: int
    city: str
    mentor: str

    def document(self) -> str:
        return (
            f"{self.name} is a {self.profession} born in {self.year} in the city of {self.city}. "
            f"{self.name} learned the trade as a student of {self.mentor}."
        )


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables)).title()


@functools.lru_cache(maxsize=8)
def world(world_seed: int, world_size: int) -> tuple[Person, ...]:
    """The people of a world (names unique, mentors other people of the same world)."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or not 2 <= world_size <= 100_000:
        raise ValueError(f"task {ENV_NAME}: world_size={world_size!r} must be an integer from 2 to 100000.")
    rng = random.Random(f"{ENV_NAME}/world/{world_seed}/{world_size}")
    cities = sorted({_word(rng, 3) for _ in range(max(8, world_size // 4))})
    names: list[str] = []
    taken: set[str] = set()
    while len(names) < world_size:
        name = f"{_word(rng, 2)} {_word(rng, 2)}"
        if name not in taken:
            taken.add(name)
            names.append(name)
    people = []
    for index, name in enumerate(names):
        mentor = names[(index + rng.randrange(1, world_size)) % world_size]
        people.append(Person(name, rng.choice(_PROFESSIONS), rng.randint(1700, 1999), rng.choice(cities), mentor))
    return tuple(people)


def _question(person: Person, attribute: str, hops: int) -> str:
    subject = f"the mentor of {person.name}" if hops == 2 else person.name
    return {
        "year": f"In which year was {subject} born?",
        "city": f"In which city was {subject} born?",
        "profession": f"What is the profession of {subject}?",
    }[attribute]


@TASKS.register(ENV_NAME, summary="questions about invented people, answered by searching local documents",
                source="genalign")  # fmt: skip
def lookup_task(
    size: int,
    seed: int,
    *,
    world_seed: int = 0,
    world_size: int = 500,
    hops: int | list[int] = 1,
    split: Split = "train",
    eval_fraction: float = 0.1,
) -> list[dict[str, Any]]:
    """Rows asking one fact about one person of a world (module docstring).

    Args:
        size: number of rows.
        seed: seed of the question stream.
        world_seed, world_size: the world (every row of a run should share one; the environment rebuilds it).
        hops: 1 (a fact of the person), 2 (a fact of their mentor), or a list to draw from.
        split, eval_fraction: as in ``genalign.data.procedural`` (hash of the prompt).

    Returns:
        rows with ``prompt``, ``answer``, ``question``, ``person`` (named in the question), ``attribute`` (``year``,
        ``city`` or ``profession``), ``hops``, ``world_seed``, ``world_size`` and ``env``.
    """
    check_common(ENV_NAME, size, split, eval_fraction)
    hop_choices = [hops] if isinstance(hops, int) else list(hops)
    if not hop_choices or any(h not in (1, 2) for h in hop_choices):
        raise ValueError(f"task {ENV_NAME}: hops={hops!r} must be 1, 2 or a list of them.")
    people = world(world_seed, world_size)
    by_name = {person.name: person for person in people}
    rng = random.Random(f"{ENV_NAME}/{seed}")
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for _ in range(size * 100):
        person, attribute, hop = rng.choice(people), rng.choice(_ATTRIBUTES), rng.choice(hop_choices)
        question = _question(person, attribute, hop)
        prompt = (
            f"{question} Use the search and read tools to find it in the documents. "
            "When you know it, reply with 'Answer: <answer>'."
        )
        if prompt in seen or split_of(prompt, eval_fraction=eval_fraction) != split:
            continue
        seen.add(prompt)
        target = by_name[person.mentor] if hop == 2 else person
        rows.append({"prompt": prompt, "answer": str(getattr(target, attribute)), "question": question,
                     "person": person.name, "attribute": attribute, "hops": hop, "world_seed": world_seed,
                     "world_size": world_size, "env": ENV_NAME})  # fmt: skip
        if len(rows) == size:
            return rows
    raise ValueError(f"task {ENV_NAME}: only {len(rows)} distinct {split} questions; use a larger world_size.")


_WORD_RE = re.compile(r"[a-z0-9]+")


@register_environment(ENV_NAME, summary="search/read tools over a procedural document set; reward 1 for the exact "
                      "answer", source="genalign")  # fmt: skip
class Lookup(AnswerEnvironment):
    """Tools ``search`` and ``read`` over the row's world; the answer must match the row's ``answer`` (normalised:
    case, punctuation and articles ignored).

    Args:
        top_k: documents listed per search.
        max_turns, error_penalty, tools, tool_limits: as for :class:`AnswerEnvironment`.
    """

    def __init__(self, *, top_k: int = 3, max_turns: int = 8, **kwargs: Any) -> None:
        super().__init__(max_turns=max_turns, **kwargs)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"{ENV_NAME}: top_k={top_k!r} must be a positive integer, e.g. 3.")
        self.top_k = top_k
        self.corpus = _Corpus({}, {}, {})
        self.expected = ""

    def reset(self, *, answer: str, world_seed: int, world_size: int, **row: Any) -> None:
        self.corpus = _corpus(world_seed, world_size)
        self.expected = normalize(str(answer))
        return None

    @tool
    def search(self, query: str) -> str:
        """Search the documents and list the best matches with their first sentence.

        Args:
            query: words to look for, e.g. a person's name.
        """
        words = set(_WORD_RE.findall(query.lower()))
        if not words:
            raise ValueError("the query has no words.")
        corpus = self.corpus
        scored = []
        for title in corpus.documents:
            score = 2 * len(words & corpus.title_words[title]) + len(words & corpus.text_words[title])
            if score:
                scored.append((-score, title))
        if not scored:
            return "No document matches."
        lines = [f"{title}: {corpus.documents[title].split('. ')[0]}." for _, title in sorted(scored)[: self.top_k]]
        return "\n".join(lines)

    @tool
    def read(self, title: str) -> str:
        """Read one document in full.

        Args:
            title: the document's title (a person's name, as search lists it).
        """
        if title not in self.corpus.documents:
            hint = did_you_mean(title, list(self.corpus.documents))
            raise ValueError(f"no document titled {title!r}.{hint}")
        return self.corpus.documents[title]

    def verify(self, text: str) -> bool:
        given = final_answer(text)
        if given is None:
            lines = [line for line in text.strip().splitlines() if line.strip()]
            given = lines[-1] if lines else ""
        return bool(self.expected) and normalize(given) == self.expected


@dataclass(frozen=True)
class _Corpus:
    documents: Mapping[str, str]  # title -> text
    title_words: Mapping[str, frozenset[str]]
    text_words: Mapping[str, frozenset[str]]


@functools.lru_cache(maxsize=8)
def _corpus(world_seed: int, world_size: int) -> _Corpus:
    documents = {person.name: person.document() for person in world(world_seed, world_size)}
    return _Corpus(
        MappingProxyType(documents),
        MappingProxyType({t: frozenset(_WORD_RE.findall(t.lower())) for t in documents}),
        MappingProxyType({t: frozenset(_WORD_RE.findall(d.lower())) for t, d in documents.items()}),
    )
