"""What keeps a process sandbox's commands from the host: a seccomp filter (built here as a
classic BPF program, no libseccomp needed), ``no_new_privs`` and no supplementary groups for each
command before it enters the sandbox's namespaces, and the guest's owner for file operations the
service does on its behalf.

The filter refuses (``EPERM``) the calls a sandbox never needs and that reach past its
namespaces or into the kernel: mounts and the new mount API, ``unshare`` and namespace flags on
``clone``, ``kexec``, kernel modules, ``ptrace`` and cross-process memory, keyrings, ``bpf``,
``perf_event_open``, ``userfaultfd``, file handles, swap, reboot, clock setting, ``syslog``,
``acct``, quota and raw port I/O. ``clone3`` answers ``ENOSYS`` (its flags sit behind a pointer a
filter cannot read), so the C library falls back to ``clone``, whose flags it can. A foreign
system-call ABI (i386 or x32 on x86-64) is refused.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import struct
from collections.abc import Callable, Iterator

from services.sandbox.runtime.process.host import _libc_call

_DENY: dict[str, dict[str, int]] = {
    "x86_64": {
        "mount": 165, "umount2": 166, "pivot_root": 155, "swapon": 167, "swapoff": 168,
        "reboot": 169, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
        "finit_module": 313, "delete_module": 176, "ptrace": 101, "process_vm_readv": 310,
        "process_vm_writev": 311, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
        "perf_event_open": 298, "userfaultfd": 323, "open_by_handle_at": 304,
        "name_to_handle_at": 303, "acct": 163, "settimeofday": 164, "clock_settime": 227,
        "clock_adjtime": 305, "adjtimex": 159, "iopl": 172, "ioperm": 173, "quotactl": 179,
        "lookup_dcookie": 212, "syslog": 103, "unshare": 272, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428,
        "mount_setattr": 442, "uselib": 134, "vhangup": 153, "kcmp": 312, "fanotify_init": 300,
        "pidfd_getfd": 438, "quotactl_fd": 443, "_sysctl": 156,
    },
    "aarch64": {
        "mount": 40, "umount2": 39, "pivot_root": 41, "swapon": 224, "swapoff": 225,
        "reboot": 142, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
        "finit_module": 273, "delete_module": 106, "ptrace": 117, "process_vm_readv": 270,
        "process_vm_writev": 271, "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280,
        "perf_event_open": 241, "userfaultfd": 282, "open_by_handle_at": 265,
        "name_to_handle_at": 264, "acct": 89, "settimeofday": 170, "clock_settime": 112,
        "clock_adjtime": 266, "adjtimex": 171, "quotactl": 60, "lookup_dcookie": 18,
        "syslog": 116, "unshare": 97, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "move_mount": 429, "open_tree": 428, "mount_setattr": 442,
        "vhangup": 58, "kcmp": 272, "fanotify_init": 262, "pidfd_getfd": 438, "quotactl_fd": 443,
    },
}  # fmt: skip
"""Per machine: the system calls refused with ``EPERM``."""

_ARCH = {"x86_64": (0xC000003E, 56, 435), "aarch64": (0xC00000B7, 220, 435)}
"""Per machine: audit arch, ``clone`` and ``clone3`` numbers."""

CLONE_NEW_MASK = 0x7E020080
"""CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME."""

_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_EPERM, _ENOSYS = 1, 38


def seccomp_program(machine: str | None = None) -> bytes:
    """The filter as ``struct sock_filter[]`` bytes (what ``bwrap --seccomp`` and
    ``PR_SET_SECCOMP`` take); ``ValueError`` on a machine without a table here."""
    machine = machine or platform.machine()
    if machine not in _ARCH:
        raise ValueError(f"no seccomp table for machine {machine!r} (x86_64, aarch64)")
    arch, clone, clone3 = _ARCH[machine]
    # (code, jump-true label or offset, jump-false label or offset, k); labels resolve below
    ins: list[tuple[int, object, object, int]] = [
        (_LD_ABS, 0, 0, 4),  # seccomp_data.arch
        (_JEQ, 1, 0, arch),
        (_RET, 0, 0, _KILL),
        (_LD_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    if machine == "x86_64":
        ins.append((_JGE, "deny", 0, 0x40000000))  # the x32 ABI
    ins += [(_JEQ, "deny", 0, nr) for nr in sorted(set(_DENY[machine].values()))]
    ins += [
        (_JEQ, "enosys", 0, clone3),
        (_JEQ, 0, "allow", clone),
        (_LD_ABS, 0, 0, 16),  # low word of args[0]: clone's flags
        (_JSET, "deny", "allow", CLONE_NEW_MASK),
    ]
    labels = {"allow": len(ins), "deny": len(ins) + 1, "enosys": len(ins) + 2}
    ins += [(_RET, 0, 0, _ALLOW), (_RET, 0, 0, _ERRNO | _EPERM), (_RET, 0, 0, _ERRNO | _ENOSYS)]

    def rel(i: int, to: object) -> int:
        return labels[to] - i - 1 if isinstance(to, str) else int(to)  # type: ignore[call-overload]

    return b"".join(
        struct.pack("<HBBI", code, rel(i, jt), rel(i, jf), k)
        for i, (code, jt, jf, k) in enumerate(ins)
    )


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def child_confiner() -> Callable[[], None]:
    """A ``preexec_fn`` that drops supplementary groups, sets ``no_new_privs`` and loads the
    filter: everything built beforehand, so the forked child only makes system calls."""
    prog = seccomp_program()
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = _Fprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    prctl = _libc_call().prctl
    zero, one, two = ctypes.c_ulong(0), ctypes.c_ulong(1), ctypes.c_ulong(2)
    nnp, set_seccomp = ctypes.c_int(38), ctypes.c_int(22)  # PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP
    ptr = ctypes.c_void_p(ctypes.addressof(fprog))
    keep = (buf, fprog)

    def confine() -> None:
        os.setgroups([])
        if prctl(nnp, one, zero, zero, zero) != 0:
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")
        if prctl(set_seccomp, two, ptr, zero, zero) != 0:  # SECCOMP_MODE_FILTER
            raise OSError(ctypes.get_errno(), "seccomp filter refused")
        assert keep

    return confine


def program_fd() -> int:
    """A sealed-from-us memfd holding the filter, positioned at 0 (for ``bwrap --seccomp``)."""
    fd = os.memfd_create("k3s-seccomp", 0)
    os.write(fd, seccomp_program())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]  # fmt: skip


_CAP_V3 = 0x20080522
_CAP_DAC_READ_SEARCH = 2
_CAP_CALLS = {"x86_64": (125, 126), "aarch64": (90, 91)}
"""Per machine: ``capget`` and ``capset`` (per thread, unlike the C library's wrappers)."""


@contextlib.contextmanager
def as_guest_owner(uid: int, gid: int) -> Iterator[None]:
    """This thread's file operations as the guest's owner (``setfsuid``/``setfsgid`` are per
    thread): what it creates belongs to the sandbox's user and it writes only where that user
    may. ``CAP_DAC_READ_SEARCH`` stays effective so the service's own folders above the
    sandbox's root (often mode 0700) can still be walked."""
    libc = _libc_call()
    old_gid = libc.setfsgid(gid)  # each returns the previous id: nesting restores the outer one
    old_uid = libc.setfsuid(uid)  # the kernel drops the file-system capabilities from effective
    try:
        hdr = _CapHeader(_CAP_V3, 0)
        data = (_CapData * 2)()
        capget, capset = _CAP_CALLS.get(platform.machine(), (0, 0))
        if capget and libc.syscall(capget, ctypes.byref(hdr), data) == 0:
            data[0].effective |= 1 << _CAP_DAC_READ_SEARCH
            libc.syscall(capset, ctypes.byref(hdr), data)
        yield
    finally:
        libc.setfsuid(old_uid)  # back to 0: the kernel raises them again from the permitted set
        libc.setfsgid(old_gid)
