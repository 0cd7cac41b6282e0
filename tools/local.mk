# wsctl: one cmd-*.c per subcommand, each a row of the table in wsctl.c.
sbin_PROGRAMS += tools/wsctl
tools_wsctl_SOURCES = tools/wsctl.c tools/wsctl.h lockd/log.c lockd/log.h \
	lockd/json.c lockd/json.h
tools_wsctl_CFLAGS = $(AM_CFLAGS) $(SODIUM_CFLAGS) $(UUID_CFLAGS) $(INIH_CFLAGS)
tools_wsctl_LDADD = $(SODIUM_LIBS) $(UUID_LIBS) $(INIH_LIBS) -lpthread
tools_wsctl_SOURCES += tools/cmd-workspace.c tools/cmd-status.c
tools_wsctl_SOURCES += tools/cmd-lock.c tools/cmd-locks.c tools/cmd-keygen.c
tools_wsctl_LDADD += lockd/libwslock.a $(SODIUM_LIBS) -lm
dist_man_MANS += tools/wsctl.8

# Scratch workspaces and the sweeper: wsctl scratch and wsctl sweep, the
# modules they share with wsfs, their unit test and fuzz target.
tools_wsctl_SOURCES += tools/cmd-scratch.c tools/cmd-sweep.c \
	fs/scratch.c fs/scratch.h fs/sweep.c fs/sweep.h fs/conf.c fs/conf.h \
	fs/nofollow.c fs/nofollow.h
tools_wsctl_CFLAGS += $(URING_CFLAGS)
tools_wsctl_LDADD += $(URING_LIBS)
if HAVE_CMOCKA
UNIT_TESTS += tests/unit/test_sweep
check_PROGRAMS += tests/unit/test_sweep
tests_unit_test_sweep_SOURCES = tests/unit/test_sweep.c fs/scratch.c \
	fs/sweep.c fs/nofollow.c lockd/log.c
tests_unit_test_sweep_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) \
	$(URING_CFLAGS) $(UUID_CFLAGS)
tests_unit_test_sweep_LDADD = $(CMOCKA_LIBS) $(URING_LIBS) $(UUID_LIBS) \
	-lpthread
endif
if ENABLE_FUZZING
FUZZ_TARGETS += tests/fuzz/fuzz_scratch_meta
tests_fuzz_fuzz_scratch_meta_SOURCES = tests/fuzz/fuzz_scratch_meta.c \
	fs/scratch.c fs/sweep.c fs/nofollow.c lockd/log.c
tests_fuzz_fuzz_scratch_meta_CFLAGS = $(AM_CFLAGS) $(URING_CFLAGS) \
	$(UUID_CFLAGS) -fsanitize=fuzzer,address,undefined
tests_fuzz_fuzz_scratch_meta_LDFLAGS = -fsanitize=fuzzer,address,undefined
tests_fuzz_fuzz_scratch_meta_LDADD = $(URING_LIBS) $(UUID_LIBS) -lpthread
endif

# ---- Service units and examples (scripts/systemd, ops) ----
# The .in units name programs as @sbindir@, substituted here at make time so
# that a prefix given to configure or make is honoured; configuration stays
# in /etc/wsfs whatever the prefix, as wsfs itself reads /etc/wsfs/wsfs.conf. The mount units are site-specific examples (a mount
# unit's name must match its path), so they go to the documentation.
systemd_edit = sed -e 's|@sbindir[@]|$(sbindir)|g'
systemdsystemunit_DATA = scripts/systemd/wslockd.service \
	scripts/systemd/wsfs-sweep.service
dist_systemdsystemunit_DATA = scripts/systemd/wsfs-sweep.timer
wsfsexamplesdir = $(docdir)/examples
dist_wsfsexamples_DATA = scripts/systemd/workspaces.mount \
	scripts/systemd/scratch.mount
EXTRA_DIST += scripts/systemd/wslockd.service.in \
	scripts/systemd/wsfs-sweep.service.in scripts/systemd/wsfs.tmpfiles
# The ops tests (workspaces, units, man pages, mount(8)) ship too.
EXTRA_DIST += tests/ops/test_workspace.py tests/ops/test_units.py \
	tests/ops/test_mount.py tests/ops/mountns.py
CLEANFILES += $(systemdsystemunit_DATA)

scripts/systemd/wslockd.service: $(srcdir)/scripts/systemd/wslockd.service.in Makefile
	$(AM_V_GEN)$(MKDIR_P) scripts/systemd && \
	    $(systemd_edit) $(srcdir)/scripts/systemd/wslockd.service.in >$@.tmp && \
	    mv $@.tmp $@
scripts/systemd/wsfs-sweep.service: $(srcdir)/scripts/systemd/wsfs-sweep.service.in Makefile
	$(AM_V_GEN)$(MKDIR_P) scripts/systemd && \
	    $(systemd_edit) $(srcdir)/scripts/systemd/wsfs-sweep.service.in >$@.tmp && \
	    mv $@.tmp $@

# The scratch base, created at boot by systemd-tmpfiles.
tmpfilesdir = $(prefix)/lib/tmpfiles.d
install-data-local: install-wsfs-tmpfiles
uninstall-local: uninstall-wsfs-tmpfiles
install-wsfs-tmpfiles:
	$(MKDIR_P) '$(DESTDIR)$(tmpfilesdir)'
	$(INSTALL_DATA) $(srcdir)/scripts/systemd/wsfs.tmpfiles \
	    '$(DESTDIR)$(tmpfilesdir)/wsfs.conf'
uninstall-wsfs-tmpfiles:
	rm -f '$(DESTDIR)$(tmpfilesdir)/wsfs.conf'
.PHONY: install-wsfs-tmpfiles uninstall-wsfs-tmpfiles
