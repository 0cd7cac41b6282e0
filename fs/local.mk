# wsfs: the FUSE daemon.
sbin_PROGRAMS += fs/wsfs
fs_wsfs_SOURCES = fs/main.c fs/wsfs.h fs/conf.c fs/conf.h fs/inode.c fs/ops.c \
	fs/priv.c fs/symlink.c fs/uring.c fs/cluster.c fs/glock.c \
	fs/perm.c fs/plock.c fs/stats.c fs/control.c lockd/metrics.c fs/scratchd.c fs/scratch.c fs/scratch.h fs/sweep.c fs/sweep.h \
	fs/nofollow.c fs/nofollow.h lockd/json.c lockd/json.h lockd/log.c lockd/log.h
fs_wsfs_CFLAGS = $(AM_CFLAGS) $(FUSE_CFLAGS) $(URING_CFLAGS) $(INIH_CFLAGS) \
	$(UUID_CFLAGS) $(CAPNG_CFLAGS)
fs_wsfs_LDADD = lockd/libwslock.a $(SODIUM_LIBS) $(FUSE_LIBS) $(URING_LIBS) $(INIH_LIBS) $(UUID_LIBS) $(CAPNG_LIBS) \
	-lpthread -lm
dist_man_MANS += fs/wsfs.8 fs/wsfs.conf.5

if HAVE_CMOCKA
UNIT_TESTS += tests/unit/test_symlink tests/unit/test_conf
check_PROGRAMS += tests/unit/test_symlink tests/unit/test_conf
tests_unit_test_symlink_SOURCES = tests/unit/test_symlink.c fs/symlink.c
tests_unit_test_symlink_CFLAGS = $(AM_CFLAGS) $(FUSE_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_symlink_LDADD = $(CMOCKA_LIBS)
tests_unit_test_conf_SOURCES = tests/unit/test_conf.c fs/conf.c
tests_unit_test_conf_CFLAGS = $(AM_CFLAGS) $(INIH_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_conf_LDADD = $(CMOCKA_LIBS) $(INIH_LIBS)
endif

FUZZ_TARGETS += tests/fuzz/fuzz_symlink tests/fuzz/fuzz_conf
tests_fuzz_fuzz_symlink_SOURCES = tests/fuzz/fuzz_symlink.c fs/symlink.c
tests_fuzz_fuzz_symlink_CFLAGS = $(AM_CFLAGS) $(FUSE_CFLAGS) -fsanitize=fuzzer
tests_fuzz_fuzz_symlink_LDFLAGS = $(AM_LDFLAGS) -fsanitize=fuzzer
tests_fuzz_fuzz_conf_SOURCES = tests/fuzz/fuzz_conf.c fs/conf.c
tests_fuzz_fuzz_conf_CFLAGS = $(AM_CFLAGS) $(INIH_CFLAGS) -fsanitize=fuzzer
tests_fuzz_fuzz_conf_LDFLAGS = $(AM_LDFLAGS) -fsanitize=fuzzer
tests_fuzz_fuzz_conf_LDADD = $(INIH_LIBS)

if HAVE_CMOCKA
UNIT_TESTS += tests/unit/test_inode
check_PROGRAMS += tests/unit/test_inode
tests_unit_test_inode_SOURCES = tests/unit/test_inode.c fs/inode.c fs/stats.c \
	fs/conf.c lockd/log.c
tests_unit_test_inode_CFLAGS = $(AM_CFLAGS) $(FUSE_CFLAGS) $(INIH_CFLAGS) \
	$(CMOCKA_CFLAGS)
tests_unit_test_inode_LDADD = $(CMOCKA_LIBS) $(INIH_LIBS) $(FUSE_LIBS) -lpthread
endif
