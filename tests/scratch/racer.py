#!/usr/bin/python3
"""Attack a workspace while the sweeper removes it.

Usage: racer.py BASE ID CANARY OUT

Loops until killed over the workspace BASE/ID and, once the sweeper has
moved it, its trash entry BASE/.wsfs-trash/ID.*: directories found there
are swapped for symlinks to the canary tree (absolute and relative), moved
up to the base's top level, or moved out of the base into OUT; files are
swapped for symlinks to a canary file. Prints "ready" once it has started.
Everything that fails (the sweeper won the race) is ignored.
"""
import os
import random
import sys


def roots(base, wid):
    yield os.path.join(base, wid)
    trash = os.path.join(base, ".wsfs-trash")
    try:
        for n in os.listdir(trash):
            if n.startswith(wid + "."):
                yield os.path.join(trash, n)
    except OSError:
        pass


def flip(path, target, times):
    """Flip the entry between the directory and a symlink into the canary:
    the sweeper's readdir may say "directory" just before it opens the
    name. Ends with the directory back in place."""
    hidden = path + ".real"
    for _ in range(times):
        os.rename(path, hidden)
        try:
            os.symlink(target, path)
            os.unlink(path)
        finally:
            os.rename(hidden, path)


moved = 0


def attack(path, canary, out, base, n):
    """One move against the directory entry `path`."""
    global moved
    if os.path.islink(path) or not os.path.isdir(path):
        if n % 4 == 0:
            os.unlink(path)
            os.symlink(os.path.join(canary, "top"), path)
        return
    move = n % 10
    # A few subtrees leave; most stay to be raced over.
    if move < 2 and moved >= 6:
        move = 3
    if move == 0:
        moved += 1
        os.rename(path, os.path.join(out, f"out{n}"))
    elif move == 1:
        moved += 1
        os.rename(path, os.path.join(base, f"up{n}"))
    elif move == 2:
        os.rename(path, path + f".gone{n}")
        os.symlink(canary, path)
    else:
        rel = os.path.relpath(canary, os.path.dirname(path))
        flip(path, canary if move % 2 else rel, 20)
        for inner in os.listdir(path)[:3]:
            p = os.path.join(path, inner)
            if os.path.isdir(p) and not os.path.islink(p):
                flip(p, canary, 5)


def main():
    base, wid, canary, out = sys.argv[1:5]
    print("ready", flush=True)
    n = 0
    while True:
        for root in roots(base, wid):
            try:
                names = os.listdir(root)
            except OSError:
                continue
            random.shuffle(names)
            for name in names:
                n += 1
                try:
                    attack(os.path.join(root, name), canary, out, base, n)
                except OSError:
                    pass


if __name__ == "__main__":
    main()
