"""The children that tests/prepared_python.py forks behave as fresh ``python`` processes where the tests look: argv,
environment, folder, streams, ``__main__``, exit status, signals, torchrun's rank environment."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from tests import prepared_python

PYTHON = sys.executable


def test_a_forked_child_gets_its_argv_environment_folder_and_streams(tmp_path):
    code = (
        "import json, os, sys; print(json.dumps({'argv': sys.argv, 'cwd': os.getcwd(), 'flag': os.environ.get('FLAG'),"
        " 'path0': sys.path[0], 'main': sys.modules['__main__'].__dict__.get('marker')})); "
        "print('to stderr', file=sys.stderr); marker = 1; sys.exit(3)"
    )
    done = prepared_python.run([PYTHON, "-c", code, "a", "b"], cwd=tmp_path, env={**os.environ, "FLAG": "on"},
                               capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 3 and done.stderr == "to stderr\n"
    seen = json.loads(done.stdout)
    assert seen == {"argv": ["-c", "a", "b"], "cwd": str(tmp_path), "flag": "on", "path0": "", "main": None}


def test_a_script_runs_as_main_with_its_folder_first_on_the_path(tmp_path):
    script = tmp_path / "script.py"
    script.write_text("import sys\ndef f():\n    return 1\nprint(__name__, sys.path[0], f.__module__, sys.argv[1:])\n")
    done = prepared_python.run([PYTHON, str(script), "x"], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["__main__", str(tmp_path), "__main__", "['x']"]


def test_exit_statuses_and_signals_are_those_of_a_process():
    raised = prepared_python.run([PYTHON, "-c", "raise ValueError('boom')"], capture_output=True, text=True)
    assert raised.returncode == 1 and raised.stderr.strip().endswith("ValueError: boom")
    sleeper = prepared_python.popen([PYTHON, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                                    stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert sleeper.stdout.readline() == "up\n" and sleeper.poll() is None
    sleeper.kill()
    assert sleeper.wait(timeout=30) == -signal.SIGKILL
    sleeper.stdout.close()
    interrupted = prepared_python.popen([PYTHON, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    assert interrupted.stdout.readline() == "up\n"
    interrupted.send_signal(signal.SIGINT)  # KeyboardInterrupt, then death by SIGINT as the interpreter does
    assert interrupted.wait(timeout=30) == -signal.SIGINT
    interrupted.stdout.close()


def test_a_timeout_kills_the_child():
    try:
        prepared_python.run([PYTHON, "-c", "import time; time.sleep(60)"], timeout=0.5)
    except subprocess.TimeoutExpired:
        return
    raise AssertionError("no TimeoutExpired")


def test_torchrun_commands_start_one_child_per_rank_with_the_rank_environment():
    code = "import os; print(os.environ['RANK'], os.environ['WORLD_SIZE'], os.environ['LOCAL_RANK'], os.getpid())"
    done = prepared_python.run([PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                                "-c", code], capture_output=True, text=True, timeout=120)  # fmt: skip
    lines = [line.split() for line in done.stdout.splitlines()]
    assert done.returncode == 0 and [line[:3] for line in lines] == [["0", "2", "0"], ["1", "2", "1"]]
    assert lines[0][3] != lines[1][3]


def test_children_of_a_child_started_through_subprocess_are_forked_when_asked():
    code = (
        "import subprocess, sys; "
        "done = subprocess.run([sys.executable, '-c', 'import sys; print(\"torch\" in sys.modules)'], "
        "capture_output=True, text=True); print(type(subprocess.Popen).__name__, done.stdout.strip())"
    )
    forked = prepared_python.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120,
                                 fork_descendants=True)  # fmt: skip
    assert forked.stdout.split() == ["function", "True"]  # the grandchild already had torch: it was forked
    fresh = prepared_python.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120)
    assert fresh.stdout.split() == ["type", "False"]
