# wsfs: the FUSE daemon.
sbin_PROGRAMS += fs/wsfs
fs_wsfs_SOURCES = fs/main.c fs/wsfs.h fs/inode.c fs/ops.c \
	fs/priv.c fs/symlink.c fs/uring.c fs/cluster.c fs/glock.c \
	fs/perm.c fs/plock.c fs/stats.c fs/control.c fs/scratchd.c \
	fs/handle.c fs/loop.c fs/passthrough.c
fs_wsfs_CPPFLAGS = $(LOCKD_INC)
fs_wsfs_CFLAGS = $(AM_CFLAGS) $(FUSE_CFLAGS) $(URING_CFLAGS) $(INIH_CFLAGS) \
	$(UUID_CFLAGS) $(CAPNG_CFLAGS)
fs_wsfs_LDADD = fs/libwscommon.a lockd/libwslock.a lockd/libwsutil.a \
	$(SODIUM_LIBS) $(FUSE_LIBS) $(URING_LIBS) $(INIH_LIBS) $(UUID_LIBS) \
	$(CAPNG_LIBS) -lpthread -lm
dist_man_MANS += fs/wsfs.8 fs/wsfs.conf.5

# libwscommon: what wsfs shares with wsctl: the configuration, scratch
# workspaces, the sweeper, safe tree removal, the no-symlink opener and
# the mountinfo reader. Its users link lockd/libwsutil.a after it
# (logging). Who calls whom: sweep -> scratch, rmtree; scratch -> rmtree,
# nofollow; rmtree -> nofollow; conf, nofollow and mountinfo are leaves.
noinst_LIBRARIES += fs/libwscommon.a
fs_libwscommon_a_SOURCES = fs/conf.c fs/conf.h fs/scratch.c fs/scratch.h \
	fs/sweep.c fs/sweep.h fs/rmtree.c fs/rmtree.h fs/nofollow.c \
	fs/nofollow.h fs/mountinfo.c fs/mountinfo.h
fs_libwscommon_a_CPPFLAGS = $(LOCKD_INC)
fs_libwscommon_a_CFLAGS = $(AM_CFLAGS) $(INIH_CFLAGS) $(UUID_CFLAGS)
WSCOMMON_LIBS = fs/libwscommon.a lockd/libwsutil.a $(INIH_LIBS) \
	$(UUID_LIBS) -lpthread

if HAVE_CMOCKA
UNIT_TESTS += tests/unit/test_symlink tests/unit/test_conf
check_PROGRAMS += tests/unit/test_symlink tests/unit/test_conf
tests_unit_test_symlink_SOURCES = tests/unit/test_symlink.c fs/symlink.c
tests_unit_test_symlink_CPPFLAGS = $(FS_INC)
tests_unit_test_symlink_CFLAGS = $(AM_CFLAGS) $(FUSE_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_symlink_LDADD = $(CMOCKA_LIBS)
tests_unit_test_conf_SOURCES = tests/unit/test_conf.c
tests_unit_test_conf_CPPFLAGS = $(FS_INC)
tests_unit_test_conf_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_conf_LDADD = $(WSCOMMON_LIBS) $(CMOCKA_LIBS)

UNIT_TESTS += tests/unit/test_inode
check_PROGRAMS += tests/unit/test_inode
tests_unit_test_inode_SOURCES = tests/unit/test_inode.c fs/inode.c fs/stats.c
tests_unit_test_inode_CPPFLAGS = $(FS_INC)
tests_unit_test_inode_CFLAGS = $(AM_CFLAGS) $(FUSE_CFLAGS) $(INIH_CFLAGS) \
	$(CMOCKA_CFLAGS)
tests_unit_test_inode_LDADD = $(WSCOMMON_LIBS) $(FUSE_LIBS) $(CMOCKA_LIBS)

UNIT_TESTS += tests/unit/test_rmtree tests/unit/test_sweep
check_PROGRAMS += tests/unit/test_rmtree tests/unit/test_sweep
tests_unit_test_rmtree_SOURCES = tests/unit/test_rmtree.c tests/unit/tbase.h
tests_unit_test_rmtree_CPPFLAGS = $(FS_INC)
tests_unit_test_rmtree_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_rmtree_LDADD = $(WSCOMMON_LIBS) $(CMOCKA_LIBS)
tests_unit_test_sweep_SOURCES = tests/unit/test_sweep.c tests/unit/tbase.h
tests_unit_test_sweep_CPPFLAGS = $(FS_INC)
tests_unit_test_sweep_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_sweep_LDADD = $(WSCOMMON_LIBS) $(CMOCKA_LIBS)
endif

# Fuzz targets (clang, --enable-fuzzing): the libraries are then built
# with fuzzer coverage and the sanitizers (configure.ac), the targets link
# the fuzzer's main.
if ENABLE_FUZZING
FUZZ_TARGETS += tests/fuzz/fuzz_symlink tests/fuzz/fuzz_conf \
	tests/fuzz/fuzz_scratch_meta
tests_fuzz_fuzz_symlink_SOURCES = tests/fuzz/fuzz_symlink.c fs/symlink.c
tests_fuzz_fuzz_symlink_CPPFLAGS = $(FS_INC)
tests_fuzz_fuzz_symlink_CFLAGS = $(AM_CFLAGS) $(FUSE_CFLAGS)
tests_fuzz_fuzz_symlink_LDFLAGS = $(AM_LDFLAGS) $(FUZZ_LDFLAGS)
tests_fuzz_fuzz_conf_SOURCES = tests/fuzz/fuzz_conf.c
tests_fuzz_fuzz_conf_CPPFLAGS = $(FS_INC)
tests_fuzz_fuzz_conf_LDFLAGS = $(AM_LDFLAGS) $(FUZZ_LDFLAGS)
tests_fuzz_fuzz_conf_LDADD = $(WSCOMMON_LIBS)
tests_fuzz_fuzz_scratch_meta_SOURCES = tests/fuzz/fuzz_scratch_meta.c
tests_fuzz_fuzz_scratch_meta_CPPFLAGS = $(FS_INC)
tests_fuzz_fuzz_scratch_meta_LDFLAGS = $(AM_LDFLAGS) $(FUZZ_LDFLAGS)
tests_fuzz_fuzz_scratch_meta_LDADD = $(WSCOMMON_LIBS)
endif
