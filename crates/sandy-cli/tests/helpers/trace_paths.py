#!/usr/bin/python3
"""Test-only reducer of strace logs to the paths a program used below given roots, for
the agent state observation test (agent_state_observed.rs). Runs on the host, outside
Sandy.

    trace_paths.py [--root LABEL=PATH]... [--project PATH] [--text]
                   SCENARIO=LOG [SCENARIO=LOG]...

Each LOG is the output of `strace -f -y -qq -o LOG -e trace=...` (the file system calls:
open, openat, openat2, creat, mkdir(at), rename(at, at2), unlink(at), rmdir,
symlink(at), link(at), truncate, chmod, fchmod(at), utimensat, the stat family, access,
faccessat(2), readlink(at), getdents64, inotify_add_watch; chdir, fchdir and the clone
family too, so that names relative to the working directory resolve). Every path a call
names is made absolute (a `*at` call's directory descriptor is decoded by `-y`; a plain
call's relative name is taken from the process's working directory, followed across
clone and chdir) and normalised lexically (`.` and `..`).

Each path is one of:

    written   opened with O_WRONLY, O_RDWR, O_CREAT or O_TRUNC; created (mkdir, creat,
              symlink, link); renamed from or to; removed (unlink, rmdir); truncated;
              its mode or times changed
    read      opened read-only; listed (getdents64); watched (inotify); readlink
    probed    stat, access, or a call that failed because the name is not there
              (ENOENT, ENOTDIR, ELOOP; mkdir of a directory that exists): a name the
              program looks at and would use if it existed

A path keeps the strongest kind any call gave it (written > read > probed), per
scenario and overall. Only paths below a root are kept (the root with the longest path
wins), reported relative to it ("." for the root itself). Per-session names are
collapsed into `*` so that the output is stable across runs: a whole component that is
a number; UUIDs; ISO dates and times; runs of 8 or more letters and digits that have a
digit (hex hashes, base62 ids); numbers of 4 or more digits; the project path as Claude
Code encodes it (every character but letters and digits as `-`) and, below a root, a
component that is the project directory's own name. Adjacent `*`s separated by `-`, `_`,
`.` or `:` merge into one.

Prints JSON: {"paths": [{"root", "path", "kind", "scenarios": {KIND: [SCENARIO...]},
"calls": [SYSCALL...], "raw": {PATH: KIND}}...], "warnings": [...]}, sorted by root and
path ("raw": the paths as they were, before collapsing, each with its kind); with --text,
lines `KIND  ROOT/PATH  (SCENARIO, ...)` grouped by kind instead (the scenarios are those
where the path had its strongest kind).
"""

import json
import os
import posixpath
import re
import sys

def random_six(m):
    t = m.group(0)
    classes = sum(bool(re.search(p, t)) for p in ("[a-z]", "[A-Z]", "[0-9]"))
    if classes < 2 or re.fullmatch(r"[A-Z][a-z]+|[a-z]+[0-9]+|[0-9]+[a-z]+", t):
        return t
    return "*"


RANK = {"probed": 0, "read": 1, "written": 2}

LINE = re.compile(r"^(\d+)\s+(.*)$")
CALL = re.compile(r"^([a-z0-9_]+)\((.*)$")
RESUMED = re.compile(r"^<\.\.\. ([a-z0-9_]+) resumed>(.*)$")
# The result at the end of a complete call: ") = RET" plus an optional decoration or
# errno. Arguments never end in ") = " followed by this, so the last match splits.
RESULT = re.compile(r"\)\s+=\s+(-?\d+|\?|0x[0-9a-f]+)(<[^\n]*>)?(?:\s+([A-Z][A-Z0-9_]*)\s*(\(.*\))?)?\s*$")

WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC")
MISSING = ("ENOENT", "ENOTDIR", "ELOOP")


def unescape(s):
    """Decodes a strace string literal's body (C escapes, octal and hex) to text."""
    out = bytearray()
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\":
            out += c.encode("utf-8", "surrogateescape")
            i += 1
            continue
        i += 1
        if i >= len(s):
            break
        c = s[i]
        simple = {"n": 10, "t": 9, "r": 13, "v": 11, "f": 12, "\\": 92, '"': 34, "'": 39}
        if c in simple:
            out.append(simple[c])
            i += 1
        elif c == "x":
            out.append(int(s[i + 1 : i + 3], 16))
            i += 3
        elif c in "01234567":
            j = i
            while j < len(s) and j < i + 3 and s[j] in "01234567":
                j += 1
            out.append(int(s[i:j], 8) & 0xFF)
            i = j
        else:
            out += c.encode()
            i += 1
    return out.decode("utf-8", "surrogateescape")


def split_args(text):
    """Splits a call's argument text at top-level commas (outside strings, braces,
    brackets and `<...>` descriptor decorations)."""
    args = []
    depth = 0
    cur = []
    i = 0
    in_str = False
    in_deco = False
    while i < len(text):
        c = text[i]
        if in_str:
            cur.append(c)
            if c == "\\" and i + 1 < len(text):
                cur.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_str = False
        elif in_deco:
            cur.append(c)
            if c == "\\" and i + 1 < len(text):
                cur.append(text[i + 1])
                i += 2
                continue
            if c == ">":
                in_deco = False
        elif c == '"':
            in_str = True
            cur.append(c)
        elif c == "<" and cur and re.match(r"^\s*(\d+|AT_FDCWD)$", "".join(cur)):
            in_deco = True
            cur.append(c)
        elif c in "{[(":
            depth += 1
            cur.append(c)
        elif c in "}])":
            depth -= 1
            cur.append(c)
        elif c == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    if cur or args:
        args.append("".join(cur).strip())
    return args


def string_arg(a):
    """The text of a string argument, or None (NULL, a pointer, a truncated string)."""
    m = re.match(r'^"((?:[^"\\]|\\.)*)"(\.\.\.)?$', a)
    if not m or m.group(2):
        return None
    return unescape(m.group(1))


def fd_path(a):
    """The path a `-y` decorated descriptor (or AT_FDCWD) stands for, or None."""
    m = re.match(r"^(?:\d+|AT_FDCWD)<(.*)>$", a)
    if not m:
        return None
    p = unescape(m.group(1))
    if p.endswith(" (deleted)"):
        p = p[: -len(" (deleted)")]
    return p if p.startswith("/") else None


class Reducer:
    def __init__(self, roots, project):
        # Longest root first, so that the most specific one wins.
        self.roots = sorted(roots, key=lambda r: -len(r[1]))
        self.project = project
        self.encoded = re.sub(r"[^A-Za-z0-9]", "-", project) if project else None
        self.project_name = posixpath.basename(project) if project else None
        self.found = {}  # (label, rel) -> {"kind", "scenarios": {kind: set}, "calls": set}
        self.warnings = []

    # -- collapsing ------------------------------------------------------------------

    def collapse(self, component, below_root):
        if self.encoded and self.encoded in component:
            component = component.replace(self.encoded, "*")
        if below_root and self.project_name and component == self.project_name:
            return "*"
        if re.fullmatch(r"\d+", component):
            return "*"
        # A number with an extension (`sessions/PID.json`).
        component = re.sub(r"^\d+(?=\.[A-Za-z]+$)", "*", component)
        # Temporary names: Rust's tempfile (`.tmpXXXXXX`), Python's mkstemp (`tmpXXXXXXXX`).
        if re.fullmatch(r"\.tmp[A-Za-z0-9]{6}|tmp[a-z0-9_]{8}", component):
            return component[: component.index("tmp") + 3] + "*"
        c = re.sub(
            r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
            "*",
            component,
        )
        c = re.sub(
            r"\d{4}-\d{2}-\d{2}(?:[T_ ]\d{2}[-:_]\d{2}(?:[-:_]\d{2}(?:[._]\d+)?)?Z?)?(?![A-Za-z0-9])",
            "*",
            c,
        )
        c = re.sub(
            r"(?<![A-Za-z0-9])(?=[A-Za-z0-9]*\d)[A-Za-z0-9]{8,}(?![A-Za-z0-9])", "*", c
        )
        # Ids that run into a word on one side (`ses_` prefixes are split off by `_`).
        c = re.sub(r"(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{12,}", "*", c)
        c = re.sub(r"\d{4,}", "*", c)
        # A temporary file's random suffix: six letters and digits at the end of the name
        # (before a short extension) that mix cases or letters and digits.
        c = re.sub(r"[A-Za-z0-9]{6}(?=(?:\.[a-z]{1,5})?$)", random_six, c)
        # A short random part right after a collapsed one (`snapshot-bash-*-afrgc8.sh`).
        c = re.sub(r"\*[-_][A-Za-z0-9]{4,8}(?=(?:\.[A-Za-z0-9]{1,5})?$)", "*", c)
        # Small numbers beside a collapsed part (pids: `model.json.291.*.tmp`).
        c = re.sub(r"(?<![A-Za-z0-9])\d+[-_.:](?=\*)", "", c)
        c = re.sub(r"(?<=\*)[-_.:]\d+(?![A-Za-z0-9])", "", c)
        c = re.sub(r"\*(?:[-_.:]?\*)+", "*", c)
        return c

    def place(self, path):
        """(label, relative path collapsed, relative path as it is) for a path below a
        root, or None."""
        for label, root in self.roots:
            if path == root:
                return label, ".", "."
            if path.startswith(root.rstrip("/") + "/"):
                rel = path[len(root.rstrip("/")) + 1 :]
                parts = [p for p in rel.split("/") if p]
                if ".git" in parts:
                    parts = parts[: parts.index(".git") + 1]
                raw = "/".join(parts) or "."
                parts = [self.collapse(p, True) for p in parts]
                return label, "/".join(parts) or ".", raw
        return None

    def note(self, path, kind, scenario, call):
        if path is None:
            return
        path = posixpath.normpath(path)
        if path.startswith("//"):
            path = "/" + path.lstrip("/")
        placed = self.place(path)
        if placed is None:
            return
        label, rel, raw = placed
        entry = self.found.setdefault(
            (label, rel), {"kind": kind, "scenarios": {}, "calls": set(), "raw": {}}
        )
        if RANK[kind] > RANK[entry["kind"]]:
            entry["kind"] = kind
        entry["scenarios"].setdefault(kind, set()).add(scenario)
        entry["calls"].add(call)
        if RANK[kind] >= RANK[entry["raw"].get(raw, "probed")]:
            entry["raw"][raw] = kind

    # -- one log ---------------------------------------------------------------------

    def reduce_log(self, scenario, log):
        cwd = {}
        pending = {}
        with open(log, errors="surrogateescape") as f:
            for raw in f:
                m = LINE.match(raw.rstrip("\n"))
                if not m:
                    continue
                pid, rest = m.group(1), m.group(2)
                if rest.endswith("<unfinished ...>"):
                    pending[pid] = rest[: -len("<unfinished ...>")].rstrip()
                    continue
                r = RESUMED.match(rest)
                if r:
                    start = pending.pop(pid, None)
                    if start is None:
                        continue
                    rest = start + r.group(2)
                c = CALL.match(rest)
                if not c:
                    continue
                name, tail = c.group(1), c.group(2)
                res = None
                for res in RESULT.finditer(tail):
                    pass
                if res is None:
                    continue
                args = split_args(tail[: res.start()])
                ret, deco, err = res.group(1), res.group(2), res.group(3)
                ok = ret not in ("?",) and not ret.startswith("-")
                self.call(scenario, pid, name, args, ok, ret, deco, err, cwd)

    def resolve(self, base, name):
        if name is None:
            return None
        if name.startswith("/"):
            return name
        if base is None:
            return None
        return posixpath.join(base, name) if name else base

    def call(self, scenario, pid, name, args, ok, ret, deco, err, cwd):
        def at(i):
            """The directory a `*at` call's argument i stands for (and tracks the cwd)."""
            a = args[i] if i < len(args) else ""
            p = fd_path(a)
            if a.startswith("AT_FDCWD") and p:
                cwd[pid] = p
            return p

        def plain(i):
            """A plain call's path argument i, made absolute."""
            return self.resolve(cwd.get(pid), string_arg(args[i]) if i < len(args) else None)

        def named(d, i):
            return self.resolve(d, string_arg(args[i]) if i < len(args) else None)

        def writing(missing_ok=MISSING):
            """A change: written, unless it failed only because of what is (not) there."""
            return "probed" if not ok and err in missing_ok else "written"

        def n(path, kind):
            self.note(path, kind, scenario, name)

        if name in ("clone", "clone3", "fork", "vfork"):
            if ok and ret.isdigit() and pid in cwd:
                cwd.setdefault(ret, cwd[pid])
            return
        if name == "chdir":
            if ok:
                p = plain(0)
                if p:
                    cwd[pid] = posixpath.normpath(p)
            return
        if name == "fchdir":
            p = fd_path(args[0]) if args else None
            if ok and p:
                cwd[pid] = p
            return
        if name == "io_uring_setup":
            if ok:
                self.warnings.append(
                    f"{scenario}: pid {pid} set up io_uring; file operations through it are not traced"
                )
            return

        if name in ("open", "openat", "openat2", "creat"):
            if name == "open":
                path, flags = plain(0), args[1] if len(args) > 1 else ""
            elif name == "creat":
                path, flags = plain(0), "O_WRONLY|O_CREAT|O_TRUNC"
            else:
                path, flags = named(at(0), 1), args[2] if len(args) > 2 else ""
            if "O_PATH" in flags:
                kind = "probed"
            elif any(f in flags for f in WRITE_FLAGS):
                kind = "written"
            else:
                kind = "read"
            if not ok and (err in MISSING or (err == "EEXIST" and kind != "written")):
                kind = "probed"
            n(path, kind)
            if ok and deco:
                resolved = fd_path("0" + deco)
                if resolved and resolved != path:
                    n(resolved, kind)
            return
        if name in ("mkdir", "mkdirat"):
            path = plain(0) if name == "mkdir" else named(at(0), 1)
            n(path, writing(missing_ok=MISSING + ("EEXIST",)))
            return
        if name in ("rename", "renameat", "renameat2"):
            if name == "rename":
                old, new = plain(0), plain(1)
            else:
                old, new = named(at(0), 1), named(at(2), 3)
            k = writing(missing_ok=MISSING + ("EEXIST", "ENOTEMPTY"))
            n(old, k)
            n(new, k)
            return
        if name in ("unlink", "unlinkat", "rmdir"):
            path = named(at(0), 1) if name == "unlinkat" else plain(0)
            n(path, writing(missing_ok=MISSING + ("ENOTEMPTY", "EEXIST")))
            return
        if name in ("symlink", "symlinkat"):
            path = plain(1) if name == "symlink" else named(at(1), 2)
            n(path, writing(missing_ok=MISSING + ("EEXIST",)))
            return
        if name in ("link", "linkat"):
            if name == "link":
                old, new = plain(0), plain(1)
            else:
                old, new = named(at(0), 1), named(at(2), 3)
            n(old, "read" if ok else "probed")
            n(new, writing(missing_ok=MISSING + ("EEXIST",)))
            return
        if name in ("truncate", "chmod"):
            n(plain(0), writing())
            return
        if name in ("fchmodat", "fchmodat2"):
            n(named(at(0), 1), writing())
            return
        if name in ("fchmod", "ftruncate"):
            n(fd_path(args[0]) if args else None, writing())
            return
        if name == "utimensat":
            d = at(0)
            s = string_arg(args[1]) if len(args) > 1 else None
            n(d if s is None else self.resolve(d, s), writing())
            return
        if name in ("newfstatat", "statx", "fstatat64"):
            d = at(0)
            s = string_arg(args[1]) if len(args) > 1 else None
            if s == "":
                return  # fstat of an open descriptor: its open was recorded
            n(self.resolve(d, s), "probed")
            return
        if name in ("stat", "lstat", "access"):
            n(plain(0), "probed")
            return
        if name in ("faccessat", "faccessat2"):
            n(named(at(0), 1), "probed")
            return
        if name in ("readlink", "readlinkat"):
            path = plain(0) if name == "readlink" else named(at(0), 1)
            n(path, "read" if ok else "probed")
            return
        if name == "getdents64":
            n(fd_path(args[0]) if args else None, "read")
            return
        if name == "inotify_add_watch":
            n(plain(1), "read" if ok else "probed")
            return

    # -- output ----------------------------------------------------------------------

    def result(self):
        paths = []
        for (label, rel), e in sorted(self.found.items()):
            paths.append(
                {
                    "root": label,
                    "path": rel,
                    "kind": e["kind"],
                    "scenarios": {k: sorted(v) for k, v in sorted(e["scenarios"].items())},
                    "calls": sorted(e["calls"]),
                    "raw": dict(sorted(e["raw"].items())),
                }
            )
        return {"paths": paths, "warnings": self.warnings}


def text(result, order):
    lines = []
    for kind in ("written", "read", "probed"):
        for p in result["paths"]:
            if p["kind"] != kind:
                continue
            scen = sorted(p["scenarios"][kind], key=lambda s: order.index(s) if s in order else 99)
            where = p["root"] if p["path"] == "." else f"{p['root']}/{p['path']}"
            lines.append(f"{kind:<8} {where}  ({', '.join(scen)})")
    for w in result["warnings"]:
        lines.append(f"warning: {w}")
    return "\n".join(lines) + "\n"


def main(argv):
    roots = []
    project = None
    as_text = False
    logs = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--root":
            label, _, path = argv[i + 1].partition("=")
            roots.append((label, posixpath.normpath(path)))
            i += 2
        elif a == "--project":
            project = posixpath.normpath(argv[i + 1])
            i += 2
        elif a == "--text":
            as_text = True
            i += 1
        else:
            scenario, _, log = a.rpartition("=")
            logs.append((scenario or log, log))
            i += 1
    if not roots or not logs:
        sys.stderr.write(__doc__)
        return 2
    r = Reducer(roots, project)
    for scenario, log in logs:
        if os.path.exists(log):
            r.reduce_log(scenario, log)
        else:
            r.warnings.append(f"{scenario}: no trace at {log}")
    out = r.result()
    if as_text:
        sys.stdout.write(text(out, [s for s, _ in logs]))
    else:
        json.dump(out, sys.stdout, indent=1)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
