#!/usr/bin/python3
"""What one node of a test cluster runs: writers, lock holders and lock
probes, started by the tests through 'scripts/cluster exec NODE' so that
each runs in its node's network namespace with its cwd at that node's
mount. Paths are relative to the mount (e.g. ws/log).

Every line printed starts with the CLOCK_MONOTONIC time in seconds (the
same clock in every namespace), so a test can order what the nodes did
against what it did itself (cut a link, kill a daemon).

  append PATH NODE [--count N | --duration S] [--fsync] [--keep-going]
         [--interval S] [--first SEQ]
      O_APPEND writes of one checksummed record each; prints "ok SEQ"
      (after fsync with --fsync) or "err SEQ ERRNAME" per record; SIGTERM
      stops it after the current record.
  pwrite PATH NODE COUNT
      take lockf on the whole file, pwrite a fixed-size record at the
      current end, unlock; COUNT times.
  counter PATH COUNT
      COUNT times under lockf: read the decimal number in the file, write
      it back plus one.
  sqlite DB NODE COUNT
      COUNT transactions of one INSERT each, rollback journal, busy
      timeout; prints "committed N".
  hold PATH flock|lockf|ofd START LEN [shared]
      take the lock (blocking), print "locked", hold it until stdin is
      closed or says anything, unlock, print "released".
  try PATH flock|lockf|ofd START LEN [shared]
      non-blocking attempt: prints "ok" (and unlocks) or "busy ERRNAME";
      exit status 0 or 1.
  getlk PATH START LEN [shared]
      F_GETLK for a write (or read) lock on the range; prints "unlck" or
      "TYPE START LEN PID".
  setlkw-intr PATH START LEN SECONDS
      F_SETLKW on the range, interrupted by SIGALRM after SECONDS; prints
      "result RC ERRNAME ELAPSED", then waits for stdin like hold (the
      descriptor stays open, so a lock wrongly left held stays visible),
      then exits.
"""
import ctypes
import errno
import fcntl
import os
import signal
import sqlite3
import sys
import time
import zlib

RECSIZE = 64


def say(*words):
    sys.stdout.write("%.6f %s\n" % (time.monotonic(),
                                     " ".join(str(w) for w in words)))
    sys.stdout.flush()


def record(node, seq):
    """One record: variable length, so that a torn or interleaved write
    cannot line up with a record boundary by chance."""
    n = (seq * 7919 + len(node) * 31) % 180
    fill = bytes(97 + (seq + i) % 26 for i in range(n))
    body = b"%s %d %d %s" % (node.encode(), seq, n, fill)
    return b"R %s %08x\n" % (body, zlib.crc32(body))


def fixed_record(node, seq):
    """A record of exactly RECSIZE bytes, for the pwrite writers."""
    body = b"%s %d" % (node.encode(), seq)
    rec = b"F %s %08x " % (body, zlib.crc32(body))
    return rec + b"." * (RECSIZE - len(rec) - 1) + b"\n"


def errname(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def cmd_append(args):
    path, node = args[0], args[1]
    count = duration = None
    do_fsync = keep_going = False
    interval = 0.0
    seq = 0
    rest = args[2:]
    while rest:
        a = rest.pop(0)
        if a == "--count":
            count = int(rest.pop(0))
        elif a == "--duration":
            duration = float(rest.pop(0))
        elif a == "--fsync":
            do_fsync = True
        elif a == "--keep-going":
            keep_going = True
        elif a == "--interval":
            interval = float(rest.pop(0))
        elif a == "--first":
            seq = int(rest.pop(0))
        else:
            raise SystemExit(f"append: unknown option {a}")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    end = time.monotonic() + duration if duration is not None else None
    failed = 0
    # SIGTERM ends the run after the record being written, so that what
    # was printed is exactly what was written.
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop:
        if count is not None and seq >= count:
            break
        if end is not None and time.monotonic() >= end:
            break
        rec = record(node, seq)
        try:
            n = os.write(fd, rec)
            if n != len(rec):
                raise SystemExit(f"short write {n} of {len(rec)}")
            if do_fsync:
                os.fsync(fd)
            if do_fsync or duration is not None:
                say("ok", seq)
        except OSError as e:
            say("err", seq, errname(e))
            failed += 1
            if not keep_going:
                return 1
        seq += 1
        if interval:
            time.sleep(interval)
    os.close(fd)
    say("done", seq, failed)
    return 0


def cmd_pwrite(args):
    path, node, count = args[0], args[1], int(args[2])
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    for seq in range(count):
        fcntl.lockf(fd, fcntl.LOCK_EX)
        end = os.fstat(fd).st_size
        os.pwrite(fd, fixed_record(node, seq), end)
        fcntl.lockf(fd, fcntl.LOCK_UN)
    os.close(fd)
    say("done", count)
    return 0


def cmd_counter(args):
    """COUNT times: lockf the file, read the number in it, write it back
    plus one, unlock. Lost updates show as a final number too small."""
    path, count = args[0], int(args[1])
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    for _ in range(count):
        fcntl.lockf(fd, fcntl.LOCK_EX)
        data = os.pread(fd, 32, 0)
        n = int(data) if data.strip() else 0
        os.pwrite(fd, b"%20d\n" % (n + 1), 0)
        fcntl.lockf(fd, fcntl.LOCK_UN)
    os.close(fd)
    say("done", count)
    return 0


def cmd_sqlite(args):
    db, node, count = args[0], args[1], int(args[2])
    con = sqlite3.connect(db, timeout=60, isolation_level=None)
    con.execute("PRAGMA journal_mode=DELETE")
    con.execute("CREATE TABLE IF NOT EXISTS t "
                "(node TEXT, seq INTEGER, PRIMARY KEY (node, seq))")
    committed = retries = 0
    seq = 0
    while seq < count:
        try:
            con.execute("BEGIN IMMEDIATE")
            con.execute("INSERT INTO t VALUES (?, ?)", (node, seq))
            con.execute("COMMIT")
        except sqlite3.OperationalError as e:
            # Busy beyond the timeout: roll back and try the row again.
            # Anything else (an I/O error) is a failure of the filesystem.
            if "locked" not in str(e) and "busy" not in str(e):
                raise SystemExit(f"sqlite: {node} row {seq}: {e} "
                                 f"({getattr(e, 'sqlite_errorname', '?')})")
            say("busy", seq, str(e).replace(" ", "_"))
            retries += 1
            if retries > 1000:
                raise SystemExit(f"sqlite: giving up: {e}")
            if con.in_transaction:
                con.execute("ROLLBACK")
            continue
        committed += 1
        seq += 1
    con.close()
    say("committed", committed, "retries", retries)
    return 0


class Flock(ctypes.Structure):
    _fields_ = [("l_type", ctypes.c_short), ("l_whence", ctypes.c_short),
                ("l_start", ctypes.c_int64), ("l_len", ctypes.c_int64),
                ("l_pid", ctypes.c_int)]


F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW = 36, 37, 38
TYPES = {fcntl.F_RDLCK: "rdlck", fcntl.F_WRLCK: "wrlck",
         fcntl.F_UNLCK: "unlck"}
libc = ctypes.CDLL(None, use_errno=True)
libc.fcntl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]


def raw_fcntl(fd, cmd, typ, start, length):
    """fcntl(2) through libc, so that EINTR is seen rather than retried
    as Python's own fcntl module does. Returns (rc, errno, struct)."""
    fl = Flock(typ, os.SEEK_SET, start, length, 0)
    rc = libc.fcntl(fd, cmd, ctypes.addressof(fl))
    return rc, (ctypes.get_errno() if rc < 0 else 0), fl


def lock(fd, kind, start, length, shared, block):
    """Take a lock of kind flock, lockf (POSIX record lock) or ofd."""
    if kind == "flock":
        op = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        fcntl.flock(fd, op | (0 if block else fcntl.LOCK_NB))
    elif kind == "lockf":
        op = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        fcntl.lockf(fd, op | (0 if block else fcntl.LOCK_NB), length,
                    start, os.SEEK_SET)
    elif kind == "ofd":
        typ = fcntl.F_RDLCK if shared else fcntl.F_WRLCK
        while True:
            rc, err, _ = raw_fcntl(fd, F_OFD_SETLKW if block
                                   else F_OFD_SETLK, typ, start, length)
            if rc == 0:
                return
            if err != errno.EINTR:
                raise OSError(err, os.strerror(err))
    else:
        raise SystemExit(f"unknown lock kind {kind}")


def unlock(fd, kind, start, length):
    if kind == "flock":
        fcntl.flock(fd, fcntl.LOCK_UN)
    elif kind == "lockf":
        fcntl.lockf(fd, fcntl.LOCK_UN, length, start, os.SEEK_SET)
    else:
        raw_fcntl(fd, F_OFD_SETLK, fcntl.F_UNLCK, start, length)


def lock_args(args):
    path, kind, start, length = args[0], args[1], int(args[2]), int(args[3])
    shared = len(args) > 4 and args[4] == "shared"
    mode = os.O_RDONLY if shared and kind != "flock" else os.O_RDWR
    fd = os.open(path, mode | os.O_CREAT, 0o644)
    return fd, kind, start, length, shared


def cmd_hold(args):
    fd, kind, start, length, shared = lock_args(args)
    lock(fd, kind, start, length, shared, True)
    say("locked")
    sys.stdin.readline()
    unlock(fd, kind, start, length)
    say("released")
    os.close(fd)
    return 0


def cmd_try(args):
    fd, kind, start, length, shared = lock_args(args)
    try:
        lock(fd, kind, start, length, shared, False)
    except OSError as e:
        say("busy", errname(e))
        return 1
    say("ok")
    unlock(fd, kind, start, length)
    os.close(fd)
    return 0


def cmd_getlk(args):
    path, start, length = args[0], int(args[1]), int(args[2])
    shared = len(args) > 3 and args[3] == "shared"
    fd = os.open(path, os.O_RDWR)
    rc, err, fl = raw_fcntl(fd, fcntl.F_GETLK,
                            fcntl.F_RDLCK if shared else fcntl.F_WRLCK,
                            start, length)
    if rc < 0:
        say("error", errno.errorcode.get(err, err))
        return 1
    if fl.l_type == fcntl.F_UNLCK:
        say("unlck")
    else:
        say(TYPES.get(fl.l_type, fl.l_type), fl.l_start, fl.l_len, fl.l_pid)
    os.close(fd)
    return 0


def cmd_setlkw_intr(args):
    path, start, length = args[0], int(args[1]), int(args[2])
    after = float(args[3])
    fd = os.open(path, os.O_RDWR)
    signal.signal(signal.SIGALRM, lambda *_: None)
    signal.setitimer(signal.ITIMER_REAL, after)
    t0 = time.monotonic()
    rc, err, _ = raw_fcntl(fd, fcntl.F_SETLKW, fcntl.F_WRLCK, start, length)
    elapsed = time.monotonic() - t0
    say("result", rc, errno.errorcode.get(err, err) if rc < 0 else "-",
        "%.3f" % elapsed)
    sys.stdin.readline()
    os.close(fd)
    say("closed")
    return 0


COMMANDS = {
    "append": cmd_append,
    "pwrite": cmd_pwrite,
    "counter": cmd_counter,
    "sqlite": cmd_sqlite,
    "hold": cmd_hold,
    "try": cmd_try,
    "getlk": cmd_getlk,
    "setlkw-intr": cmd_setlkw_intr,
}


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.stderr.write(__doc__)
        return 2
    return COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
