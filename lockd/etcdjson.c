/*
 * The JSON of etcd's v3 gateway, both ways: request bodies for the few
 * calls wslockd makes (lease grant, keepalive and revoke, range, txn) and
 * parsers for their answers. Pure functions with no I/O, so that a unit
 * test and the sanitizers can feed them every odd answer. The gateway
 * writes int64 fields as JSON strings and leaves out fields that are zero
 * or false; keys and values are base64.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sodium.h>

#include "etcd.h"

/* An int64 field: a JSON string of digits or a number; absent is 0. */
static int
get_i64(json_t *o, const char *name, int64_t *out)
{
	json_t		*v = json_object_get(o, name);
	const char	*s;
	char		*end;
	long long	 n;

	if (v == NULL) {
		*out = 0;
		return 0;
	}
	if (json_is_integer(v)) {
		*out = json_integer_value(v);
		return 0;
	}
	if (!json_is_string(v))
		return -EPROTO;
	s = json_string_value(v);
	errno = 0;
	n = strtoll(s, &end, 10);
	if (*s == '\0' || *end != '\0' || errno != 0)
		return -EPROTO;
	*out = n;
	return 0;
}

/* base64 of len bytes, in a new string; NULL on allocation failure. */
char *
etcdj_b64(const void *p, size_t len)
{
	size_t	 n = sodium_base64_encoded_len(len,
		    sodium_base64_VARIANT_ORIGINAL);
	char	*s;

	if ((s = malloc(n)) == NULL)
		return NULL;
	sodium_bin2base64(s, n, p, len, sodium_base64_VARIANT_ORIGINAL);
	return s;
}

/* Decode a base64 field into a new NUL-terminated buffer. */
static int
get_b64(json_t *o, const char *name, char **out, size_t *outlen)
{
	json_t		*v = json_object_get(o, name);
	const char	*s = "";
	char		*buf;
	size_t		 n, len;

	if (v != NULL && !json_is_string(v))
		return -EPROTO;
	if (v != NULL)
		s = json_string_value(v);
	len = strlen(s);
	if ((buf = malloc(len / 4 * 3 + 4)) == NULL)
		return -ENOMEM;
	if (sodium_base642bin((unsigned char *)buf, len / 4 * 3 + 3, s, len,
	    NULL, &n, NULL, sodium_base64_VARIANT_ORIGINAL) != 0) {
		free(buf);
		return -EPROTO;
	}
	buf[n] = '\0';
	*out = buf;
	*outlen = n;
	return 0;
}

/*
 * Parse an answer; an "error" object (or a gRPC "code" without a
 * header) is -EIO with the message in err, anything else malformed
 * -EPROTO.
 */
static int
parse(const char *body, size_t len, json_t **out, char *err, size_t errlen)
{
	json_t		*root, *e;
	json_error_t	 je;
	const char	*msg;

	if ((root = json_loadb(body, len, 0, &je)) == NULL ||
	    !json_is_object(root)) {
		snprintf(err, errlen, "not JSON: %s", root ? "not an object" :
		    je.text);
		json_decref(root);
		return -EPROTO;
	}
	if ((e = json_object_get(root, "error")) != NULL ||
	    (json_object_get(root, "code") != NULL &&
	    json_object_get(root, "header") == NULL)) {
		/* 3.4 writes {"error": TEXT, "code": N, "message": TEXT}. */
		if ((msg = json_string_value(json_object_get(root,
		    "message"))) == NULL && (msg = json_string_value(e)) ==
		    NULL && json_is_object(e))
			msg = json_string_value(json_object_get(e, "message"));
		snprintf(err, errlen, "etcd: %s", msg ? msg : "error");
		json_decref(root);
		return -EIO;
	}
	*out = root;
	return 0;
}

int
etcdj_lease(const char *body, size_t len, int64_t *id, int64_t *ttl,
    char *err, size_t errlen)
{
	json_t	*root, *res;
	int64_t	 i, t;
	int	 r;

	if ((r = parse(body, len, &root, err, errlen)) < 0)
		return r;
	/* keepalive answers {"result": {...}}, grant the object itself. */
	if ((res = json_object_get(root, "result")) == NULL)
		res = root;
	if (!json_is_object(res) || get_i64(res, "ID", &i) < 0 ||
	    get_i64(res, "TTL", &t) < 0) {
		snprintf(err, errlen, "malformed lease answer");
		r = -EPROTO;
	} else {
		*id = i;
		*ttl = t;
	}
	json_decref(root);
	return r;
}

int
etcdj_txn(const char *body, size_t len, int *succeeded, int64_t *revision,
    char *err, size_t errlen)
{
	json_t	*root, *hdr, *ok;
	int64_t	 rev;
	int	 r = 0;

	if ((r = parse(body, len, &root, err, errlen)) < 0)
		return r;
	hdr = json_object_get(root, "header");
	ok = json_object_get(root, "succeeded");
	if (!json_is_object(hdr) || get_i64(hdr, "revision", &rev) < 0 ||
	    rev <= 0 || (ok != NULL && !json_is_boolean(ok))) {
		snprintf(err, errlen, "malformed txn answer");
		r = -EPROTO;
	} else {
		*succeeded = ok != NULL && json_is_true(ok);
		*revision = rev;
	}
	json_decref(root);
	return r;
}

int
etcdj_range(const char *body, size_t len, struct etcdj_kv *kv, char *err,
    size_t errlen)
{
	json_t	*root, *kvs, *k;
	struct etcdj_kv x;
	int	 r;

	memset(&x, 0, sizeof x);
	if ((r = parse(body, len, &root, err, errlen)) < 0)
		return r;
	kvs = json_object_get(root, "kvs");
	if (kvs == NULL)
		goto done;		/* no such key */
	if (!json_is_array(kvs) || json_array_size(kvs) != 1 ||
	    !json_is_object(k = json_array_get(kvs, 0)) ||
	    get_i64(k, "create_revision", &x.create_rev) < 0 ||
	    get_i64(k, "mod_revision", &x.mod_rev) < 0 ||
	    get_i64(k, "lease", &x.lease) < 0 || x.create_rev <= 0 ||
	    x.mod_rev <= 0) {
		snprintf(err, errlen, "malformed range answer");
		r = -EPROTO;
		goto out;
	}
	if ((r = get_b64(k, "value", &x.value, &x.len)) < 0) {
		snprintf(err, errlen, "malformed value in range answer");
		goto out;
	}
	x.found = 1;
done:
	*kv = x;
out:
	json_decref(root);
	return r;
}

void
etcdj_kv_free(struct etcdj_kv *kv)
{
	if (kv->value != NULL)
		sodium_memzero(kv->value, kv->len);
	free(kv->value);
	kv->value = NULL;
}

/* Build a JSON body from a jansson object, which is consumed. */
static char *
dump(json_t *o)
{
	char	*s;

	if (o == NULL)
		return NULL;
	s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return s;
}

static json_t *
b64_string(const void *p, size_t len)
{
	char	*s;
	json_t	*j;

	if ((s = etcdj_b64(p, len)) == NULL)
		return NULL;
	j = json_string(s);
	free(s);
	return j;
}

static json_t *
i64_string(int64_t v)
{
	char	buf[24];

	snprintf(buf, sizeof buf, "%" PRId64, v);
	return json_string(buf);
}

char *
etcdj_req_lease(int64_t id, int64_t ttl)
{
	json_t	*o = json_object();

	if (o == NULL)
		return NULL;
	if (ttl > 0)
		json_object_set_new(o, "TTL", i64_string(ttl));
	if (id != 0)
		json_object_set_new(o, "ID", i64_string(id));
	return dump(o);
}

char *
etcdj_req_range(const char *key)
{
	json_t	*o = json_object();

	if (o == NULL)
		return NULL;
	json_object_set_new(o, "key", b64_string(key, strlen(key)));
	return dump(o);
}

/*
 * A txn: if every compare holds, put key = value (with lease if not 0);
 * cmp[] are (key, target "CREATE"/"MOD", revision) triples compared for
 * equality.
 */
char *
etcdj_req_txn(const struct etcdj_cmp *cmp, size_t ncmp, const char *key,
    const void *value, size_t len, int64_t lease)
{
	json_t	*o, *cs, *c, *succ, *put, *req;
	size_t	 i;

	if ((o = json_object()) == NULL)
		return NULL;
	cs = json_array();
	for (i = 0; i < ncmp; i++) {
		c = json_object();
		json_object_set_new(c, "key", b64_string(cmp[i].key,
		    strlen(cmp[i].key)));
		json_object_set_new(c, "target", json_string(cmp[i].mod ?
		    "MOD" : "CREATE"));
		json_object_set_new(c, cmp[i].mod ? "mod_revision" :
		    "create_revision", i64_string(cmp[i].rev));
		json_object_set_new(c, "result", json_string("EQUAL"));
		json_array_append_new(cs, c);
	}
	json_object_set_new(o, "compare", cs);
	put = json_object();
	json_object_set_new(put, "key", b64_string(key, strlen(key)));
	json_object_set_new(put, "value", b64_string(value, len));
	if (lease != 0)
		json_object_set_new(put, "lease", i64_string(lease));
	req = json_object();
	json_object_set_new(req, "request_put", put);
	succ = json_array();
	json_array_append_new(succ, req);
	json_object_set_new(o, "success", succ);
	return dump(o);
}
