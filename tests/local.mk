# Test tiers: C unit tests (UNIT_TESTS, added by each area's local.mk),
# pytest suites on real mounts under tests/, all run by tests/run, which
# prints the one summary line "N passed, N failed, N skipped".
EXTRA_DIST += tests/run tests/conftest.py tests/wsfstest.py

check-local: $(UNIT_TESTS)
	/usr/bin/python3 $(srcdir)/tests/run --srcdir=$(abs_srcdir) \
	    --builddir=$(abs_builddir) $(UNIT_TESTS)

if ENABLE_FUZZING
noinst_PROGRAMS += $(FUZZ_TARGETS)
endif
