# wsctl: one cmd-*.c per subcommand, each a row of the table in main.c.
sbin_PROGRAMS += tools/wsctl
tools_wsctl_SOURCES = tools/main.c tools/wsctl.c tools/wsctl.h \
	tools/cmd-workspace.c tools/cmd-status.c tools/cmd-lock.c \
	tools/cmd-locks.c tools/cmd-keygen.c tools/cmd-scratch.c \
	tools/cmd-sweep.c
tools_wsctl_CPPFLAGS = $(FS_INC)
tools_wsctl_CFLAGS = $(AM_CFLAGS) $(SODIUM_CFLAGS)
tools_wsctl_LDADD = tools/libwsctl.a lockd/libwslock.a $(WSCOMMON_LIBS) \
	$(SODIUM_LIBS) -lm
dist_man_MANS += tools/wsctl.8

# The pure modules of wsctl, which its unit tests and fuzz targets link.
noinst_LIBRARIES += tools/libwsctl.a
tools_libwsctl_a_SOURCES = tools/marker.c
tools_libwsctl_a_CPPFLAGS = $(LOCKD_INC)

if HAVE_CMOCKA
UNIT_TESTS += tests/unit/test_marker
check_PROGRAMS += tests/unit/test_marker
tests_unit_test_marker_SOURCES = tests/unit/test_marker.c
tests_unit_test_marker_CPPFLAGS = -I$(top_srcdir)/tools $(LOCKD_INC)
tests_unit_test_marker_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_marker_LDADD = tools/libwsctl.a lockd/libwsutil.a \
	$(CMOCKA_LIBS)
endif

if ENABLE_FUZZING
FUZZ_TARGETS += tests/fuzz/fuzz_marker
tests_fuzz_fuzz_marker_SOURCES = tests/fuzz/fuzz_marker.c
tests_fuzz_fuzz_marker_CPPFLAGS = -I$(top_srcdir)/tools $(LOCKD_INC)
tests_fuzz_fuzz_marker_LDFLAGS = $(AM_LDFLAGS) $(FUZZ_LDFLAGS)
tests_fuzz_fuzz_marker_LDADD = tools/libwsctl.a lockd/libwsutil.a
endif
