"""Test sessions: plain data crosses exactly (and nothing else does), each test gets the status it earned, the program's
process is fresh after a failure, a program's name never replaces a built-in, and the program's process holds no
descriptor but its socket and its standard streams."""

from __future__ import annotations

import json
import math
import os
import sys
import time

import pytest

from genalign.rewards.sandbox import SandboxLimits, run_test_session
from genalign.rewards.sandbox.wire import MAX_DEPTH, ProtocolError, Unencodable, dumps, from_data, loads, to_data

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

LIMITS = SandboxLimits(timeout_s=1.0, memory_mb=256, max_processes=8)


def _cross(value):
    return from_data(loads(dumps(to_data(value)).encode()))


@pytest.mark.parametrize(
    "value",
    [
        None, True, 0, -7, 2**64 + 1, -(2**200), 1.5, -0.0, math.inf, "text ✓ \ud800", [1, [2, (3,)]], (), (1, "a"),
        {"a": 1, 2: [3], (4, 5): None, None: True}, {1, 2}, frozenset({"x"}), set(), b"\x00\xff", bytearray(b"ab"),
        complex(1, -2), range(1, 10, 3),
    ],
)  # fmt: skip
def test_plain_data_crosses_exactly(value):
    crossed = _cross(value)
    assert crossed == value and type(crossed) is type(value)
    if isinstance(value, dict):
        assert list(crossed) == list(value)  # order kept


def test_subclasses_arrive_as_their_builtin_and_iterators_materialised():
    class Loud(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    crossed = _cross([Loud(3), (x * x for x in range(3)), map(str, [1, 2])])
    assert crossed[0] == 3 and type(crossed[0]) is int and crossed[0] != 4
    assert list(crossed[1]) == [0, 1, 4] and list(crossed[2]) == ["1", "2"]
    assert math.isnan(_cross(math.nan))


def test_what_is_not_plain_data_is_refused_on_both_sides():
    class Mine:
        pass

    def endless():
        while True:
            yield 1

    for value in (Mine(), print, endless(), [lambda: 1]):
        with pytest.raises(Unencodable):
            to_data(value)
    nested: list = []
    for _ in range(MAX_DEPTH + 2):
        nested = [nested]
    with pytest.raises(Unencodable):
        to_data(nested)
    for node in ({"object": []}, {"set": [[1]]}, {"dict": [[1]]}, {"int": 5}, {"range": [0, 1, 0]}, {"a": 1, "b": 2}):
        with pytest.raises(ProtocolError):
            from_data(node)
    for text in (b"{", b'{"a": 1} x', b"\xff", b"[" * 5000):
        with pytest.raises(ProtocolError):
            loads(text)


def test_json_text_is_what_the_json_module_reads_and_writes():
    message = {"id": 3, "value": [1, 2.5, 'é\n"', None, True, {"tuple": []}], "nan": math.inf}
    assert json.loads(dumps(message)) == message
    assert loads(json.dumps(message).encode()) == message


PROGRAM = """
import os
calls = {"made": 0}

def add(a, b):
    calls["made"] += 1
    return a + b

def count():
    return calls["made"]

def boom(kind):
    if kind == "exit":
        os._exit(0)
    if kind == "loop":
        while True:
            pass
    if kind == "memory":
        raise MemoryError("no room")
    if kind == "stop":
        raise StopIteration
    raise ValueError(kind)

def thing():
    return object()

def fds():
    kinds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            kinds.append(os.readlink(f"/proc/self/fd/{fd}").split(":")[0])
        except OSError:  # the descriptor listdir used, closed by now
            continue
    return kinds

len = lambda value: 99  # never reaches the tests: they keep the built-in
"""


def test_each_test_gets_its_own_status_and_a_fresh_process_after_a_failure():
    tests = [
        "assert add(1, 2) == 3 and count() == 1",
        "assert add(1, 2) == 4",  # fail
        "boom('value')",  # crash: the program's exception
        "try:\n    boom('value')\nexcept ValueError as error:\n    assert str(error) == 'value'",  # ok: expected
        "assert count() == 2",  # the same process serves the tests while it stays healthy
        "boom('memory')",  # memory
        "boom('exit')",  # crash: the process ended
        "assert count() == 0",  # a fresh process after it
        "boom('loop')",  # timeout
        "assert all(map(lambda n: boom('stop') or True, [1, 2]))",  # StopIteration would end map(): not here
        "thing()",  # fail: an object of no plain type cannot cross
        "assert len([1, 2]) == 2 and add(*[1] * 2) == 2",  # the built-in len
    ]
    started = time.perf_counter()
    session = run_test_session(PROGRAM, tests, limits=LIMITS)
    assert session.statuses == (
        "ok", "fail", "crash", "ok", "ok", "memory", "crash", "ok", "timeout", "crash", "fail", "ok",
    ), session.run.stderr  # fmt: skip
    assert session.run.status == "ok" and time.perf_counter() - started < 8.0
    assert "cannot cross to the tests" in session.run.stderr
    assert session.run.isolation.harness_private


def test_the_program_process_holds_only_its_socket_and_standard_streams():
    session = run_test_session(PROGRAM, ["import json\nprint('FDS', json.dumps(fds()))"], limits=LIMITS)
    assert session.statuses == ("ok",), session.run.stderr
    line = next(line for line in session.run.stdout.splitlines() if line.startswith("FDS"))
    kinds = json.loads(line[4:])  # stdin (a file), stdout and stderr (the parent's pipes), the socket: no verdict pipe
    assert kinds.count("pipe") == 2 and kinds.count("socket") == 1 and len(kinds) == 4, kinds


def test_a_program_that_cannot_load_fails_every_test_once():
    session = run_test_session("def add(a, b):\n    return a +\n", ["assert add(1, 2) == 3"] * 3, limits=LIMITS)
    assert session.statuses == ("crash",) * 3
    assert session.run.stderr.count("SyntaxError") == 2  # the traceback and the harness's line, once
    looping = run_test_session("while True:\n    pass\n", ["assert True"] * 3, limits=LIMITS)
    assert looping.statuses == ("timeout",) * 3 and looping.run.wall_time_s < 4.0


def test_an_entry_point_named_like_a_builtin_reaches_the_program():
    program = "def sorted(values):\n    return list(reversed(values))\n"
    check = "def check(candidate):\n    assert candidate([1, 2, 3]) == [3, 2, 1]\n    assert sorted([2, 1]) == [1, 2]\n"
    session = run_test_session(program, [check + "check(sorted)\n"], entry_point="sorted", limits=LIMITS)
    assert session.statuses == ("ok",), session.run.stderr
    assert run_test_session(program, ["assert sorted([2, 1]) == [1, 2]"], limits=LIMITS).statuses == ("ok",)


def test_modules_and_values_of_the_program_reach_the_tests():
    program = "import math as m\nimport os.path\nLIMIT = (1, 2)\ndef area(r):\n    return m.pi * r * r\n"
    tests = ["assert m.isclose(area(1), m.pi) and os.path.join('a', 'b') == 'a/b' and LIMIT == (1, 2)"]
    assert run_test_session(program, tests, limits=LIMITS).statuses == ("ok",)


def test_bad_arguments_are_rejected_by_name():
    with pytest.raises(ValueError, match="0 tests"):
        run_test_session("pass", [], limits=LIMITS)
    with pytest.raises(ValueError, match="strings"):
        run_test_session("pass", [b"assert True"], limits=LIMITS)  # type: ignore[list-item]


@pytest.mark.parametrize("use_namespaces", [True, False], ids=["namespaces", "fallback"])
def test_nothing_the_program_started_outlives_the_session(use_namespaces):
    marker = f"{time.time_ns() % 10**6}.5"  # a unique argument to find the daemons by
    daemon = (
        "import os\ndef spawn():\n    if os.fork() == 0:\n        os.setsid()\n        if os.fork() == 0:\n"
        f"            os.execv('/bin/sleep', ['sleep', '{marker}'])\n        os._exit(0)\n    return True\n"
        "spawn()\n"
    )
    session = run_test_session(
        daemon, ["assert spawn()", "assert spawn()"], limits=LIMITS, use_namespaces=use_namespaces
    )
    assert session.statuses == ("ok", "ok"), session.run.stderr
    time.sleep(0.05)
    left = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if marker.encode() in handle.read():
                    left.append(entry)
        except OSError:
            continue
    assert left == [], f"processes left behind: {left}"


def test_a_large_program_constant_is_not_copied_to_the_tests():
    program = "SIEVE = [True] * 10**6\nSMALL = {'a': 1}\ndef first():\n    return SIEVE[0]\n"
    tests = ["assert SMALL == {'a': 1} and first() is True", "assert 'SIEVE' not in globals()"]
    assert run_test_session(program, tests, limits=LIMITS).statuses == ("ok", "ok")
