# wsfs: the FUSE daemon.
sbin_PROGRAMS += fs/wsfs
fs_wsfs_SOURCES = fs/main.c fs/wsfs.h fs/conf.c fs/conf.h fs/inode.c fs/ops.c \
	fs/symlink.c fs/uring.c \
	lockd/log.c lockd/log.h
fs_wsfs_CFLAGS = $(AM_CFLAGS) $(FUSE_CFLAGS) $(URING_CFLAGS) $(INIH_CFLAGS) \
	$(UUID_CFLAGS)
fs_wsfs_LDADD = $(FUSE_LIBS) $(URING_LIBS) $(INIH_LIBS) $(UUID_LIBS) -lpthread
dist_man_MANS += fs/wsfs.8 fs/wsfs.conf.5
