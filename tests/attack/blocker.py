#!/usr/bin/python3
"""Blocking clients for the wsfs attack suite: one process with N threads
that each start an operation that blocks (or may block) on the mount, so
the suite can check that the mount keeps answering everybody else, then
release or kill them.

  blocker.py fifo PATH N       open(PATH, O_RDONLY): waits for a writer
  blocker.py read PATH N       read PATH from the start, over and over
  blocker.py readmany PATH N   thread i reads the file PATH<i> once
  blocker.py ofdlock PATH N    F_OFD_SETLKW write lock on the whole file
  blocker.py flock PATH N      flock(LOCK_EX)

It prints "started N" once every thread has been started, "done K" when K
operations have completed, and exits when all threads finish or on
SIGTERM/SIGKILL (the suite kills it by pid).
"""
import fcntl
import os
import struct
import sys
import threading
import time


def read_through(p):
    """Read p to its end; an error ends the read, as the attack expects."""
    try:
        with open(p, "rb", buffering=0) as f:
            while f.read(1 << 16):
                pass
    except OSError:
        pass


def main():
    mode, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    duration = float(sys.argv[4]) if len(sys.argv) > 4 else 30.0
    done = []
    idx = []
    lock = threading.Lock()

    def finished():
        with lock:
            done.append(1)

    def fifo():
        try:
            fd = os.open(path, os.O_RDONLY)
            os.read(fd, 1)
            os.close(fd)
        except OSError:
            pass
        finished()

    def reader():
        end = time.monotonic() + duration
        while time.monotonic() < end:
            read_through(path)
        finished()

    def readmany():
        # thread i reads PATH<i> once, start to end
        with lock:
            i = len(idx)
            idx.append(1)
        read_through(f"{path}{i}")
        finished()

    def ofdlock():
        try:
            fd = os.open(path, os.O_RDWR)
            lk = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0)
            fcntl.fcntl(fd, fcntl.F_OFD_SETLKW, lk)
            os.close(fd)
        except OSError:
            pass
        finished()

    def flock():
        try:
            fd = os.open(path, os.O_RDWR)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.close(fd)
        except OSError:
            pass
        finished()

    fn = {"fifo": fifo, "read": reader, "readmany": readmany,
          "ofdlock": ofdlock, "flock": flock}[mode]
    threads = [threading.Thread(target=fn, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    print(f"started {n}", flush=True)
    for t in threads:
        t.join()
    print(f"done {len(done)}", flush=True)


if __name__ == "__main__":
    main()
