# Service units and examples (scripts/systemd) and the tmpfiles rules.
# The .in units name programs as @sbindir@, substituted here at make time so
# that a prefix given to configure or make is honoured; configuration stays
# in /etc/wsfs whatever the prefix, as wsfs itself reads /etc/wsfs/wsfs.conf.
# The mount units are site-specific examples (a mount unit's name must
# match its path), so they go to the documentation.
systemd_edit = sed -e 's|@sbindir[@]|$(sbindir)|g'
systemdsystemunit_DATA = scripts/systemd/wslockd.service \
	scripts/systemd/wsfs-sweep.service
dist_systemdsystemunit_DATA = scripts/systemd/wsfs-sweep.timer
wsfsexamplesdir = $(docdir)/examples
dist_wsfsexamples_DATA = scripts/systemd/workspaces.mount \
	scripts/systemd/scratch.mount
EXTRA_DIST += scripts/systemd/wslockd.service.in \
	scripts/systemd/wsfs-sweep.service.in scripts/systemd/wsfs.tmpfiles
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

# The module graph of each program (who calls whom, from its objects)
# must stay a DAG, and README's diagram must be it: scripts/modgraph
# fails on a cycle or a stale diagram. make modgraph prints the graph,
# make modgraph-readme writes it into README.md.
EXTRA_DIST += scripts/modgraph
modgraph_args = \
	fs/wsfs: $(fs_wsfs_OBJECTS) $(fs_wsfs_LDADD) \
	lockd/wslockd: $(lockd_wslockd_OBJECTS) $(lockd_wslockd_LDADD) \
	tools/wsctl: $(tools_wsctl_OBJECTS) $(tools_wsctl_LDADD)
check-modules: $(sbin_PROGRAMS)
	$(AM_V_GEN)/usr/bin/python3 $(srcdir)/scripts/modgraph --check \
	    --readme $(srcdir)/README.md $(modgraph_args)
modgraph: $(sbin_PROGRAMS)
	@/usr/bin/python3 $(srcdir)/scripts/modgraph $(modgraph_args)
modgraph-readme: $(sbin_PROGRAMS)
	$(AM_V_GEN)/usr/bin/python3 $(srcdir)/scripts/modgraph --readme \
	    $(srcdir)/README.md --update $(modgraph_args)
.PHONY: check-modules modgraph modgraph-readme

# A scheduler probe for the bench's readers (README, Performance): the
# round trip of a FUSE request between an unpinned caller and per-CPU
# server threads, without FUSE. Built, not installed.
noinst_PROGRAMS += scripts/wake-probe
scripts_wake_probe_SOURCES = scripts/wake-probe.c
scripts_wake_probe_LDADD = -lpthread
