"""The sandbox stops runaway programs (time, CPU, memory, processes, output), leaves nothing behind, and keeps programs
away from the network and from files outside their scratch directory, as far as the reported isolation says."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import pytest

import genalign
from genalign.rewards.sandbox import SandboxLimits, run_sandboxed

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

LIMITS = SandboxLimits(timeout_s=1.5, memory_mb=256, max_processes=8)


def _processes_where(predicate) -> list[int]:
    """Pids of live, non-zombie processes whose ``(uid, pgid, cmdline)`` satisfy ``predicate``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
            uid = os.stat(f"/proc/{entry}").st_uid
        except OSError:
            continue
        state, pgid = fields[0], int(fields[2])
        if state != "Z" and predicate(uid, pgid, cmdline):
            found.append(int(entry))
    return found


def _assert_nothing_left(result, marker: bytes | None = None) -> None:
    time.sleep(0.05)
    uid = result.isolation.uid
    left = _processes_where(
        lambda p_uid, p_pgid, cmdline: (
            p_pgid == result.process_group
            or (uid is not None and p_uid == uid)
            or (marker is not None and marker in cmdline)
        )
    )
    assert left == [], f"processes left behind: {left}"


@pytest.fixture(scope="module")
def isolation():
    return run_sandboxed("pass", limits=LIMITS).isolation


def test_a_correct_program_runs_ok_with_its_stdin():
    result = run_sandboxed("import sys\nprint(sys.stdin.read().upper(), end='')", stdin="abc\n", limits=LIMITS)
    assert (result.status, result.stdout, result.exit_code, result.signal) == ("ok", "ABC\n", 0, None)
    assert result.wall_time_s < 1.5
    _assert_nothing_left(result)


def test_root_runs_the_program_as_a_private_unprivileged_uid(isolation):
    result = run_sandboxed("import os\nprint(os.getuid(), os.getgid())", limits=LIMITS)
    uid, gid = result.stdout.split()
    if os.geteuid() == 0:
        assert int(uid) == isolation.uid != 0 and int(gid) == isolation.uid and result.isolation.process_limit
    else:
        assert int(uid) == os.getuid() and isolation.uid is None


def test_an_infinite_loop_is_stopped_as_timeout():
    result = run_sandboxed("while True:\n    pass", limits=LIMITS)
    assert result.status == "timeout"
    assert 1.4 < result.wall_time_s < 2.5
    _assert_nothing_left(result)


def test_the_cpu_limit_stops_a_busy_program_before_the_wall_limit():
    limits = SandboxLimits(timeout_s=10.0, cpu_time_s=1.0, memory_mb=256)
    result = run_sandboxed("while True:\n    pass", limits=limits)
    # stopped by the 1 s CPU limit, long before the 10 s wall limit (margins for a loaded 2-core machine)
    assert result.status == "timeout" and result.wall_time_s < 8.0
    assert result.cpu_time_s is not None and result.cpu_time_s >= 0.5


def test_allocating_10_gb_is_reported_as_memory():
    result = run_sandboxed("block = bytearray(10 * 1024**3)\nprint('allocated')", limits=LIMITS)
    assert result.status == "memory" and "allocated" not in result.stdout
    assert "MemoryError" in result.stderr


@pytest.mark.parametrize("use_namespaces", [True, False], ids=["namespaces", "fallback"])
def test_a_fork_bomb_is_contained_and_leaves_no_process(use_namespaces):
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    started = time.perf_counter()
    result = run_sandboxed(bomb, limits=LIMITS, use_namespaces=use_namespaces)
    assert result.status in ("timeout", "crash")
    assert time.perf_counter() - started < 5.0
    _assert_nothing_left(result)


@pytest.mark.parametrize("use_namespaces", [True, False], ids=["namespaces", "fallback"])
def test_a_detached_daemon_does_not_outlive_the_run(use_namespaces):
    marker = f"{time.time_ns() % 10**6}.25"  # a unique argument to find the daemon by
    daemon = (
        "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        os.execv('/bin/sleep', ['sleep', '{marker}'])\n    os._exit(0)\nprint('detached')\n"
    )
    result = run_sandboxed(daemon, limits=LIMITS, use_namespaces=use_namespaces)
    assert result.status == "ok" and result.stdout == "detached\n"
    _assert_nothing_left(result, marker=marker.encode())


def test_writing_outside_the_scratch_directory_fails(isolation, tmp_path):
    if isolation.uid is None and not isolation.filesystem_readonly:
        pytest.skip("neither a private uid nor a read-only mount namespace is available here")
    package_dir = Path(genalign.__file__).parent
    open_dir = Path(tempfile.mkdtemp(prefix="genalign-open-"))  # world-writable: only a read-only mount protects it
    open_dir.chmod(0o777)
    try:
        targets = [package_dir / "pwned.py", tmp_path / "pwned"] + (
            [open_dir / "pwned"] if isolation.filesystem_readonly else []
        )
        for target in targets:
            result = run_sandboxed(f"open({str(target)!r}, 'w').write('x')", limits=LIMITS)
            assert result.status == "crash", target
            assert "PermissionError" in result.stderr or "Read-only file system" in result.stderr
            assert not target.exists()
    finally:
        for leftover in open_dir.iterdir():
            leftover.unlink()
        open_dir.rmdir()


def test_the_scratch_directory_is_writable_and_deleted_afterwards():
    program = "import os\nopen('notes.txt', 'w').write('kept')\nprint(os.getcwd())\nprint(open('notes.txt').read())"
    result = run_sandboxed(program, limits=LIMITS)
    assert result.status == "ok", result.stderr
    scratch, content = result.stdout.split()
    assert content == "kept" and not os.path.exists(scratch)


def test_a_connection_to_a_listening_local_server_fails(isolation):
    if not isolation.network_isolated:
        pytest.skip("no network namespace available here")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.3)
        port = server.getsockname()[1]
        program = (
            "import socket\ntry:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'hi')\n    print('connected')\n"
            "except OSError as error:\n    print('blocked', error.errno)\n"
        )
        result = run_sandboxed(program, limits=LIMITS)
        assert result.stdout.startswith("blocked"), result.stdout + result.stderr
        with pytest.raises(TimeoutError):
            server.accept()


def test_output_beyond_the_limit_stops_the_program():
    limits = SandboxLimits(timeout_s=5.0, memory_mb=256, max_output_bytes=1000)
    result = run_sandboxed("while True:\n    print('y' * 100)", limits=limits)
    assert result.status == "output_limit" and result.stdout_truncated
    assert len(result.stdout) == 1000 and result.wall_time_s < 2.0


def test_the_environment_is_clean(monkeypatch):
    monkeypatch.setenv("GENALIGN_TEST_SECRET", "hunter2")
    result = run_sandboxed("import os\nprint(sorted(os.environ))", limits=LIMITS)
    assert result.stdout.strip() == "['HOME', 'LANG', 'PATH', 'TMPDIR']"


@pytest.mark.parametrize(
    ("program", "exit_code", "signal_number"),
    [
        ("raise ValueError('no')", 1, None),
        ("raise SystemExit(3)", 3, None),
        ("import os\nos.kill(os.getpid(), 11)", None, 11),
    ],
)
def test_crashes_keep_their_exit_code_or_signal(program, exit_code, signal_number):
    result = run_sandboxed(program, limits=LIMITS)
    assert (result.status, result.exit_code, result.signal) == ("crash", exit_code, signal_number)


def test_bad_arguments_are_rejected_by_name():
    with pytest.raises(ValueError, match="timeout_s=0"):
        SandboxLimits(timeout_s=0)
    with pytest.raises(ValueError, match="memory_mb=8"):
        SandboxLimits(memory_mb=8)
    with pytest.raises(ValueError, match="language='c'"):
        run_sandboxed("int main(){}", language="c")  # type: ignore[arg-type]
