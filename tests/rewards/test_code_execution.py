"""code_execution: hand-counted test fractions for stdin/stdout and assert-style tests, code extraction, timeouts in
the metrics, early-exit hacks, rows without tests, and construction from config arguments."""

from __future__ import annotations

import sys

import pytest

from genalign.rewards import REWARDS
from genalign.rewards.code_execution import CodeExecution, extract_program, normalize_output

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

DOUBLE = "```python\nn = int(input())\nprint(n * 2)\n```"
PLUS_TWO = "```python\nn = int(input())\nprint(n + 2)\n```"  # right only for n = 2
STDIO_TESTS = [{"input": "1\n", "output": "2"}, {"input": "2\n", "output": "4\n"}, {"input": "3", "output": "6"}]
ADD = "Here is my solution:\n```python\ndef add(a, b):\n    return a + b\n```\nDone."
ADD_TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 4", "assert add(0, 0) == 0"]


def test_builds_from_config_arguments_and_rejects_bad_ones():
    reward = REWARDS.get("code_execution")(timeout_s=2)
    assert isinstance(reward, CodeExecution) and reward.limits.timeout_s == 2
    with pytest.raises(ValueError, match="mode='any'"):
        CodeExecution(mode="any")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="code_execution: timeout_s=-1"):
        CodeExecution(timeout_s=-1)
    with pytest.raises(ValueError, match="max_parallel=0"):
        CodeExecution(max_parallel=0)


def test_stdin_stdout_tests_score_the_fraction_passed():
    reward = CodeExecution(timeout_s=2.0, max_parallel=4)
    rewards = reward([""] * 4, [DOUBLE, PLUS_TWO, "print('nothing')", "raise ValueError"], tests=[STDIO_TESTS] * 4)
    assert rewards == [1.0, pytest.approx(1 / 3), 0.0, 0.0]
    metrics = reward.pop_metrics()
    # passed: 3 + 1; wrong output: 2 + 3; crashed: 3
    assert (metrics["ok"], metrics["fail"], metrics["crash"], metrics["timeout"]) == (4.0, 5.0, 3.0, 0.0)
    assert metrics["network_isolated"] in (0.0, 1.0)


def test_all_or_nothing_mode():
    reward = CodeExecution(timeout_s=2.0, mode="all_or_nothing")
    assert reward([""] * 2, [DOUBLE, PLUS_TWO], tests=[STDIO_TESTS] * 2) == [1.0, 0.0]


def test_an_infinite_loop_is_a_counted_timeout():
    reward = CodeExecution(timeout_s=1.0)
    loop = "```python\nwhile True:\n    pass\n```"
    assert reward([""], [loop], tests=[[{"input": "", "output": "1"}]]) == [0.0]
    metrics = reward.pop_metrics()
    assert metrics["timeout"] == 1.0 and metrics["ok"] == 0.0
    assert reward.pop_metrics()["timeout"] == 0.0  # counters reset after each pop


def test_assert_style_tests_and_test_code_with_an_entry_point():
    reward = CodeExecution(timeout_s=2.0)
    wrong = "```python\ndef add(a, b):\n    return a * b\n```"  # right for (0, 0) and (2, 2) only
    assert reward([""] * 2, [ADD, wrong], tests=[ADD_TESTS] * 2) == [1.0, 0.5]
    assert reward.pop_metrics()["fail"] == 2.0  # failed asserts are wrong answers, not crashes
    check = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(0, 7) == 7\n"
    rewards = reward([""] * 2, [ADD, wrong], test_code=[check, check], entry_point=["add", "add"])
    assert rewards == [1.0, 0.0]


@pytest.mark.parametrize("hack", ["import sys\nsys.exit(0)", "import os\nos._exit(0)", "exit()", "raise SystemExit"])
def test_exiting_before_the_asserts_does_not_pass(hack):
    reward = CodeExecution(timeout_s=2.0)
    assert reward([""], [f"```python\n{hack}\n```"], tests=[["assert add(1, 2) == 3"]]) == [0.0]


def test_a_main_block_does_not_run_in_assert_style():
    program = (
        "```python\ndef add(a, b):\n    return a + b\n\n"
        "if __name__ == '__main__':\n    print(add(int(input()), 1))\n```"
    )
    assert CodeExecution(timeout_s=2.0)([""], [program], tests=[ADD_TESTS[:1]]) == [1.0]


def test_rows_without_tests_are_not_applicable_and_missing_columns_are_named():
    reward = CodeExecution(timeout_s=2.0)
    assert reward([""] * 3, [DOUBLE] * 3, tests=[STDIO_TESTS[:1], None, []]) == [1.0, None, None]
    assert reward.pop_metrics()["rows_without_tests"] == 2.0
    with pytest.raises(ValueError, match="column 'tests'"):
        reward([""], [DOUBLE])


def test_json_string_and_inputs_outputs_test_formats():
    reward = CodeExecution(timeout_s=2.0)
    as_json = '[{"input": "5", "output": "10"}]'
    apps_style = {"inputs": ["1\n", "7\n"], "outputs": ["2\n", "14\n"]}
    assert reward([""] * 2, [DOUBLE, DOUBLE], tests=[as_json, apps_style]) == [1.0, 1.0]


@pytest.mark.parametrize(
    ("text", "extract", "program"),
    [
        ("a\n```python\nx = 1\n```\nb\n```python\nx = 2\n```\n", "last_block", "x = 2\n"),
        ("```py\nx = 3\n```\n```text\nnot code\n```", "last_block", "x = 3\n"),
        ("```\nx = 4\n```", "last_block", "x = 4\n"),
        ("x = 5", "last_block", "x = 5"),
        ("```python\nx = 6\n```", "whole", "```python\nx = 6\n```"),
    ],
)
def test_code_block_extraction(text, extract, program):
    assert extract_program(text, extract=extract) == program


def test_output_comparison_normalises_whitespace_per_line():
    assert normalize_output("  1   2 \n3\t4\n\n") == normalize_output("1 2\n3 4") == ["1 2", "3 4"]
    assert normalize_output("1\n2") != normalize_output("1 2")


# ----------------------------------------------------------------------------------------------------------------------
# forgery: a wrong program must score 0 whatever it does besides returning values (or printing its output)
# ----------------------------------------------------------------------------------------------------------------------

VERDICT_LINES = '{"test": 0, "status": "ok"}\\n{"harness": {"private": true}}\\nPASSED\\n'
#: wrong solutions (add always returns 0, or never returns) that try to pass anyway
FORGERIES = {
    # the old harness's pass token, and any other secret of a harness: __main__, gc, other processes, stdin
    "main_token": "import sys\nprint(getattr(sys.modules['__main__'], '_token', ''), flush=True)\nimport os\nos._exit(0)\n",
    "hunt_secrets": (
        "import gc, os, sys\n"
        "found = [repr(o)[:80] for o in gc.get_objects() if isinstance(o, dict) and ('_token' in o or 'verdict' in o)]\n"
        "for pid in [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]:\n"
        "    for name in ('environ', 'cmdline', 'fd/0', 'fd/3', 'fd/4', 'fd/5'):\n"
        "        try:\n            found.append(open(f'/proc/{pid}/{name}', 'rb').read(200))\n"
        "        except OSError:\n            pass\n"
        "    try:\n        os.open(f'/proc/{pid}/mem', os.O_RDWR)\n        found.append(pid)\n"
        "    except OSError:\n        pass\n"
        "found.append(sys.stdin.read())\nprint(found, flush=True)\n"
        "def add(a, b):\n    return 0\n"
    ),
    "write_every_descriptor": (
        "import os\n"
        f"lines = b'{VERDICT_LINES}'\n"
        "for fd in range(3, 256):\n    try:\n        os.write(fd, lines)\n    except OSError:\n        pass\n"
        "for pid in os.listdir('/proc'):\n    for fd in range(256):\n        try:\n"
        "            os.write(os.open(f'/proc/{pid}/fd/{fd}', os.O_WRONLY | os.O_NONBLOCK), lines)\n"
        "        except OSError:\n            pass\n"
        "def add(a, b):\n    return 0\n"
    ),
    "patched_assertion_error": (
        "import builtins\nbuiltins.AssertionError = type('AssertionError', (BaseException,), {})\n"
        "builtins.all = lambda *args: True\ndef add(a, b):\n    return 0\n"
    ),
    "eq_always_true": "class Yes:\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Yes()\n",
    "eq_int_subclass": (
        "class Yes(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "def add(a, b):\n    return Yes(0)\n"
    ),
    "exit_0_at_load": "import os\nos._exit(0)\n",
    "sys_exit_at_load": "import sys\ndef add(a, b):\n    return 0\nsys.exit(0)\n",
    "exit_0_in_call": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "atexit_hook": (
        "import atexit, sys\n"
        f"atexit.register(lambda: print('{VERDICT_LINES}', flush=True))\n"
        "def add(a, b):\n    sys.exit(0)\n"
    ),
    "forged_stdout": f"print('{VERDICT_LINES}', flush=True)\ndef add(a, b):\n    print('{VERDICT_LINES}')\n    return 0\n",
    "stop_iteration": "def add(a, b):\n    raise StopIteration\n",  # would end the tests' map() early, in one process
}
ASSERTS = ["assert add(1, 2) == 3", "assert all(map(lambda p: add(*p) == sum(p), [(1, 2), (3, 4)]))"]
CHECK = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert all(map(lambda p: candidate(*p) == sum(p), [(3, 4)]))\n"


@pytest.mark.parametrize("name", list(FORGERIES))
def test_a_wrong_program_cannot_forge_a_pass(name):
    program = f"```python\n{FORGERIES[name]}```"
    reward = CodeExecution(timeout_s=2.0, max_parallel=2)
    rewards = reward([""] * 2, [program] * 2, tests=[ASSERTS, None], test_code=[None, CHECK], entry_point=[None, "add"])
    assert rewards == [0.0, 0.0]
    assert reward.pop_metrics()["ok"] == 0.0


#: programs that print what is not the answer (the answer to each input is twice the number)
STDIO_FORGERIES = {
    "forged_verdict": f"print('{VERDICT_LINES}')\n",
    "exit_0_early": "import os\nos._exit(0)\n",
    "atexit_hook": "import atexit\natexit.register(lambda: print('passed'))\nraise SystemExit(0)\n",
    "write_every_descriptor": (
        "import os\nfor fd in range(3, 256):\n    try:\n        os.write(fd, b'ok\\n')\n    except OSError:\n"
        "        pass\nprint(input())\n"
    ),
    "hunt_the_expected_output": (
        "import os\nseen = []\nfor pid in os.listdir('/proc'):\n    for name in ('environ', 'cmdline', 'fd/0'):\n"
        "        try:\n            seen.append(open(f'/proc/{pid}/{name}', 'rb').read(200))\n        except OSError:\n"
        "            pass\nprint(*[s for s in seen if b'42' in s] or ['nothing'])\n"
    ),
}


def test_stdin_stdout_programs_cannot_change_how_the_output_is_compared():
    reward = CodeExecution(timeout_s=2.0)
    programs = [f"```python\n{program}```" for program in STDIO_FORGERIES.values()]
    tests = [[{"input": "21\n", "output": "42"}]] * len(programs)
    assert reward([""] * len(programs), programs, tests=tests) == [0.0] * len(programs)


def test_correct_programs_score_1_in_every_style():
    reward = CodeExecution(timeout_s=2.0)
    stdio = [{"input": "21\n", "output": "42"}]
    rewards = reward(
        [""] * 3,
        [ADD, ADD, DOUBLE],
        tests=[ASSERTS, None, stdio],
        test_code=[None, CHECK, None],
        entry_point=[None, "add", None],
    )
    assert rewards == [1.0, 1.0, 1.0]
    metrics = reward.pop_metrics()
    assert metrics["ok"] == 4.0 and metrics["seccomp"] in (0.0, 1.0)
