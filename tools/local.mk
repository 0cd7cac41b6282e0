# wsctl: one cmd-*.c per subcommand, each a row of the table in wsctl.c.
sbin_PROGRAMS += tools/wsctl
tools_wsctl_SOURCES = tools/wsctl.c tools/wsctl.h lockd/log.c lockd/log.h
tools_wsctl_CFLAGS = $(AM_CFLAGS) $(SODIUM_CFLAGS) $(UUID_CFLAGS) $(INIH_CFLAGS)
tools_wsctl_LDADD = $(SODIUM_LIBS) $(UUID_LIBS) $(INIH_LIBS) -lpthread
tools_wsctl_SOURCES += tools/cmd-workspace.c
dist_man_MANS += tools/wsctl.8
