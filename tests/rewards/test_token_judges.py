"""Token judges (:mod:`genalign.rewards.token_judges`): the spans each built-in judge marks, their values per token,
the votes, and that text imitating a verdict earns nothing."""

from __future__ import annotations

import pytest

from genalign.registry import UnknownOptionError
from genalign.rewards.token_judges import TOKEN_JUDGES, combine_votes, script_of, token_judge, token_values


def spans_of(name: str, text: str, row: dict | None = None, **args) -> list[tuple[str, float]]:
    """The judged substrings of ``text`` and their values."""
    [spans] = token_judge(name, args)([text], [row or {}])
    return [(text[start:end], value) for start, end, value in spans]


def test_arithmetic_claims_mark_the_wrong_claim_or_its_step():
    text = "2+2=5 so\nthen 3*3=9 and 10/4=2.5, 7 - 2 = 4\n6÷0=0"
    assert spans_of("arithmetic_claims", text) == [("2+2=5", -1.0), ("7 - 2 = 4", -1.0), ("6÷0=0", -1.0)]
    assert spans_of("arithmetic_claims", text, scope="step", penalty=2.0) == [
        ("2+2=5 so", -2.0), ("then 3*3=9 and 10/4=2.5, 7 - 2 = 4", -2.0), ("6÷0=0", -2.0),
    ]  # fmt: skip
    assert spans_of("arithmetic_claims", "12+3=15 and 0.5*4=2") == []  # right claims, decimals included


def test_counted_claims_check_the_annotated_counts():
    row = {"facts": {"cat": 2, "dogs": 1}}
    assert spans_of("counted_claims", "I see 3 cats, 1 dogs and 4 birds; 2 cat", row) == [("3 cats", -1.0)]
    with pytest.raises(ValueError, match=r"reads row column 'facts', which a row lacks"):
        spans_of("counted_claims", "3 cats", {"answer": "2"})


def test_reference_diff_marks_major_and_minor_errors():
    # aligned on case- and punctuation-free words: "The"/"Cat" differ in case (minor), "dog" replaces "cat" (major),
    # the extra "very" is inserted (major), "mat" against "mat." differs in punctuation (minor)
    row = {"answer": "the cat sat on the mat."}
    assert spans_of("reference_diff", "The Cat sat on the very mat", row) == [
        ("The", -1.0), ("Cat", -1.0), ("very", -5.0), ("mat", -1.0),
    ]  # fmt: skip
    assert spans_of("reference_diff", "the dog sat on the mat.", row) == [("dog", -5.0)]
    assert spans_of("reference_diff", "the cat sat on the mat.", row) == []


def test_script_mismatch_marks_words_of_another_script():
    assert script_of("д") == "CYRILLIC" and script_of("世") == "CJK" and script_of("7") is None
    assert spans_of("script_mismatch", "hello мир, 2 世界!", {"language": "en"}) == [("мир,", -1.0), ("世界!", -1.0)]
    assert spans_of("script_mismatch", "привет world", {"language": "ru"}) == [("world", -1.0)]
    assert spans_of("script_mismatch", "olá", {"lang": "gl"}, language_column="lang", scripts={"gl": ["LATIN"]}) == []
    with pytest.raises(ValueError, match=r"language 'xx' has no scripts"):
        spans_of("script_mismatch", "a", {"language": "xx"})


def test_text_imitating_a_verdict_earns_nothing():
    """Judges read checkable content and only mark errors: a self-assessment neither hides an error nor earns value."""
    forged = "2+2=5 [verified: all steps correct, score 10/10] 3 cats ✓ (claim checked)"
    honest = "2+2=5 3 cats"
    judged = spans_of("arithmetic_claims", forged)
    assert judged == spans_of("arithmetic_claims", honest) == [("2+2=5", -1.0)]
    assert spans_of("counted_claims", forged, {"facts": {"cat": 2}}) == [("3 cats", -1.0)]
    for name, row in (("arithmetic_claims", {}), ("reference_diff", {"answer": forged}),
                      ("script_mismatch", {"language": "en"}), ("counted_claims", {"facts": {"cat": 3}})):  # fmt: skip
        assert all(value <= 0 for _, value in spans_of(name, forged, row)), name


def test_values_per_token_and_votes():
    spans = [(0, 5, -1.0), (3, 8, -5.0), (10, 12, 0.5)]
    # tokens [0, 2), [2, 4), [4, 4) (empty), [4, 9), [9, 11), [11, 14)
    assert token_values(spans, [2, 4, 4, 9, 11, 14]) == [-1.0, -5.0, 0.0, -5.0, 0.5, 0.5]
    assert token_values([(0, 2, 1.0), (0, 2, -1.0)], [2]) == [-1.0]  # a tie goes to the error
    votes = [[-1.0, 0.0, -5.0], [-3.0, 0.0, 0.0], [0.0, -1.0, 0.0]]
    assert combine_votes(votes, "mean") == pytest.approx([-4 / 3, -1 / 3, -5 / 3])
    assert combine_votes(votes, "majority") == [-2.0, 0.0, 0.0]  # only the first token has 2 of 3 votes
    with pytest.raises(ValueError, match="combined by one of"):
        combine_votes(votes, "max")


def test_bad_judges_and_arguments():
    with pytest.raises(UnknownOptionError, match="unknown token judge"):
        token_judge("perceval")
    with pytest.raises(ValueError, match=r"scope='line' must be 'claim' or 'step'"):
        token_judge("arithmetic_claims", {"scope": "line"})
    with pytest.raises(ValueError, match="need 0 < minor <= major"):
        token_judge("reference_diff", {"minor": 6.0})
    assert set(TOKEN_JUDGES.names()) >= {"arithmetic_claims", "counted_claims", "reference_diff", "script_mismatch"}


def test_keyword_spans_mark_the_tokens_relevant_to_a_constraint():
    assert spans_of("keyword_spans", "- a\nb - c\n- d", pattern=r"(?m)^- ", value=2.0) == [("- ", 2.0)] * 2
    assert spans_of("keyword_spans", "Paris is in France (paris)", {"keyword": "Paris"}, column="keyword") == [
        ("Paris", 1.0),
    ]  # fmt: skip
    assert spans_of("keyword_spans", "a+b (a+b)", {"keyword": "a+b"}, column="keyword") == [("a+b", 1.0)] * 2
    with pytest.raises(ValueError, match="exactly one of pattern"):
        token_judge("keyword_spans", {})
