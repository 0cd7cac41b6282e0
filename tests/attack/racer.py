#!/usr/bin/python3
"""A racer for the wsfs attack suite: one small process that keeps changing
the shape of a directory tree while the attacks run.

It renames things back and forth as fast as it can, either through the
mount (as another user of this node would) or directly on the backing
directory (as an agent on another node, or the storage itself, would). It
only ever renames, exchanges, creates and removes the names it is given,
never touches anything else, and stops on SIGTERM, when its parent dies,
after --duration seconds or after --max rounds, whichever comes first. On
exit it prints "rounds=N errors=M" so the suite can tell it really raced.

Modes (every mode keeps each object at exactly one of its names at every
instant, so the suite can put the tree back together while racers are
paused):

  exchange A B      renameat2(A, B, RENAME_EXCHANGE): A and B trade places
                    atomically (the dir <-> symlink swap of CVE-2018-15664)
  swap4 D L T       D and L trade places with plain renames through the
                    temporary name T: D->T, L->D, D->L, T->D
  symswap D T LINK  dir -> symlink swap without exchange: D->T, then a new
                    symlink D -> LINK, then unlink D, T->D
  move A B          rename A to B and back (RENAME_NOREPLACE), e.g. a
                    directory moved to a shallower depth and back

usage: racer.py MODE ARG... [--duration S] [--max N]
"""
import ctypes
import ctypes.util
import errno
import os
import signal
import sys
import time

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                           ctypes.c_char_p, ctypes.c_uint]
AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
PR_SET_PDEATHSIG = 1

stop = False


def on_term(signo, frame):
    global stop
    stop = True


def renameat2(a, b, flags):
    if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, flags) < 0:
        return ctypes.get_errno()
    return 0


def rename(a, b):
    try:
        os.rename(a, b)
        return 0
    except OSError as e:
        return e.errno


def main(argv):
    duration = 3600.0
    maxrounds = 1 << 62
    args = []
    i = 0
    while i < len(argv):
        if argv[i] == "--duration":
            duration = float(argv[i + 1])
            i += 2
        elif argv[i] == "--max":
            maxrounds = int(argv[i + 1])
            i += 2
        else:
            args.append(argv[i])
            i += 1
    if not args:
        sys.exit(__doc__)
    mode, names = args[0], [os.fsencode(a) for a in args[1:]]
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    # Die with the suite even if it is killed before it can stop us.
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() == 1:
        return 0

    rounds = errors = 0
    deadline = time.monotonic() + duration
    if mode == "exchange":
        a, b = names

        def step():
            return renameat2(a, b, RENAME_EXCHANGE)
    elif mode == "swap4":
        d, l, t = names

        def step():
            return (rename(d, t) or rename(l, d) or rename(d, l)
                    or rename(t, d))
    elif mode == "symswap":
        d, t, link = names

        def step():
            e = rename(d, t)
            if e:
                return e
            try:
                os.symlink(link, d)
                os.unlink(d)
            except OSError as x:
                e = x.errno
            # Put the directory back whatever happened in between.
            for _ in range(1000):
                e2 = rename(t, d)
                if e2 in (0, errno.ENOENT):
                    break
                try:
                    os.unlink(d)
                except OSError:
                    pass
            return e
    elif mode == "move":
        a, b = names

        def step():
            return (renameat2(a, b, RENAME_NOREPLACE)
                    or renameat2(b, a, RENAME_NOREPLACE))
    else:
        sys.exit(f"racer: unknown mode {mode!r}")

    while not stop and rounds < maxrounds:
        if step():
            errors += 1
        rounds += 1
        if rounds == 4:
            # Tell the suite we are racing only once we really are.
            print("ready", flush=True)
        if (rounds & 255) == 0 and (time.monotonic() > deadline
                                    or os.getppid() == 1):
            break
    print(f"rounds={rounds} errors={errors}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
