#!/usr/bin/env python3
"""Derives Sandy's container seccomp profile from Docker's default one.

    packaging/containers/derive-seccomp.py DOCKER_DEFAULT.json > packaging/containers/sandy-seccomp.json

DOCKER_DEFAULT.json is moby's profiles/seccomp/default.json (Debian ships it in
golang-github-docker-docker-dev, under /usr/share/gocode/src/github.com/docker/docker/).
The output is that profile unchanged, plus the rules below, which allow a process
without CAP_SYS_ADMIN or CAP_SYS_PTRACE exactly the system calls Sandy makes that the
default refuses it (found by tracing `sandy doctor`, `sandy doctor --selftest` and runs
with a package cache, --explain and connects on the host's network, and checked against
Sandy's code; docs/containers.md says what each is for). Everything else
stays as Docker has it: `clone` with namespace flags, `clone3`, `setns`, `pivot_root`,
`umount2`, `chroot`, `bpf`, `keyctl`, `process_vm_writev`, `ptrace` of other programs'
memory, ... Podman's own default (containers-common) already allows all of these; the
profile works there too.
"""
import json
import sys

# unshare(2) flags Sandy uses: CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
# CLONE_NEWNET. The rule allows unshare when no other bit of the lower 32 is set (the
# kernel refuses unknown upper bits with EINVAL): no CLONE_NEWUTS, CLONE_NEWCGROUP,
# CLONE_NEWTIME, CLONE_FS, CLONE_FILES, CLONE_SYSVSEM.
SANDY_UNSHARE = 0x00020000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
OTHER_FLAGS = 0xFFFFFFFF & ~SANDY_UNSHARE
KCMP_FILES = 2

RULES = [
    {
        "comment": "Sandy: new user, mount, IPC, PID and network namespaces, nothing else",
        "names": ["unshare"],
        "action": "SCMP_ACT_ALLOW",
        "args": [{"index": 0, "value": OTHER_FLAGS, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
    },
    {
        "comment": "Sandy: the sandbox's mounts, made inside its own user namespace "
        "(the kernel refuses them to a process without CAP_SYS_ADMIN there)",
        "names": [
            "fsconfig",
            "fsmount",
            "fsopen",
            "mount",
            "mount_setattr",
            "move_mount",
            "open_tree",
        ],
        "action": "SCMP_ACT_ALLOW",
    },
    {
        "comment": "Sandy's supervisor: the socket of a brokered connect (pidfd_getfd) "
        "and the path of a refused write (process_vm_readv), from its own sandboxed "
        "processes (the kernel's ptrace access check applies)",
        "names": ["pidfd_getfd", "process_vm_readv"],
        "action": "SCMP_ACT_ALLOW",
    },
    {
        "comment": "Sandy's supervisor: whether two threads share a descriptor table "
        "(KCMP_FILES only)",
        "names": ["kcmp"],
        "action": "SCMP_ACT_ALLOW",
        "args": [{"index": 2, "value": KCMP_FILES, "valueTwo": 0, "op": "SCMP_CMP_EQ"}],
    },
]


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        profile = json.load(f)
    if profile.get("defaultAction") != "SCMP_ACT_ERRNO" or "syscalls" not in profile:
        print("derive-seccomp: not a default-deny seccomp profile", file=sys.stderr)
        return 1
    profile["syscalls"].extend(RULES)
    json.dump(profile, sys.stdout, indent="\t")
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
