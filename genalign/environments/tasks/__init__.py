"""Procedural multi-turn task families, each a row generator in ``TASKS`` and an environment in ``ENVIRONMENTS`` of
the same name: ``calculator_arithmetic``, ``lookup``, ``guess_number`` (see :mod:`.common` for the conventions); each
generator is also a data source ``procedural:<name>`` (:mod:`.sources`)."""

from genalign.environments.tasks import sources  # noqa: F401  (registers the families as procedural sources)
from genalign.environments.tasks.arithmetic import CalculatorArithmetic, calculator_arithmetic
from genalign.environments.tasks.common import TASKS, AnswerEnvironment, final_answer, split_of
from genalign.environments.tasks.guessing import GuessNumber, guess_number_task
from genalign.environments.tasks.lookup import Lookup, lookup_task

__all__ = [
    "TASKS",
    "AnswerEnvironment",
    "CalculatorArithmetic",
    "GuessNumber",
    "Lookup",
    "calculator_arithmetic",
    "final_answer",
    "guess_number_task",
    "lookup_task",
    "split_of",
]
