"""The python tool runs the model's program in the code sandbox: output comes back (truncated), runaway programs stop
at their limit, and the program cannot write outside its scratch directory or read the trainer's private files (as far
as the sandbox reports that isolation)."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from genalign.environments import TOOLS, Environment, ModelTurn

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")


@pytest.fixture(scope="module")
def python():
    return TOOLS.get("python")(timeout_s=1.0, memory_mb=256, max_output_chars=200)


def test_prints_come_back_with_stderr_and_the_failure(python):
    assert python.fn(code="print(6 * 7)") == "42"
    out = python.fn(code="print('start')\nraise ValueError('bad')")
    assert (
        out.startswith("start\n[stderr]\n")
        and "ValueError: bad" in out
        and out.endswith("[the program failed: exit code 1]")
    )
    assert python.fn(code="x = 1") == "[no output]"


def test_long_output_is_truncated(python):
    out = python.fn(code="print('y' * 5000)")
    assert out.startswith("y" * 200) and "[stdout truncated]" in out and len(out) < 400


def test_a_busy_program_stops_at_its_limit(python):
    started = time.monotonic()
    out = python.fn(code="while True:\n    pass")
    assert out.endswith("[stopped: the program ran past its 1 s limit]") and time.monotonic() - started < 5


def test_it_works_in_its_scratch_directory_but_cannot_write_outside_or_read_private_files(python, tmp_path):
    out = python.fn(
        code="import os\nopen('notes.txt', 'w').write('kept')\nprint(open('notes.txt').read(), os.getcwd())"
    )
    kept, scratch = out.split()
    assert kept == "kept" and not os.path.exists(scratch)
    secret = tmp_path / "secret.txt"
    secret.write_text("token")
    secret.chmod(0o600)
    target = tmp_path / "pwned.txt"
    program = (
        "for action in ('read', 'write'):\n"
        "    try:\n"
        f"        print(open({str(secret)!r}).read() if action == 'read' else open({str(target)!r}, 'w').write('x'))\n"
        "    except OSError as error:\n"
        "        print(action, 'refused', type(error).__name__)\n"
    )
    from genalign.rewards.sandbox import run_sandboxed

    isolation = run_sandboxed("pass").isolation
    if isolation.uid is None and not isolation.filesystem_readonly:
        pytest.skip("neither a private uid nor a read-only mount namespace here (see docs/rewards_code_execution.md)")
    out = python.fn(code=program)
    assert "token" not in out and not target.exists()
    assert "write refused" in out
    if isolation.uid is not None:  # a private uid cannot open the caller's 0600 file
        assert "read refused PermissionError" in out


def test_inside_an_environment_the_tool_call_is_parsed_then_sandboxed():
    env = Environment(tools=[{"name": "python", "timeout_s": 2.0}])
    call = {"name": "python", "arguments": {"code": "import sys; print(sys.flags.isolated, sum(range(10)))"}}
    result = env.step(ModelTurn(f"<tool_call>{json.dumps(call)}</tool_call>"))
    assert result.record.results[0].output.text == "1 45" and not result.done
