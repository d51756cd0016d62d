"""The system-call filter of a sandboxed program's processes: :func:`filter_program` assembles a classic-BPF seccomp
filter by hand (standard library only; no libseccomp binding exists in the sandbox's ``python -I -S``), which
:mod:`~genalign.rewards.sandbox.child` installs with ``prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ...)`` in the
program's process (after ``no_new_privs``, before ``exec``); the kernel keeps it on every descendant.

The filter (x86_64 only; elsewhere :func:`filter_program` returns None and the run reports ``seccomp=False``):

1. a system call of another ABI (``int 0x80`` i386 calls, whose numbers differ, or x32 calls, numbers with bit 30
   set) fails with ``EPERM``: the deny list below would not match their numbers;
2. every call in :data:`DENIED` fails with ``EPERM``: namespaces (``unshare``, ``setns``), other processes' memory
   and descriptors (``ptrace``, ``process_vm_readv/writev``, ``pidfd_getfd``, ``kcmp``), mounts and roots, keyrings,
   ``bpf``, ``perf_event_open``, ``io_uring`` (its operations would bypass the filter), ``userfaultfd``, kernel modules
   and ``kexec``, ``open_by_handle_at``, and machine-wide settings (clock, hostname, swap, reboot, accounting);
3. ``clone`` with any ``CLONE_NEW*`` flag in its first argument fails with ``EPERM`` (a plain ``fork`` or thread
   passes);
4. ``clone3`` fails with ``ENOSYS``: its flags live in memory that a filter cannot read, and on ``ENOSYS`` the C
   library falls back to ``clone``, which step 3 checks;
5. everything else is allowed.
"""

from __future__ import annotations

import platform
import struct

#: ``AUDIT_ARCH_X86_64`` (the ``arch`` field of ``struct seccomp_data`` for native x86_64 system calls)
AUDIT_ARCH_X86_64 = 0xC000003E
#: x32 system calls carry this bit in their number
X32_SYSCALL_BIT = 0x40000000

#: x86_64 numbers of the system calls that fail with ``EPERM`` (arch/x86/entry/syscalls/syscall_64.tbl)
DENIED: dict[str, int] = {
    # namespaces
    "unshare": 272,
    "setns": 308,
    # other processes' memory, descriptors and memory placement
    "ptrace": 101,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "pidfd_getfd": 438,
    "kcmp": 312,
    "migrate_pages": 256,
    "move_pages": 279,
    # mounts and roots
    "mount": 165,
    "umount2": 166,
    "pivot_root": 155,
    "chroot": 161,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    # kernel keyrings
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    # kernel attack surface: BPF, perf, io_uring, userfaultfd
    "bpf": 321,
    "perf_event_open": 298,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "userfaultfd": 323,
    # kernel modules, kexec, reboot
    "init_module": 175,
    "finit_module": 313,
    "delete_module": 176,
    "kexec_load": 246,
    "kexec_file_load": 320,
    "reboot": 169,
    # machine-wide settings and devices
    "swapon": 167,
    "swapoff": 168,
    "acct": 163,
    "settimeofday": 164,
    "clock_settime": 227,
    "clock_adjtime": 305,
    "adjtimex": 159,
    "sethostname": 170,
    "setdomainname": 171,
    "syslog": 103,
    "quotactl": 179,
    "iopl": 172,
    "ioperm": 173,
    "vhangup": 153,
    "personality": 135,
    "uselib": 134,
}
CLONE = 56
CLONE3 = 435
#: ``CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET``
#: (``CLONE_NEWTIME``, 0x80, is only a ``clone3``/``unshare`` flag: in ``clone``'s first argument that bit belongs to
#: the exit signal)
CLONE_NAMESPACE_FLAGS = 0x7E020000

EPERM, ENOSYS = 1, 38

# classic BPF (linux/filter.h, linux/seccomp.h)
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: A = the 32-bit word at offset k of struct seccomp_data
_JEQ_K, _JGE_K, _JSET_K = 0x15, 0x35, 0x45  # BPF_JMP | BPF_JEQ / BPF_JGE / BPF_JSET | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
RET_ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW
RET_ERRNO = 0x00050000  # SECCOMP_RET_ERRNO | errno
#: offsets in ``struct seccomp_data {int nr; u32 arch; u64 instruction_pointer; u64 args[6];}`` (little-endian: the
#: low 32 bits of args[0] sit at 16)
OFFSET_NR, OFFSET_ARCH, OFFSET_ARG0_LOW = 0, 4, 16


def _statement(code: int, k: int, jt: int = 0, jf: int = 0) -> tuple[int, int, int, int]:
    return (code, jt, jf, k)


def filter_instructions() -> list[tuple[int, int, int, int]]:
    """The filter as ``(code, jt, jf, k)`` classic-BPF instructions (jumps count instructions after the next one)."""
    denied = sorted(set(DENIED.values()))
    # layout: 0 load arch, 1 check arch, 2 load nr, 3 x32 check, then one JEQ per denied number, clone3, clone,
    # RET ALLOW, the clone argument check (load, JSET, RET ALLOW), RET EPERM, RET ENOSYS
    checks = len(denied)
    first_check = 4
    clone3_at = first_check + checks
    clone_at = clone3_at + 1
    allow_at = clone_at + 1
    clone_arg_at = allow_at + 1
    eperm_at = clone_arg_at + 3
    enosys_at = eperm_at + 1

    def jump(source: int, target: int) -> int:
        offset = target - source - 1
        assert 0 <= offset < 256, "classic BPF jumps reach at most 255 instructions"
        return offset

    program = [
        _statement(_LD_W_ABS, OFFSET_ARCH),
        _statement(_JEQ_K, AUDIT_ARCH_X86_64, jt=0, jf=jump(1, eperm_at)),
        _statement(_LD_W_ABS, OFFSET_NR),
        _statement(_JGE_K, X32_SYSCALL_BIT, jt=jump(3, eperm_at), jf=0),
    ]
    for index, number in enumerate(denied):
        at = first_check + index
        program.append(_statement(_JEQ_K, number, jt=jump(at, eperm_at), jf=0))
    program.append(_statement(_JEQ_K, CLONE3, jt=jump(clone3_at, enosys_at), jf=0))
    program.append(_statement(_JEQ_K, CLONE, jt=jump(clone_at, clone_arg_at), jf=0))
    program.append(_statement(_RET_K, RET_ALLOW))
    program.append(_statement(_LD_W_ABS, OFFSET_ARG0_LOW))
    program.append(_statement(_JSET_K, CLONE_NAMESPACE_FLAGS, jt=jump(clone_arg_at + 1, eperm_at), jf=0))
    program.append(_statement(_RET_K, RET_ALLOW))
    program.append(_statement(_RET_K, RET_ERRNO | EPERM))
    program.append(_statement(_RET_K, RET_ERRNO | ENOSYS))
    assert len(program) == enosys_at + 1
    return program


def filter_program(machine: str | None = None) -> bytes | None:
    """The filter as the bytes of a ``struct sock_filter`` array, for ``machine`` (default: this one's
    ``platform.machine()``); None on anything but x86_64, where these system-call numbers would be wrong."""
    machine = platform.machine() if machine is None else machine
    if machine not in ("x86_64", "AMD64", "amd64"):
        return None
    return b"".join(struct.pack("<HBBI", code, jt, jf, k) for code, jt, jf, k in filter_instructions())
