#!/usr/bin/python3
"""Test-only adversary, run inside a sandbox by the leftovers tests: swaps names with
renameat2(RENAME_EXCHANGE) in a tight loop while Sandy works on them from outside.

    swap.py pair STOP SECONDS DIR A B
        exchange DIR/A and DIR/B (a directory and a link, say) again and again
    swap.py prefix STOP SECONDS DIR PREFIX OWN LINK TARGET
        make DIR/LINK -> TARGET, then exchange it with every entry of DIR whose name
        starts with PREFIX (but OWN and LINK), 50 times each, again and again

Each mode writes STOP.ready once it runs, and stops when STOP exists or SECONDS pass;
it prints how many exchanges succeeded.
"""

import ctypes
import os
import sys
import time

LIBC = ctypes.CDLL(None, use_errno=True)
NR_RENAMEAT2 = {"x86_64": 316, "aarch64": 276}[os.uname().machine]
AT_FDCWD = -100
RENAME_EXCHANGE = 2


def exchange(a, b):
    return LIBC.syscall(
        NR_RENAMEAT2, AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE
    ) == 0


def main():
    mode, stop, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    deadline = time.time() + seconds
    done = 0
    with open(stop + ".ready", "w"):
        pass
    running = lambda: time.time() < deadline and not os.path.exists(stop)
    if mode == "pair":
        d, a, b = sys.argv[4:7]
        a, b = os.path.join(d, a), os.path.join(d, b)
        while running():
            done += exchange(a, b)
    elif mode == "prefix":
        d, prefix, own, link, target = sys.argv[4:9]
        lp = os.path.join(d, link)
        try:
            os.symlink(target, lp)
        except FileExistsError:
            pass
        while running():
            for name in os.listdir(d):
                if name.startswith(prefix) and name not in (own, link):
                    for _ in range(50):
                        done += exchange(os.path.join(d, name), lp)
    print("exchanges", done, flush=True)


main()
