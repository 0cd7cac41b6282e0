# wslockd, its protocol and the client library libwslock.
LOCKD_COMMON = lockd/proto.h lockd/lockd.h lockd/codec.c lockd/table.c \
	lockd/addr.c lockd/auth.c

EXTRA_DIST += lockd/PROTOCOL.md scripts/bench-lockd tests/lockd/conftest.py \
	tests/lockd/lockdlib.py tests/lockd/test_lockd.py \
	tests/lockd/test_lockd_history.py tests/lockd/test_threads.py \
	tests/lockd/test_quiet.py tests/lockd/test_async_test.py \
	tests/lockd/test_hardening.py tests/lockd/test_mac.py \
	tests/lockd/test_failover_client.py tests/lockd/test_ha.py \
	tests/lockd/etcdlib.py \
	tests/metrics/test_lockd_metrics.py

if HAVE_CMOCKA
UNIT_TESTS += tests/unit/test_table tests/unit/test_proto \
	tests/unit/test_client tests/unit/test_auth
check_PROGRAMS += tests/unit/test_table tests/unit/test_proto \
	tests/unit/test_client tests/unit/test_auth
tests_unit_test_table_SOURCES = tests/unit/test_table.c lockd/table.c \
	lockd/lockd.h lockd/proto.h
tests_unit_test_table_CPPFLAGS = $(LOCKD_INC)
tests_unit_test_table_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(SODIUM_CFLAGS)
tests_unit_test_table_LDADD = $(CMOCKA_LIBS) $(SODIUM_LIBS)
tests_unit_test_proto_SOURCES = tests/unit/test_proto.c lockd/codec.c \
	lockd/addr.c lockd/auth.c lockd/lockd.h lockd/proto.h
tests_unit_test_proto_CPPFLAGS = $(LOCKD_INC)
tests_unit_test_proto_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(SODIUM_CFLAGS)
tests_unit_test_proto_LDADD = $(CMOCKA_LIBS) $(SODIUM_LIBS)
tests_unit_test_auth_SOURCES = tests/unit/test_auth.c lockd/codec.c \
	lockd/auth.c lockd/state.c lockd/lockd.h lockd/proto.h
tests_unit_test_auth_CPPFLAGS = $(LOCKD_INC)
tests_unit_test_auth_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(SODIUM_CFLAGS)
tests_unit_test_auth_LDADD = $(CMOCKA_LIBS) $(SODIUM_LIBS)
tests_unit_test_client_SOURCES = tests/unit/test_client.c
tests_unit_test_client_CPPFLAGS = $(LOCKD_INC)
tests_unit_test_client_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(SODIUM_CFLAGS)
tests_unit_test_client_LDADD = lockd/libwslock.a lockd/libwsutil.a \
	$(CMOCKA_LIBS) $(SODIUM_LIBS) -lpthread
endif

if ENABLE_FUZZING
FUZZ_TARGETS += tests/fuzz/fuzz_proto tests/fuzz/fuzz_lockkey
tests_fuzz_fuzz_lockkey_SOURCES = tests/fuzz/fuzz_lockkey.c
tests_fuzz_fuzz_lockkey_CPPFLAGS = $(LOCKD_INC)
tests_fuzz_fuzz_lockkey_LDFLAGS = $(AM_LDFLAGS) $(FUZZ_LDFLAGS)
tests_fuzz_fuzz_lockkey_LDADD = lockd/libwsutil.a
tests_fuzz_fuzz_proto_SOURCES = tests/fuzz/fuzz_proto.c lockd/codec.c \
	lockd/lockd.h lockd/proto.h
tests_fuzz_fuzz_proto_CPPFLAGS = $(LOCKD_INC)
tests_fuzz_fuzz_proto_CFLAGS = $(AM_CFLAGS) $(SODIUM_CFLAGS) \
	-fsanitize=fuzzer,address,undefined
tests_fuzz_fuzz_proto_LDFLAGS = -fsanitize=fuzzer,address,undefined
tests_fuzz_fuzz_proto_LDADD = $(SODIUM_LIBS)
endif

sbin_PROGRAMS += lockd/wslockd
lockd_wslockd_SOURCES = lockd/main.c lockd/server.c lockd/state.c \
	lockd/etcd.c lockd/etcd.h lockd/etcdjson.c $(LOCKD_COMMON)
lockd_wslockd_CFLAGS = $(AM_CFLAGS) $(SODIUM_CFLAGS) $(CURL_CFLAGS) \
	$(JANSSON_CFLAGS)
lockd_wslockd_LDADD = lockd/libwsutil.a $(SODIUM_LIBS) $(CURL_LIBS) \
	$(JANSSON_LIBS) -lpthread

# The client library, linked by wsfs, wsctl and the test client.
noinst_LIBRARIES += lockd/libwslock.a
lockd_libwslock_a_SOURCES = lockd/wslock.h lockd/client.c $(LOCKD_COMMON)
lockd_libwslock_a_CFLAGS = $(AM_CFLAGS) $(SODIUM_CFLAGS)

check_PROGRAMS += tests/lockd/lockclient
tests_lockd_lockclient_SOURCES = tests/lockd/lockclient.c
tests_lockd_lockclient_CPPFLAGS = $(LOCKD_INC)
tests_lockd_lockclient_LDADD = lockd/libwslock.a lockd/libwsutil.a \
	$(SODIUM_LIBS) -lpthread

dist_man_MANS += lockd/wslockd.8

# Load generator of scripts/bench-lockd (wslockd, redis and etcd).
check_PROGRAMS += tests/lockd/benchclient
tests_lockd_benchclient_SOURCES = tests/lockd/benchclient.c
tests_lockd_benchclient_CPPFLAGS = $(LOCKD_INC)
tests_lockd_benchclient_CFLAGS = $(AM_CFLAGS) $(SODIUM_CFLAGS)
tests_lockd_benchclient_LDADD = lockd/libwslock.a lockd/libwsutil.a \
	$(SODIUM_LIBS) -lpthread

check_PROGRAMS += tests/lockd/mtclient
tests_lockd_mtclient_SOURCES = tests/lockd/mtclient.c
tests_lockd_mtclient_CPPFLAGS = $(LOCKD_INC)
tests_lockd_mtclient_LDADD = lockd/libwslock.a lockd/libwsutil.a $(SODIUM_LIBS) -lpthread

# libwsutil: what every program needs and no program owns: logging,
# clocks, the metrics endpoint, JSON strings, strict numbers, lock keys,
# whole reads and writes. metrics.c parses
# addresses with addr.c, so its users link libwslock.a (or addr.c) after.
noinst_LIBRARIES += lockd/libwsutil.a
lockd_libwsutil_a_SOURCES = lockd/log.c lockd/log.h lockd/clock.c \
	lockd/clock.h lockd/metrics.c \
	lockd/metrics.h lockd/json.c lockd/json.h lockd/number.c \
	lockd/number.h lockd/lockkey.c lockd/lockkey.h lockd/fdio.c \
	lockd/fdio.h lockd/defaults.h
lockd_libwsutil_a_CFLAGS = $(AM_CFLAGS) $(SODIUM_CFLAGS)

if HAVE_CMOCKA
UNIT_TESTS += tests/unit/test_etcdjson
check_PROGRAMS += tests/unit/test_etcdjson
tests_unit_test_etcdjson_SOURCES = tests/unit/test_etcdjson.c \
	lockd/etcdjson.c lockd/etcd.h
tests_unit_test_etcdjson_CPPFLAGS = $(LOCKD_INC)
tests_unit_test_etcdjson_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) \
	$(SODIUM_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_test_etcdjson_LDADD = $(CMOCKA_LIBS) $(SODIUM_LIBS) \
	$(JANSSON_LIBS)

UNIT_TESTS += tests/unit/test_json tests/unit/test_number \
	tests/unit/test_lockkey
check_PROGRAMS += tests/unit/test_json tests/unit/test_number \
	tests/unit/test_lockkey
tests_unit_test_json_SOURCES = tests/unit/test_json.c
tests_unit_test_json_CPPFLAGS = $(LOCKD_INC)
tests_unit_test_json_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_json_LDADD = lockd/libwsutil.a $(CMOCKA_LIBS)
tests_unit_test_number_SOURCES = tests/unit/test_number.c
tests_unit_test_number_CPPFLAGS = $(LOCKD_INC)
tests_unit_test_number_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_number_LDADD = lockd/libwsutil.a $(CMOCKA_LIBS)
tests_unit_test_lockkey_SOURCES = tests/unit/test_lockkey.c
tests_unit_test_lockkey_CPPFLAGS = $(LOCKD_INC)
tests_unit_test_lockkey_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_lockkey_LDADD = lockd/libwsutil.a $(CMOCKA_LIBS)
endif
