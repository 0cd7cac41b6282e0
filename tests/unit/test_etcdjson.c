/*
 * Unit tests for the etcd gateway JSON (lockd/etcdjson.c): answers as
 * etcd 3.4 writes them, the fields it leaves out when zero, errors, and
 * malformed or hostile input (wrong types, bad base64, truncations of
 * every valid answer), which must fail cleanly and never be taken for
 * success.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "unit.h"
#include "etcd.h"

static char	err[256];

static const char grant[] = "{\"header\":{\"cluster_id\":\"1\",\"member_id\":"
    "\"2\",\"revision\":\"1\",\"raft_term\":\"2\"},\"ID\":\"4111120379944534277\","
    "\"TTL\":\"2\"}";
static const char ka_ok[] = "{\"result\":{\"header\":{\"revision\":\"5\"},"
    "\"ID\":\"77\",\"TTL\":\"3\"}}";
static const char ka_gone[] = "{\"result\":{\"header\":{\"revision\":\"5\"},"
    "\"ID\":\"77\"}}";
static const char txn_yes[] = "{\"header\":{\"revision\":\"8\"},"
    "\"succeeded\":true,\"responses\":[{\"response_put\":{}}]}";
static const char txn_no[] = "{\"header\":{\"revision\":\"8\"}}";
/* value "127.0.0.1:7420" */
static const char range_one[] = "{\"header\":{\"revision\":\"9\"},\"kvs\":[{"
    "\"key\":\"L3dzbG9ja2QvbGVhZGVy\",\"create_revision\":\"8\","
    "\"mod_revision\":\"8\",\"version\":\"1\",\"value\":"
    "\"MTI3LjAuMC4xOjc0MjA=\",\"lease\":\"77\"}],\"count\":\"1\"}";
static const char range_none[] = "{\"header\":{\"revision\":\"9\"}}";
static const char gw_error[] = "{\"error\":\"etcdserver: requested lease not "
    "found\",\"code\":5,\"message\":\"etcdserver: requested lease not found\"}";

static void
test_lease(void **state)
{
	int64_t	id, ttl;

	assert_int_equal(etcdj_lease(grant, strlen(grant), &id, &ttl, err,
	    sizeof err), 0);
	assert_true(id == 4111120379944534277LL && ttl == 2);
	assert_int_equal(etcdj_lease(ka_ok, strlen(ka_ok), &id, &ttl, err,
	    sizeof err), 0);
	assert_true(id == 77 && ttl == 3);
	/* An expired lease: TTL left out, which reads as 0. */
	assert_int_equal(etcdj_lease(ka_gone, strlen(ka_gone), &id, &ttl, err,
	    sizeof err), 0);
	assert_true(id == 77 && ttl == 0);
	assert_int_equal(etcdj_lease(gw_error, strlen(gw_error), &id, &ttl,
	    err, sizeof err), -EIO);
	assert_non_null(strstr(err, "lease not found"));
}

static void
test_txn(void **state)
{
	int64_t	rev = 0;
	int	ok = -1;

	assert_int_equal(etcdj_txn(txn_yes, strlen(txn_yes), &ok, &rev, err,
	    sizeof err), 0);
	assert_true(ok == 1 && rev == 8);
	assert_int_equal(etcdj_txn(txn_no, strlen(txn_no), &ok, &rev, err,
	    sizeof err), 0);
	assert_true(ok == 0 && rev == 8);
	/* No header: not an answer we can trust. */
	assert_int_equal(etcdj_txn("{}", 2, &ok, &rev, err, sizeof err),
	    -EPROTO);
	assert_int_equal(etcdj_txn("{\"header\":{\"revision\":\"8\"},"
	    "\"succeeded\":\"true\"}", 44, &ok, &rev, err, sizeof err),
	    -EPROTO);
}

static void
test_range(void **state)
{
	struct etcdj_kv	kv;

	assert_int_equal(etcdj_range(range_one, strlen(range_one), &kv, err,
	    sizeof err), 0);
	assert_true(kv.found && kv.create_rev == 8 && kv.mod_rev == 8 &&
	    kv.lease == 77);
	assert_string_equal(kv.value, "127.0.0.1:7420");
	assert_int_equal(kv.len, 14);
	etcdj_kv_free(&kv);
	assert_int_equal(etcdj_range(range_none, strlen(range_none), &kv, err,
	    sizeof err), 0);
	assert_false(kv.found);
	assert_null(kv.value);
	/* A bad base64 value, a revision that is not a number. */
	assert_int_equal(etcdj_range("{\"kvs\":[{\"create_revision\":\"8\","
	    "\"mod_revision\":\"8\",\"value\":\"@@@\"}]}", 64, &kv, err,
	    sizeof err), -EPROTO);
	assert_int_equal(etcdj_range("{\"kvs\":[{\"create_revision\":\"8x\","
	    "\"mod_revision\":\"8\"}]}", 52, &kv, err, sizeof err), -EPROTO);
	assert_int_equal(etcdj_range("{\"kvs\":{}}", 10, &kv, err,
	    sizeof err), -EPROTO);
}

/* Every prefix of every valid answer fails cleanly (or still parses). */
static void
test_truncated(void **state)
{
	const char	*all[] = { grant, ka_ok, ka_gone, txn_yes, txn_no,
			    range_one, range_none, gw_error };
	struct etcdj_kv	 kv;
	int64_t		 a, b;
	size_t		 i, n;
	int		 ok, r;
	char		*copy;

	for (i = 0; i < sizeof all / sizeof all[0]; i++)
		for (n = 0; n < strlen(all[i]); n++) {
			/* An exact-size copy, so ASan sees any overread. */
			assert_non_null(copy = malloc(n ? n : 1));
			memcpy(copy, all[i], n);
			r = etcdj_lease(copy, n, &a, &b, err, sizeof err);
			assert_true(r == 0 || r == -EPROTO || r == -EIO);
			r = etcdj_txn(copy, n, &ok, &a, err, sizeof err);
			assert_true(r == 0 || r == -EPROTO || r == -EIO);
			r = etcdj_range(copy, n, &kv, err, sizeof err);
			assert_true(r == 0 || r == -EPROTO || r == -EIO);
			if (r == 0)
				etcdj_kv_free(&kv);
			free(copy);
		}
}

static void
test_requests(void **state)
{
	struct etcdj_cmp cmp[2] = { { "/p/leader", 0, 8 }, { "/p/epoch", 1, 0 } };
	json_t		*j;
	json_error_t	 je;
	char		*s;

	assert_non_null(s = etcdj_req_txn(cmp, 2, "/p/epoch", "3", 1, 0));
	assert_non_null(j = json_loads(s, 0, &je));
	assert_string_equal(json_string_value(json_object_get(json_array_get(
	    json_object_get(j, "compare"), 0), "create_revision")), "8");
	assert_string_equal(json_string_value(json_object_get(json_array_get(
	    json_object_get(j, "compare"), 1), "target")), "MOD");
	assert_string_equal(json_string_value(json_object_get(json_object_get(
	    json_array_get(json_object_get(j, "success"), 0), "request_put"),
	    "value")), "Mw==");
	json_decref(j);
	free(s);
	assert_non_null(s = etcdj_req_lease(77, 0));
	assert_string_equal(s, "{\"ID\":\"77\"}");
	free(s);
	assert_non_null(s = etcdj_req_range("x"));
	assert_string_equal(s, "{\"key\":\"eA==\"}");
	free(s);
}

UNIT_MAIN(1, NULL, NULL,
    cmocka_unit_test(test_lease),
    cmocka_unit_test(test_txn),
    cmocka_unit_test(test_range),
    cmocka_unit_test(test_truncated),
    cmocka_unit_test(test_requests))
