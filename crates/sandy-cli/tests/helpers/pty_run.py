#!/usr/bin/python3
"""Runs a command on a fresh pseudo-terminal, as a new session whose controlling terminal
is that pty, for Sandy's end-to-end tests.

    pty_run.py [--timeout SECONDS] [--send-after MARKER BYTES]... -- COMMAND [ARGS...]

Everything the command writes to the terminal is copied to stdout. Each --send-after pair
writes BYTES (Python backslash escapes allowed, e.g. '\\x03' for Ctrl-C) to the master once
MARKER has appeared in the output (pairs fire in order, each once). Exits with the
command's exit status (128+N if it was killed by signal N). If the command has not exited
after --timeout seconds (default 20), its whole session is killed, a line starting with
'pty_run: timeout' goes to stderr, and the exit status is 124. Before exiting, pty_run
prints 'pty_run: exit-after-send SECONDS' to stderr when something was sent: the time
from the last send to the command's exit.
"""

import errno
import fcntl
import os
import select
import signal
import sys
import termios
import time


def usage(msg):
    sys.stderr.write(f"pty_run: {msg}\n")
    sys.exit(2)


def parse(argv):
    timeout = 20.0
    sends = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            i += 1
            break
        if a == "--timeout":
            if i + 1 >= len(argv):
                usage("--timeout needs a value")
            timeout = float(argv[i + 1])
            i += 2
        elif a == "--send-after":
            if i + 2 >= len(argv):
                usage("--send-after needs MARKER and BYTES")
            marker = argv[i + 1].encode()
            data = argv[i + 2].encode("latin-1").decode("unicode_escape").encode("latin-1")
            sends.append((marker, data))
            i += 3
        else:
            usage(f"unknown option {a!r}")
    command = argv[i:]
    if not command:
        usage("no command given")
    return timeout, sends, command


def status_code(status):
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return 1


def kill_session(pid):
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except OSError:
            pass


def main():
    timeout, sends, command = parse(sys.argv[1:])
    master, slave = os.openpty()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(master)
            os.setsid()
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
            for fd in (0, 1, 2):
                os.dup2(slave, fd)
            if slave > 2:
                os.close(slave)
            # Python ignores SIGPIPE and exec keeps ignored signals: give the command the
            # defaults a shell would.
            for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGQUIT):
                signal.signal(sig, signal.SIG_DFL)
            os.execvp(command[0], command)
        except BaseException as e:  # noqa: BLE001 - report anything and never return
            try:
                os.write(2, f"pty_run: cannot start {command[0]}: {e}\n".encode())
            finally:
                os._exit(127)

    os.close(slave)
    out = sys.stdout.buffer
    seen = b""
    deadline = time.monotonic() + timeout
    status = None
    exited_at = None
    last_send = None
    master_open = True

    while True:
        now = time.monotonic()
        if status is None:
            wpid, st = os.waitpid(pid, os.WNOHANG)
            if wpid == pid:
                status = st
                exited_at = now
        if status is not None:
            # Drain what is left, briefly: processes that outlive the command may keep
            # the terminal open.
            if not master_open or now - exited_at > 0.5:
                break
        if now > deadline:
            kill_session(pid)
            if status is None:
                _, status = os.waitpid(pid, 0)
            sys.stderr.write(f"pty_run: timeout after {timeout} s; killed the session\n")
            os.close(master)
            sys.exit(124)
        if not master_open:
            time.sleep(0.02)
            continue
        ready, _, _ = select.select([master], [], [], 0.05)
        if not ready:
            continue
        try:
            chunk = os.read(master, 4096)
        except OSError as e:
            if e.errno != errno.EIO:
                raise
            chunk = b""
        if not chunk:
            # EIO: every slave descriptor is closed.
            master_open = False
            continue
        out.write(chunk)
        out.flush()
        seen += chunk
        while sends and sends[0][0] in seen:
            marker, data = sends.pop(0)
            # Later markers must appear after this point.
            seen = seen[seen.index(marker) + len(marker):]
            # A marker is printed just before the program starts reading (a shell's
            # prompt, before readline sets the terminal up): give it that moment, so a
            # loaded machine does not lose the first typed byte.
            time.sleep(0.05)
            os.write(master, data)
            last_send = time.monotonic()

    if master_open:
        os.close(master)
    if last_send is not None:
        sys.stderr.write(f"pty_run: exit-after-send {exited_at - last_send:.3f}\n")
    if sends:
        sys.stderr.write(
            "pty_run: markers never seen: "
            + ", ".join(repr(m.decode(errors="replace")) for m, _ in sends)
            + "\n"
        )
    sys.exit(status_code(status))


if __name__ == "__main__":
    main()
