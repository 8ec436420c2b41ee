#!/usr/bin/python3
"""Test-only launcher: makes the given x86_64 syscall numbers fail with ENOSYS, then execs
a command. Used to prove that Sandy fails closed when a layer it needs is unavailable.

    deny_syscalls.py NR[,NR...] -- COMMAND [ARGS...]

Installs a seccomp filter (after PR_SET_NO_NEW_PRIVS) that answers ENOSYS to the listed
syscall numbers on AUDIT_ARCH_X86_64 and allows everything else (including any other
architecture). Refuses to run (exit 2) on a machine that is not x86_64, so a test can
never mistake an inert filter for a proof.
"""

import ctypes
import errno
import os
import platform
import signal
import struct
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
AUDIT_ARCH_X86_64 = 0xC000003E

# Classic BPF opcodes.
BPF_LD_W_ABS = 0x20
BPF_JMP_JEQ_K = 0x15
BPF_RET_K = 0x06

# struct seccomp_data: int nr; __u32 arch; ...
OFFSET_NR = 0
OFFSET_ARCH = 4


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def insn(code, jt, jf, k):
    return struct.pack("=HBBI", code, jt, jf, k)


def program(numbers):
    out = [
        insn(BPF_LD_W_ABS, 0, 0, OFFSET_ARCH),
        # Not x86_64: allow.
        insn(BPF_JMP_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        insn(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        insn(BPF_LD_W_ABS, 0, 0, OFFSET_NR),
    ]
    for nr in numbers:
        out.append(insn(BPF_JMP_JEQ_K, 0, 1, nr))
        out.append(insn(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS))
    out.append(insn(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    return out


def fail(msg, code=2):
    sys.stderr.write(f"deny_syscalls: {msg}\n")
    sys.exit(code)


def main():
    args = sys.argv[1:]
    if len(args) < 3 or args[1] != "--":
        fail("usage: deny_syscalls.py NR[,NR...] -- COMMAND [ARGS...]")
    if platform.machine() != "x86_64":
        fail(f"x86_64 only (this is {platform.machine()})")
    try:
        numbers = [int(n, 0) for n in args[0].split(",") if n]
    except ValueError:
        fail(f"bad syscall list {args[0]!r}")
    command = args[2:]

    insns = program(numbers)
    buf = ctypes.create_string_buffer(b"".join(insns))
    prog = SockFprog(len(insns), ctypes.cast(buf, ctypes.c_void_p))

    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    if prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        fail(f"PR_SET_NO_NEW_PRIVS: {os.strerror(ctypes.get_errno())}")
    if prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) != 0:
        fail(f"PR_SET_SECCOMP: {os.strerror(ctypes.get_errno())}")

    # Python ignores SIGPIPE and exec keeps ignored signals.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        os.execvp(command[0], command)
    except OSError as e:
        fail(f"cannot execute {command[0]}: {e}", 127)


if __name__ == "__main__":
    main()
