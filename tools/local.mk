# wsctl: one cmd-*.c per subcommand, each a row of the table in wsctl.c.
sbin_PROGRAMS += tools/wsctl
tools_wsctl_SOURCES = tools/wsctl.c tools/wsctl.h tools/cmd-workspace.c \
	tools/cmd-status.c tools/cmd-lock.c tools/cmd-locks.c \
	tools/cmd-keygen.c tools/cmd-scratch.c tools/cmd-sweep.c
tools_wsctl_CPPFLAGS = $(LOCKD_INC) $(FS_INC)
tools_wsctl_CFLAGS = $(AM_CFLAGS) $(SODIUM_CFLAGS)
tools_wsctl_LDADD = $(WSCOMMON_LIBS) lockd/libwslock.a $(SODIUM_LIBS) -lm
dist_man_MANS += tools/wsctl.8
