#!/bin/sh
# Long run of the wsfs attack suite (issue 3): every attack class with many
# iterations, outside CI. Prints the per-class table (iterations, escapes,
# failures, racer rounds) at the end and keeps it in a report file.
#
# usage: tests/attack/longrun.sh [ITERATIONS] [PYTEST-ARGS...]
#
# ITERATIONS (default 100000) is the target for the classes whose iteration
# is one operation. Classes whose iteration is heavier get a share of it:
# 6 (seven operations through a planted hard link, as root and as another
# user in a forked child, the canaries rebuilt after each) ITERATIONS/200,
# 8 (a forked child per case) ITERATIONS/50, 7 (every tenth iteration
# blocks 32 FIFO openers) ITERATIONS/10, 11 (a round of 80 blocked FIFO
# opens, 64 readers, 128 lock waiters, or 64 reads of throttled storage)
# ITERATIONS/2000, at
# least 2. ATTACK_ITERATIONS_<class> in the environment overrides any class.
# Set WSFS_BUILDDIR to test another build (default: this tree); copy the
# binary away first if the tree may be rebuilt during the run.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
n=${1:-100000}
[ $# -gt 0 ] && shift
case $n in
''|*[!0-9]*) echo "longrun.sh: ITERATIONS must be a number, not '$n'" >&2
	exit 2 ;;
esac

: "${WSFS_BUILDDIR:=$top}"
: "${WSFS_SRCDIR:=$top}"
export WSFS_BUILDDIR WSFS_SRCDIR
export ATTACK_ITERATIONS="$n"
export ATTACK_ITERATIONS_6="${ATTACK_ITERATIONS_6:-$((n / 200 > 2 ? n / 200 : 2))}"
export ATTACK_ITERATIONS_8="${ATTACK_ITERATIONS_8:-$((n / 50 > 8 ? n / 50 : 8))}"
export ATTACK_ITERATIONS_7="${ATTACK_ITERATIONS_7:-$((n / 10 > 10 ? n / 10 : 10))}"
export ATTACK_ITERATIONS_11="${ATTACK_ITERATIONS_11:-$((n / 2000 > 2 ? n / 2000 : 2))}"
report=${ATTACK_REPORT:-$WSFS_BUILDDIR/tests/attack/longrun-$(date -u +%Y%m%dT%H%M%SZ).txt}
export ATTACK_REPORT="$report"

echo "longrun: $WSFS_BUILDDIR/fs/wsfs, $n iterations per class" \
    "(6: $ATTACK_ITERATIONS_6, 7: $ATTACK_ITERATIONS_7," \
    "8: $ATTACK_ITERATIONS_8, 11: $ATTACK_ITERATIONS_11), started" \
    "$(date -u '+%F %T') UTC"
start=$(date +%s)
/usr/bin/python3 -m pytest -p no:cacheprovider -q -rs "$here" "$@"
status=$?
echo "longrun: finished in $(( $(date +%s) - start ))s, pytest exit $status"
if [ -f "$report" ]; then
	echo "longrun: report in $report"
	cat "$report"
fi
exit $status
