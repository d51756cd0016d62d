"""The sandbox stops runaway programs (time, CPU, memory, processes, output), leaves nothing behind, keeps programs
away from the network and from files outside their scratch directory, and denies them the system calls of its filter
(namespaces, ptrace, mounts...), as far as the reported isolation says."""

from __future__ import annotations

import os
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

import pytest

import genalign
from genalign.rewards.sandbox import SandboxLimits, run_sandboxed, seccomp

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


# ----------------------------------------------------------------------------------------------------------------------
# the system-call filter (genalign.rewards.sandbox.seccomp)
# ----------------------------------------------------------------------------------------------------------------------

#: each line: a name, then ``errno`` of the call made through ctypes (0: it succeeded)
_DENIED_CALLS = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def report(name, result):
    print(name, ctypes.get_errno() if result == -1 else 0, flush=True)
    ctypes.set_errno(0)
syscall = libc.syscall
syscall.restype = ctypes.c_long
report("unshare_user", libc.unshare(0x10000000))
report("unshare_net", libc.unshare(0x40000000))
pid = syscall(56, 0x10000000 | 17, 0, 0, 0, 0)  # clone(CLONE_NEWUSER | SIGCHLD): like fork, in a new user namespace
if pid == 0:
    os._exit(0)
report("clone_newuser", pid)
report("clone3", syscall(435, 0, 0))
report("setns", libc.setns(os.open("/proc/self/ns/net", os.O_RDONLY), 0))
report("ptrace", libc.ptrace(0, 0, 0, 0))  # PTRACE_TRACEME, which any process may otherwise do
buffer = ctypes.create_string_buffer(8)
local = (ctypes.c_void_p * 2)(ctypes.addressof(buffer), 8)
report("process_vm_readv", syscall(310, os.getpid(), local, 1, local, 1, 0))
report("mount", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
report("keyctl", syscall(250, 0, -3, 0, 0, 0))  # KEYCTL_GET_KEYRING_ID of the session keyring
report("bpf", syscall(321, 0, 0, 0))
report("perf_event_open", syscall(298, 0, 0, -1, -1, 0))
report("io_uring_setup", syscall(425, 1, 0))
"""


def _errnos(result) -> dict[str, int]:
    return {name: int(code) for name, code in (line.split() for line in result.stdout.splitlines())}


def test_the_filter_denies_namespaces_ptrace_mounts_and_kernel_interfaces(isolation):
    if not isolation.seccomp:
        pytest.skip("the system-call filter is not installed here (not x86_64, or a kernel without seccomp filters)")
    result = run_sandboxed(_DENIED_CALLS, limits=LIMITS)
    assert result.status == "ok", result.stderr
    errnos = _errnos(result)
    assert errnos.pop("clone3") == 38  # ENOSYS: the C library falls back to clone, whose flags the filter checks
    assert errnos == dict.fromkeys(errnos, 1) and len(errnos) == 11, errnos  # EPERM for every one


def test_without_the_filter_the_same_program_creates_a_user_namespace(isolation):
    """The control: what the filter denies is what it denies (the private uid alone would allow it)."""
    result = run_sandboxed(_DENIED_CALLS, limits=LIMITS, use_seccomp=False)
    assert not result.isolation.seccomp
    if _errnos(result)["unshare_user"] != 0:
        pytest.skip("this kernel refuses unprivileged user namespaces even without the filter")
    assert _errnos(result)["ptrace"] == 0


def test_forks_threads_and_subprocesses_work_under_the_filter(isolation):
    program = (
        "import os, subprocess, threading\n"
        "pid = os.fork()\nif pid == 0:\n    os._exit(7)\nprint(os.waitpid(pid, 0)[1] >> 8)\n"
        "box = []\nthread = threading.Thread(target=box.append, args=(1,))\nthread.start()\nthread.join()\nprint(box)\n"
        "print(subprocess.run(['/bin/echo', 'child'], capture_output=True, text=True).stdout.strip())\n"
    )
    result = run_sandboxed(program, limits=LIMITS)
    assert (result.status, result.stdout.split()) == ("ok", ["7", "[1]", "child"]), result.stderr
    assert result.isolation.seccomp == isolation.seccomp


def _run_filter(instructions, nr: int, arch: int = seccomp.AUDIT_ARCH_X86_64, arg0: int = 0) -> int:
    """Evaluate the classic-BPF ``instructions`` on one ``struct seccomp_data`` (the subset of BPF the filter uses)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    accumulator, pc = 0, 0
    while True:
        code, jt, jf, k = instructions[pc]
        if code == 0x20:
            accumulator = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code == 0x06:
            return k
        else:
            taken = {0x15: accumulator == k, 0x35: accumulator >= k, 0x45: bool(accumulator & k)}[code]
            pc += 1 + (jt if taken else jf)


def test_the_filter_program_decides_by_architecture_number_and_clone_flags():
    program = seccomp.filter_instructions()
    allow, eperm, enosys = seccomp.RET_ALLOW, seccomp.RET_ERRNO | 1, seccomp.RET_ERRNO | 38
    for name, number in seccomp.DENIED.items():
        assert _run_filter(program, number) == eperm, name
    assert [_run_filter(program, nr) for nr in (0, 1, 57, 59, 231)] == [allow] * 5  # read write fork execve exit
    assert _run_filter(program, 56, arg0=0x01200011) == allow  # clone as glibc's fork does it
    assert _run_filter(program, 56, arg0=0x003D0F00) == allow  # clone as pthread_create does it
    for flag in (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000):
        assert _run_filter(program, 56, arg0=flag | 17) == eperm, hex(flag)
    assert _run_filter(program, seccomp.CLONE3) == enosys
    assert _run_filter(program, 0, arch=0x40000003) == eperm  # i386 (int 0x80): numbers mean other calls
    assert _run_filter(program, 0x40000000 | 0) == eperm  # x32
    assert len(program) * 8 == len(seccomp.filter_program("x86_64"))
    assert seccomp.filter_program("aarch64") is None  # other numbers there: refused, and reported seccomp=False
