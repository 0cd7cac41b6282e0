# Test tiers: C unit tests (UNIT_TESTS, added by each area's local.mk),
# pytest suites on real mounts under tests/, all run by tests/run, which
# prints the one summary line "N passed, N failed, N skipped".
EXTRA_DIST += tests/run tests/conftest.py tests/wsfstest.py tests/unit/unit.h \
	tests/fuzz/fuzz.h

check-local: check-modules $(UNIT_TESTS)
	/usr/bin/python3 $(srcdir)/tests/run --srcdir=$(abs_srcdir) \
	    --builddir=$(abs_builddir) $(UNIT_TESTS)

# check-local runs the cluster suite on a local directory and then again
# on GlusterFS (tests/run, STORAGE_PASSES). check-gluster runs the whole
# cluster suite, test_script.py too, on GlusterFS only: every node on its
# own GlusterFS client of one replica-3 volume (README, "Storage under a
# shared mount"). Needs glusterfs-server and glusterfs-client.
check-gluster: all
	WSFS_STORAGE=gluster /usr/bin/python3 $(srcdir)/tests/run \
	    --srcdir=$(abs_srcdir) --builddir=$(abs_builddir) --only cluster
.PHONY: check-gluster

if ENABLE_FUZZING
noinst_PROGRAMS += $(FUZZ_TARGETS)
endif

# The pytest suites and scripts travel whole in the tarball.
EXTRA_DIST += tests/mount tests/attack tests/cluster tests/scratch \
	tests/ops tests/status tests/metrics tests/lockd \
	scripts/bench scripts/bench-sweep scripts/bench-cluster scripts/cluster \
	scripts/demo scripts/deps autogen.sh

dist-hook:
	find $(distdir)/tests -name __pycache__ -prune -exec rm -rf {} +
	rm -f $(distdir)/tests/lockd/lockclient $(distdir)/tests/lockd/mtclient \
	    $(distdir)/tests/lockd/benchclient $(distdir)/tests/lockd/*.o
