#!/usr/bin/env python3
"""Where `sandy run -- true` spends its start-up, phase by phase (optional; needs `perf`).

Usage (as root, from the repository root, after `cargo build --release`):

    python3 bench/phases.py [SANDY_BINARY] [RUNS]

Traces a few marker syscalls with `perf trace` (Debian package `linux-perf`), in a
throw-away project directory, and prints the median time between consecutive markers
as a markdown table. Tracing slows every traced syscall a little, so the phases add up
to more than the untraced start-up that `cargo run --release -p sandy-bench` reports;
compare phases with each other, not with that figure.
"""

import os
import re
import statistics
import subprocess
import sys
import tempfile

EVENTS = ",".join([
    "execve", "clone3", "mkdir", "memfd_create", "landlock_create_ruleset",
    "landlock_restrict_self", "seccomp", "close_range", "exit_group", "unlinkat",
    "rt_sigtimedwait", "capset", "fcntl", "unshare", "mount", "chdir",
])

LINE = re.compile(r"\s*([\d.]+|\?) \(\s*([\d.]*)\s*(?:ms)?\): (\S+)/(\d+) (.*)")

# Markers in launch order, each naming the phase that runs from it to the next marker
# seen. Markers a version of Sandy does not produce (no namespaces, say) are skipped.
MARKERS = [
    ("sandy_exec", "supervisor: execve, loader, start-up, host context"),
    ("mkdir", "supervisor: private directory, policy resolution"),
    ("sup_probe", "supervisor: kernel probe, manifest encode"),
    ("memfd", "supervisor: memfd, spawn until the bootstrap's execve"),
    ("boot_exec", "bootstrap: execve, loader, start-up"),
    ("boot_main", "bootstrap: read and validate the manifest"),
    ("boot_probe", "bootstrap: probe, plan (rules, seccomp compile), signals"),
    ("ns", "bootstrap: unshare namespaces, id maps"),
    ("mnt0", "bootstrap: mounts"),
    ("chdir", "bootstrap: chdir, no_new_privs"),
    ("caps_first", "bootstrap: drop capabilities"),
    ("ll_create", "bootstrap: Landlock (open paths, add rules, restrict)"),
    ("seccomp", "bootstrap: install the seccomp filter"),
    ("seccomp_end", "bootstrap: close_range, until the target's execve"),
    ("true_exec", "target: execve, loader, `true` runs"),
    ("true_exit", "target's exit (and namespace teardown) until the supervisor wakes"),
    ("wake", "supervisor: reap, remove private directories, exit"),
    ("sandy_exit", None),
]


def trace_once(sandy, project, out):
    subprocess.run(
        ["perf", "trace", "-e", EVENTS, "-o", out, "--", "sh", "-c", f"exec {sandy} run -- true"],
        check=True, cwd=project,
    )
    ev, execs, sup = {}, {}, None
    with open(out) as f:
        for line in f:
            m = LINE.match(line)
            if not m or m.group(1) == "?":
                continue
            ts, dur, comm, pid, rest = m.groups()
            ts, dur = float(ts), float(dur or 0.0)
            if "execve(" in rest and comm in ("sh", "sandy", "exe", "true"):
                execs.setdefault(pid, set()).add(ts)
            if comm == "sandy":
                if rest.startswith("mkdir("):
                    sup = pid
                    ev.setdefault("mkdir", ts)
                elif rest.startswith("landlock_create_ruleset(flags"):
                    ev.setdefault("sup_probe", ts)
                elif rest.startswith("memfd_create"):
                    ev.setdefault("memfd", ts)
                elif "continued]: rt_sigtimedwait" in rest:
                    ev.setdefault("wake", ts + dur)
                elif rest.startswith("exit_group"):
                    ev.setdefault("sandy_exit", ts)
            elif comm == "exe":
                if rest.startswith("unshare("):
                    ev.setdefault("ns", ts)
                elif rest.startswith("mount("):
                    ev.setdefault("mnt0", ts)
                elif rest.startswith("chdir("):
                    ev.setdefault("chdir", ts)
                elif "cmd: GETFD" in rest:
                    ev.setdefault("boot_main", ts)
                elif rest.startswith("landlock_create_ruleset(flags"):
                    ev.setdefault("boot_probe", ts)
                elif rest.startswith("capset"):
                    ev.setdefault("caps_first", ts)
                elif rest.startswith("landlock_create_ruleset(attr"):
                    ev.setdefault("ll_create", ts)
                elif "op: FILTER" in rest:
                    ev.setdefault("seccomp", ts)
                    ev["seccomp_end"] = ts + dur
            elif comm == "true" and rest.startswith("exit_group"):
                ev.setdefault("true_exit", ts)
    # The supervisor's own execve (it was `sh` until then), then the child's two: the
    # bootstrap's and the target's.
    if sup in execs:
        ev["sandy_exec"] = min(execs[sup])
    child = [p for p in execs if p != sup]
    if child:
        times = sorted(execs[child[-1]])
        if len(times) >= 2:
            ev["boot_exec"], ev["true_exec"] = times[0], times[1]
    return ev


def main():
    if len(sys.argv) > 1:
        sandy = sys.argv[1]
    else:
        host = subprocess.run(["rustc", "--print", "host-tuple"], check=True,
                              capture_output=True, text=True).stdout.strip()
        sandy = f"target/{host}/release/sandy"
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 41
    sandy = subprocess.run(["realpath", sandy], check=True, capture_output=True,
                           text=True).stdout.strip()
    rows = []
    # Not under /tmp: Sandy's private /tmp would have to be given the project's path.
    base = "/var/tmp" if os.path.isdir("/var/tmp") else None
    with tempfile.TemporaryDirectory(prefix="sandy-phases-", dir=base) as root:
        project = f"{root}/project"
        subprocess.run(["mkdir", project], check=True)
        for _ in range(3):  # warm-up
            subprocess.run([sandy, "run", "--", "true"], check=True, cwd=project)
        for _ in range(runs):
            rows.append(trace_once(sandy, project, f"{root}/trace.txt"))
    print(f"| phase (traced with `perf trace`, {runs} runs) | median ms | runs seen |")
    print("| --- | ---: | ---: |")
    names = [m for m, _ in MARKERS]
    for i, (marker, label) in enumerate(MARKERS[:-1]):
        spans = []
        for r in rows:
            if marker not in r:
                continue
            nxt = next((r[n] for n in names[i + 1:] if n in r), None)
            if nxt is not None:
                spans.append(nxt - r[marker])
        if spans:
            print(f"| {label} | {statistics.median(spans):.3f} | {len(spans)} |")
    total = [r["sandy_exit"] - r["sandy_exec"] for r in rows
             if "sandy_exit" in r and "sandy_exec" in r]
    if total:
        print(f"| total, traced (sum of medians differs) | {statistics.median(total):.3f} "
              f"| {len(total)} |")


if __name__ == "__main__":
    main()
