#!/usr/bin/python3
"""Test-only launcher: makes this machine look, to one command, like Ubuntu 23.10 or later
with AppArmor's restriction of unprivileged user namespaces, then execs the command.

    simulate_ubuntu.py COMMAND [ARGS...]

1. In a mount namespace of its own (inside a user namespace of its own when not root),
   covers /proc/sys/kernel with a tmpfs holding a copy of every readable file there, plus
   apparmor_restrict_unprivileged_userns = 1, the setting Ubuntu turns on.
2. Installs a seccomp filter (after PR_SET_NO_NEW_PRIVS) that answers EPERM to mount,
   mount_setattr, open_tree, move_mount, fsopen, fsconfig, fsmount and fspick, as the
   restriction does: a new user namespace can still be made, but it carries no
   capabilities, so every mount in it is refused with EPERM.

x86_64 only (the syscall numbers); exits 2 on any other machine so that a test never
mistakes an inert filter for a proof.
"""

import ctypes
import errno
import os
import platform
import signal
import struct
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
AUDIT_ARCH_X86_64 = 0xC000003E
# mount, open_tree, move_mount, fsopen, fsconfig, fsmount, fspick, mount_setattr
MOUNT_CALLS = [165, 428, 429, 430, 431, 432, 433, 442]
KERNEL = "/proc/sys/kernel"

libc = ctypes.CDLL(None, use_errno=True)


def fail(msg, code=2):
    sys.stderr.write(f"simulate_ubuntu: {msg}\n")
    sys.exit(code)


def check(ret, what):
    if ret != 0:
        fail(f"{what}: {os.strerror(ctypes.get_errno())}")


def own_mount_namespace():
    uid, gid = os.getuid(), os.getgid()
    if uid == 0:
        check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    else:
        check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare(CLONE_NEWUSER|CLONE_NEWNS)")
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1\n"),
                           ("gid_map", f"{gid} {gid} 1\n")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "making / private")


def restricted_sysctls():
    saved = {}
    for name in os.listdir(KERNEL):
        path = os.path.join(KERNEL, name)
        if not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as f:
                saved[name] = f.read(65536)
        except OSError:
            pass
    check(libc.mount(b"tmpfs", KERNEL.encode(), b"tmpfs", 0, b"mode=0755"), "tmpfs on " + KERNEL)
    saved["apparmor_restrict_unprivileged_userns"] = b"1\n"
    for name, data in saved.items():
        with open(os.path.join(KERNEL, name), "wb") as f:
            f.write(data)


def insn(code, jt, jf, k):
    return struct.pack("=HBBI", code, jt, jf, k)


def deny_mounts():
    out = [insn(0x20, 0, 0, 4), insn(0x15, 1, 0, AUDIT_ARCH_X86_64),
           insn(0x06, 0, 0, SECCOMP_RET_ALLOW), insn(0x20, 0, 0, 0)]
    for nr in MOUNT_CALLS:
        out.append(insn(0x15, 0, 1, nr))
        out.append(insn(0x06, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM))
    out.append(insn(0x06, 0, 0, SECCOMP_RET_ALLOW))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(b"".join(out))
    prog = SockFprog(len(out), ctypes.cast(buf, ctypes.c_void_p))
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    check(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
    check(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0),
          "PR_SET_SECCOMP")


def main():
    command = sys.argv[1:]
    if not command:
        fail("usage: simulate_ubuntu.py COMMAND [ARGS...]")
    if platform.machine() != "x86_64":
        fail(f"x86_64 only (this is {platform.machine()})")
    own_mount_namespace()
    restricted_sysctls()
    deny_mounts()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        os.execvp(command[0], command)
    except OSError as e:
        fail(f"cannot execute {command[0]}: {e}", 127)


if __name__ == "__main__":
    main()
