/*
 * Unit tests for the wire codec (lockd/codec.c) and the shared helpers in
 * lockd/addr.c: every message round-trips, every truncation and extension
 * of a body is refused, bad headers are told apart, addresses parse.
 */
#include "config.h"

#include <sys/socket.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"
#include <sodium.h>

#include "lockd.h"

/* Decode the single frame in b; fails the test unless it is whole. */
static struct wsl_frame
one_frame(const struct wsl_buf *b)
{
	struct wsl_frame	f;

	assert_int_equal(wsl_frame_decode(b->data, b->len, WSL_MAX_FRAME, &f),
	    (int)b->len);
	return f;
}

typedef int (*dec_fn)(const struct wsl_frame *, void *);

/*
 * Every strict prefix of the body and the body plus a trailing byte must
 * be refused by the decoder.
 */
static void
check_body_strict(const struct wsl_frame *f, dec_fn dec)
{
	struct wsl_frame	 g = *f;
	uint8_t			*big;
	char			 out[4096];
	size_t			 n;

	for (n = 0; n < f->bodylen; n++) {
		g.bodylen = n;
		assert_int_equal(dec(&g, out), -EBADMSG);
	}
	big = malloc(f->bodylen + 1);
	memcpy(big, f->body, f->bodylen);
	big[f->bodylen] = 0;
	g.body = big;
	g.bodylen = f->bodylen + 1;
	assert_int_equal(dec(&g, out), -EBADMSG);
	free(big);
}

static void
t_header(void **state)
{
	struct wsl_buf		b = { 0 };
	struct wsl_frame	f;
	size_t			n;

	assert_int_equal(wsl_enc_empty(&b, WSL_RENEW, 0x1122334455667788ULL),
	    0);
	assert_int_equal(b.len, WSL_HDR_LEN);
	/* Big-endian length, version, type, id. */
	assert_int_equal(b.data[3], 16);
	assert_int_equal(b.data[5], WSL_PROTO_VERSION);
	assert_int_equal(b.data[6], 0x01);
	assert_int_equal(b.data[7], 0x05);
	assert_int_equal(b.data[8], 0x11);
	f = one_frame(&b);
	assert_int_equal(f.type, WSL_RENEW);
	assert_true(f.id == 0x1122334455667788ULL);
	assert_int_equal(wsl_dec_empty(&f), 0);
	/* Every prefix is "need more". */
	for (n = 0; n < b.len; n++)
		assert_int_equal(wsl_frame_decode(b.data, n, WSL_MAX_FRAME,
		    &f), 0);
	wsl_buf_free(&b);
}

static void
t_header_errors(void **state)
{
	uint8_t			h[WSL_HDR_LEN] = { 0 };
	struct wsl_frame	f;

	h[3] = 15;	/* shorter than a header */
	assert_int_equal(wsl_frame_decode(h, 4, WSL_MAX_FRAME, &f), -EBADMSG);
	h[3] = 0;
	assert_int_equal(wsl_frame_decode(h, 4, WSL_MAX_FRAME, &f), -EBADMSG);
	h[1] = 0x01;	/* 65536 + 16: too long, known from 4 bytes */
	h[3] = 16;
	assert_int_equal(wsl_frame_decode(h, 4, WSL_MAX_FRAME, &f), -EMSGSIZE);
	h[1] = 0;
	h[2] = 0x10;	/* 4112 > a small limit */
	assert_int_equal(wsl_frame_decode(h, 4, 4096, &f), -EMSGSIZE);
	h[0] = 0xff;
	assert_int_equal(wsl_frame_decode(h, 4, WSL_MAX_FRAME, &f), -EMSGSIZE);
	memset(h, 0, sizeof h);
	h[3] = 16;
	h[5] = WSL_PROTO_VERSION + 1;
	assert_int_equal(wsl_frame_decode(h, 16, WSL_MAX_FRAME, &f),
	    -EPROTONOSUPPORT);
	h[5] = 1;	/* version 1 had no MACs: refused */
	assert_int_equal(wsl_frame_decode(h, 16, WSL_MAX_FRAME, &f),
	    -EPROTONOSUPPORT);
	h[5] = 0;
	assert_int_equal(wsl_frame_decode(h, 16, WSL_MAX_FRAME, &f),
	    -EPROTONOSUPPORT);
}

static void
t_two_frames_in_stream(void **state)
{
	struct wsl_buf		b = { 0 };
	struct wsl_frame	f;
	int			n;

	assert_int_equal(wsl_enc_ok(&b, 1, 77), 0);
	assert_int_equal(wsl_enc_grant(&b, 2, 78), 0);
	n = wsl_frame_decode(b.data, b.len, WSL_MAX_FRAME, &f);
	assert_int_equal(n, 24);
	assert_int_equal(f.type, WSL_OK);
	n = wsl_frame_decode(b.data + n, b.len - n, WSL_MAX_FRAME, &f);
	assert_int_equal(n, 24);
	assert_int_equal(f.type, WSL_GRANT);
	assert_int_equal(f.id, 2);
	wsl_buf_free(&b);
}

static void
t_hello(void **state)
{
	struct wsl_buf		b = { 0 };
	struct wsl_hello	h = { WSL_HELLO_RESUME, 0xabcdefULL, 5000,
				    { 0 }, { 0 }, "node-1", 6 }, d;
	struct wsl_frame	f;

	memset(h.nonce, 0x5a, sizeof h.nonce);
	memset(h.resume, 0xa5, sizeof h.resume);
	assert_int_equal(wsl_enc_hello(&b, 0, &h), 0);
	f = one_frame(&b);
	assert_int_equal(wsl_dec_hello(&f, &d), 0);
	assert_int_equal(d.flags, WSL_HELLO_RESUME);
	assert_true(d.client_id == 0xabcdefULL);
	assert_int_equal(d.lease_ms, 5000);
	assert_memory_equal(d.nonce, h.nonce, WSL_NONCE_LEN);
	assert_memory_equal(d.resume, h.resume, WSL_MAC_LEN);
	assert_int_equal(d.namelen, 6);
	assert_memory_equal(d.name, "node-1", 6);
	check_body_strict(&f, (dec_fn)wsl_dec_hello);
	/* Unknown flags are refused. */
	((uint8_t *)f.body)[3] = 0x80;
	assert_int_equal(wsl_dec_hello(&f, &d), -EBADMSG);
	wsl_buf_free(&b);
}

static void
t_challenge_auth(void **state)
{
	struct wsl_buf		b = { 0 };
	struct wsl_frame	f;
	uint8_t			n[WSL_NONCE_LEN], d[WSL_NONCE_LEN];

	memset(n, 7, sizeof n);
	assert_int_equal(wsl_enc_challenge(&b, 0, n), 0);
	f = one_frame(&b);
	assert_int_equal(f.type, WSL_CHALLENGE);
	assert_int_equal(wsl_dec_nonce(&f, d), 0);
	assert_memory_equal(n, d, sizeof n);
	check_body_strict(&f, (dec_fn)wsl_dec_nonce);
	wsl_buf_free(&b);
	assert_int_equal(wsl_enc_auth(&b, 0, n), 0);
	f = one_frame(&b);
	assert_int_equal(f.type, WSL_AUTH);
	wsl_buf_free(&b);
}

static void
t_welcome(void **state)
{
	struct wsl_buf		b = { 0 };
	struct wsl_welcome	w = { WSL_WELCOME_GRACE, 9, 10000, 3000, 4,
				    65536, 100, 10, { 0 } }, d;
	struct wsl_frame	f;

	memset(w.secret, 3, sizeof w.secret);
	assert_int_equal(wsl_enc_welcome(&b, 0, &w), 0);
	f = one_frame(&b);
	assert_int_equal(wsl_dec_welcome(&f, &d), 0);
	/* Field by field: the structs have padding. */
	assert_true(d.flags == w.flags && d.session == w.session &&
	    d.lease_ms == w.lease_ms && d.grace_ms == w.grace_ms &&
	    d.epoch == w.epoch && d.max_frame == w.max_frame &&
	    d.max_locks == w.max_locks && d.max_waiters == w.max_waiters);
	assert_memory_equal(d.secret, w.secret, sizeof w.secret);
	check_body_strict(&f, (dec_fn)wsl_dec_welcome);
	wsl_buf_free(&b);
	/* A zero lease makes no sense. */
	w.lease_ms = 0;
	assert_int_equal(wsl_enc_welcome(&b, 0, &w), 0);
	f = one_frame(&b);
	assert_int_equal(wsl_dec_welcome(&f, &d), -EBADMSG);
	wsl_buf_free(&b);
}

static void
t_lock_types(void **state)
{
	static const uint16_t	types[] = { WSL_LOCK, WSL_RECLAIM, WSL_UNLOCK };
	struct wsl_buf		b = { 0 };
	struct wsl_lockreq	q = { 42, 10, WSL_RANGE_END, WSL_EXCLUSIVE,
				    WSL_LOCK_CACHED, 0x100000005ULL,
				    (const uint8_t *)"ws/a/1:2", 8,
				    { { NULL, 0 } }, 0 }, d;
	struct wsl_frame	f;
	size_t			i;

	for (i = 0; i < 3; i++) {
		assert_int_equal(wsl_enc_lock(&b, types[i], 5, &q), 0);
		f = one_frame(&b);
		assert_int_equal(f.type, types[i]);
		assert_int_equal(wsl_dec_lock(&f, &d), 0);
		assert_true(d.owner == 42 && d.start == 10 &&
		    d.end == WSL_RANGE_END);
		assert_int_equal(d.keylen, 8);
		assert_memory_equal(d.key, "ws/a/1:2", 8);
		if (types[i] != WSL_UNLOCK) {
			assert_int_equal(d.mode, WSL_EXCLUSIVE);
			assert_int_equal(d.flags, WSL_LOCK_CACHED);
		}
		if (types[i] == WSL_RECLAIM)
			assert_true(d.token == 0x100000005ULL);
		check_body_strict(&f, (dec_fn)wsl_dec_lock);
		wsl_buf_free(&b);
	}
}

/* Field values the decoder must refuse though the length is right. */
static void
t_lock_bad_fields(void **state)
{
	struct wsl_buf		b = { 0 };
	struct wsl_lockreq	q = { 1, 0, 10, WSL_SHARED, 0, 0,
				    (const uint8_t *)"k", 1, { { NULL, 0 } },
				    0 }, d;
	struct wsl_frame	f;
	uint8_t			*body;

	assert_int_equal(wsl_enc_lock(&b, WSL_LOCK, 1, &q), 0);
	f = one_frame(&b);
	body = (uint8_t *)f.body;
	body[24] = 3;				/* mode */
	assert_int_equal(wsl_dec_lock(&f, &d), -EBADMSG);
	body[24] = 0;
	assert_int_equal(wsl_dec_lock(&f, &d), -EBADMSG);
	body[24] = WSL_SHARED;
	body[25] = 0x40;			/* unknown flag */
	assert_int_equal(wsl_dec_lock(&f, &d), -EBADMSG);
	body[25] = WSL_LOCK_UNDER;		/* no parent follows */
	assert_int_equal(wsl_dec_lock(&f, &d), -EBADMSG);
	body[25] = WSL_LOCK_ABOVE;		/* ancestors, no parent */
	assert_int_equal(wsl_dec_lock(&f, &d), -EBADMSG);
	body[25] = WSL_LOCK_QUIET | WSL_LOCK_WAIT;	/* quiet never waits */
	assert_int_equal(wsl_dec_lock(&f, &d), -EBADMSG);
	body[25] = WSL_LOCK_QUIET | WSL_LOCK_TEST;
	assert_int_equal(wsl_dec_lock(&f, &d), -EBADMSG);
	body[25] = WSL_LOCK_QUIET | WSL_LOCK_CACHED;
	assert_int_equal(wsl_dec_lock(&f, &d), 0);
	body[25] = 0;
	body[23] = 0;				/* end 0 <= start 0 */
	assert_int_equal(wsl_dec_lock(&f, &d), -EBADMSG);
	body[23] = 10;
	assert_int_equal(wsl_dec_lock(&f, &d), 0);
	f.type = WSL_OK;			/* not a lock message */
	assert_int_equal(wsl_dec_lock(&f, &d), -EBADMSG);
	wsl_buf_free(&b);

	/* RECLAIM may not WAIT. */
	q.flags = WSL_LOCK_WAIT;
	assert_int_equal(wsl_enc_lock(&b, WSL_RECLAIM, 1, &q), 0);
	f = one_frame(&b);
	assert_int_equal(wsl_dec_lock(&f, &d), -EBADMSG);
	wsl_buf_free(&b);
}

/* The keys of a chain, parent first. */
static const char *const chain_keys[WSL_MAX_CHAIN] = { "g/1/3", "g/1/2",
    "g/1/1", "d4", "d5", "d6", "d7", "the eighth" };

/* q carries the first n keys of chain_keys, with the flags they need. */
static void
set_chain(struct wsl_lockreq *q, size_t n)
{
	size_t	i;

	q->flags &= ~(WSL_LOCK_UNDER | WSL_LOCK_ABOVE);
	if (n > 0)
		q->flags |= WSL_LOCK_UNDER;
	if (n > 1)
		q->flags |= WSL_LOCK_ABOVE;
	for (i = 0; i < n; i++) {
		q->chain[i].key = (const uint8_t *)chain_keys[i];
		q->chain[i].len = strlen(chain_keys[i]);
	}
	q->nchain = n;
}

/*
 * f's body with flags set to fl and extra appended: a LOCK made by hand.
 * Returns what the decoder says of it.
 */
static int
dec_edited(const struct wsl_frame *f, uint8_t fl, const void *extra,
    size_t n)
{
	struct wsl_frame	 g = *f;
	struct wsl_lockreq	 d;
	uint8_t			*body = malloc(f->bodylen + n);
	int			 r;

	memcpy(body, f->body, f->bodylen);
	memcpy(body + f->bodylen, extra, n);
	body[25] = fl;
	g.body = body;
	g.bodylen = f->bodylen + n;
	r = wsl_dec_lock(&g, &d);
	free(body);
	return r;
}

/*
 * LOCK with UNDER carries the parent's key after its own, with ABOVE then
 * a count and the ancestors above the parent; RECLAIM and UNLOCK not.
 */
static void
t_lock_chain(void **state)
{
	static const size_t	 sizes[] = { 1, 2, 8 };
	struct wsl_buf		 b = { 0 };
	struct wsl_lockreq	 q = { 7, 0, WSL_RANGE_END, WSL_SHARED,
				    WSL_LOCK_WAIT, 0, (const uint8_t *)"g/1/20",
				    6, { { NULL, 0 } }, 0 }, d;
	struct wsl_frame	 f;
	uint8_t			*body;
	size_t			 i, j, len;

	for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		set_chain(&q, sizes[i]);
		assert_int_equal(wsl_enc_lock(&b, WSL_LOCK, 9, &q), 0);
		f = one_frame(&b);
		len = 24 + 2 + 2 + 6 + (sizes[i] > 1);
		for (j = 0; j < sizes[i]; j++)
			len += 2 + strlen(chain_keys[j]);
		assert_int_equal(f.bodylen, len);
		assert_int_equal(wsl_dec_lock(&f, &d), 0);
		assert_int_equal(d.flags, q.flags);
		assert_int_equal(d.keylen, 6);
		assert_memory_equal(d.key, "g/1/20", 6);
		assert_int_equal(d.nchain, sizes[i]);
		for (j = 0; j < sizes[i]; j++) {
			assert_int_equal(d.chain[j].len, q.chain[j].len);
			assert_memory_equal(d.chain[j].key, q.chain[j].key,
			    q.chain[j].len);
		}
		/* Truncated anywhere, or a byte too long: malformed. */
		check_body_strict(&f, (dec_fn)wsl_dec_lock);
		wsl_buf_free(&b);
	}

	/* Parent alone: u16 length, key; a length of 0 is malformed. */
	set_chain(&q, 1);
	assert_int_equal(wsl_enc_lock(&b, WSL_LOCK, 9, &q), 0);
	f = one_frame(&b);
	assert_int_equal(f.bodylen, 24 + 2 + 2 + 6 + 2 + 5);
	assert_int_equal(dec_edited(&f, WSL_LOCK_UNDER, "", 0), 0);
	/* Ancestors: n = 1..7 of them, each 1..WSL_MAX_KEY bytes. */
	assert_int_equal(dec_edited(&f, WSL_LOCK_UNDER | WSL_LOCK_ABOVE,
	    "\1\0\1a", 4), 0);
	assert_int_equal(dec_edited(&f, WSL_LOCK_UNDER | WSL_LOCK_ABOVE,
	    "\7\0\1a\0\1b\0\1c\0\1d\0\1e\0\1f\0\1g", 22), 0);
	/* n = 0, n = 8 (nine keys in all), n missing. */
	assert_int_equal(dec_edited(&f, WSL_LOCK_UNDER | WSL_LOCK_ABOVE,
	    "\0", 1), -EBADMSG);
	assert_int_equal(dec_edited(&f, WSL_LOCK_UNDER | WSL_LOCK_ABOVE,
	    "\10\0\1a\0\1b\0\1c\0\1d\0\1e\0\1f\0\1g\0\1h", 25),
	    -EBADMSG);
	assert_int_equal(dec_edited(&f, WSL_LOCK_UNDER | WSL_LOCK_ABOVE,
	    "", 0), -EBADMSG);
	/* A zero-length ancestor, one cut short, one too many bytes. */
	assert_int_equal(dec_edited(&f, WSL_LOCK_UNDER | WSL_LOCK_ABOVE,
	    "\1\0\0", 3), -EBADMSG);
	assert_int_equal(dec_edited(&f, WSL_LOCK_UNDER | WSL_LOCK_ABOVE,
	    "\2\0\1a", 4), -EBADMSG);
	assert_int_equal(dec_edited(&f, WSL_LOCK_UNDER | WSL_LOCK_ABOVE,
	    "\1\0\1ab", 5), -EBADMSG);
	/* Ancestors without ABOVE are trailing bytes. */
	assert_int_equal(dec_edited(&f, WSL_LOCK_UNDER, "\1\0\1a", 4),
	    -EBADMSG);
	body = (uint8_t *)f.body;
	body[24 + 2 + 2 + 6] = 0;
	body[24 + 2 + 2 + 6 + 1] = 0;
	assert_int_equal(wsl_dec_lock(&f, &d), -EBADMSG);
	wsl_buf_free(&b);

	/* An ancestor longer than WSL_MAX_KEY. */
	set_chain(&q, 2);
	q.chain[1].key = calloc(1, WSL_MAX_KEY + 1);
	q.chain[1].len = WSL_MAX_KEY;
	assert_int_equal(wsl_enc_lock(&b, WSL_LOCK, 9, &q), 0);
	f = one_frame(&b);
	assert_int_equal(wsl_dec_lock(&f, &d), 0);
	assert_int_equal(d.chain[1].len, WSL_MAX_KEY);
	wsl_buf_free(&b);
	q.chain[1].len = WSL_MAX_KEY + 1;
	assert_int_equal(wsl_enc_lock(&b, WSL_LOCK, 9, &q), -EINVAL);
	q.chain[1].len = 1;
	assert_int_equal(wsl_enc_lock(&b, WSL_LOCK, 9, &q), 0);
	f = one_frame(&b);
	body = (uint8_t *)f.body;
	body[f.bodylen - 3] = (WSL_MAX_KEY + 1) >> 8;	/* u16 length */
	body[f.bodylen - 2] = (WSL_MAX_KEY + 1) & 0xff;
	assert_int_equal(wsl_dec_lock(&f, &d), -EBADMSG);
	wsl_buf_free(&b);
	free((void *)q.chain[1].key);

	/* The encoder wants the flags to match the chain. */
	set_chain(&q, 0);
	q.flags |= WSL_LOCK_UNDER;
	assert_int_equal(wsl_enc_lock(&b, WSL_LOCK, 9, &q), -EINVAL);
	set_chain(&q, 2);
	q.flags &= ~WSL_LOCK_ABOVE;
	assert_int_equal(wsl_enc_lock(&b, WSL_LOCK, 9, &q), -EINVAL);
	set_chain(&q, 1);
	q.flags |= WSL_LOCK_ABOVE;
	assert_int_equal(wsl_enc_lock(&b, WSL_LOCK, 9, &q), -EINVAL);
	q.flags &= ~(WSL_LOCK_ABOVE | WSL_LOCK_UNDER);
	assert_int_equal(wsl_enc_lock(&b, WSL_LOCK, 9, &q), -EINVAL);
	set_chain(&q, 8);
	q.nchain = WSL_MAX_CHAIN + 1;
	assert_int_equal(wsl_enc_lock(&b, WSL_LOCK, 9, &q), -EINVAL);
	set_chain(&q, 3);
	q.chain[2].len = 0;
	assert_int_equal(wsl_enc_lock(&b, WSL_LOCK, 9, &q), -EINVAL);
	assert_int_equal(b.len, 0);
	/* RECLAIM and UNLOCK send none; a RECLAIM saying UNDER is refused. */
	set_chain(&q, 2);
	q.flags = WSL_LOCK_UNDER | WSL_LOCK_ABOVE;
	assert_int_equal(wsl_enc_lock(&b, WSL_UNLOCK, 9, &q), 0);
	f = one_frame(&b);
	assert_int_equal(f.bodylen, 24 + 2 + 6);
	assert_int_equal(wsl_dec_lock(&f, &d), 0);
	assert_int_equal(d.nchain, 0);
	wsl_buf_free(&b);
	assert_int_equal(wsl_enc_lock(&b, WSL_RECLAIM, 9, &q), 0);
	f = one_frame(&b);
	assert_int_equal(f.bodylen, 24 + 2 + 8 + 2 + 6);
	assert_int_equal(wsl_dec_lock(&f, &d), -EBADMSG);
	wsl_buf_free(&b);
}

static void
t_lock_key_limits(void **state)
{
	struct wsl_buf		 b = { 0 };
	uint8_t			*key = calloc(1, WSL_MAX_KEY + 1);
	struct wsl_lockreq	 q = { 1, 0, 1, WSL_SHARED, 0, 0, key,
				    WSL_MAX_KEY, { { NULL, 0 } }, 0 }, d;
	struct wsl_frame	 f;

	assert_int_equal(wsl_enc_lock(&b, WSL_LOCK, 1, &q), 0);
	f = one_frame(&b);
	assert_int_equal(wsl_dec_lock(&f, &d), 0);
	assert_int_equal(d.keylen, WSL_MAX_KEY);
	wsl_buf_free(&b);
	q.keylen = WSL_MAX_KEY + 1;
	assert_int_equal(wsl_enc_lock(&b, WSL_LOCK, 1, &q), -EINVAL);
	q.keylen = 0;
	assert_int_equal(wsl_enc_lock(&b, WSL_LOCK, 1, &q), -EINVAL);
	q.keylen = 1;
	q.start = 1;
	assert_int_equal(wsl_enc_lock(&b, WSL_LOCK, 1, &q), -EINVAL);
	wsl_buf_free(&b);
	free(key);
}

static void
t_small_replies(void **state)
{
	struct wsl_buf		b = { 0 };
	struct wsl_frame	f;
	struct wsl_error	e;
	struct wsl_conflict	c = { 1, 2, 3, 4, WSL_SHARED }, dc;
	uint64_t		v;

	assert_int_equal(wsl_enc_ok(&b, 9, 123), 0);
	f = one_frame(&b);
	assert_int_equal(wsl_dec_u64(&f, &v), 0);
	assert_int_equal(v, 123);
	check_body_strict(&f, (dec_fn)wsl_dec_u64);
	wsl_buf_free(&b);

	assert_int_equal(wsl_enc_cancel(&b, 9, 55), 0);
	f = one_frame(&b);
	assert_int_equal(wsl_dec_cancel(&f, &v), 0);
	assert_int_equal(v, 55);
	wsl_buf_free(&b);

	assert_int_equal(wsl_enc_error(&b, 9, WSL_E_AGAIN, "busy"), 0);
	f = one_frame(&b);
	assert_int_equal(wsl_dec_error(&f, &e), 0);
	assert_int_equal(e.code, WSL_E_AGAIN);
	assert_int_equal(e.textlen, 4);
	assert_memory_equal(e.text, "busy", 4);
	check_body_strict(&f, (dec_fn)wsl_dec_error);
	assert_int_equal(wsl_err_to_errno(WSL_E_AGAIN), -EAGAIN);
	assert_int_equal(wsl_err_to_errno(9999), -EPROTO);
	wsl_buf_free(&b);

	assert_int_equal(wsl_enc_conflict(&b, 9, &c), 0);
	f = one_frame(&b);
	assert_int_equal(wsl_dec_conflict(&f, &dc), 0);
	assert_true(dc.session == 1 && dc.owner == 2 && dc.start == 3 &&
	    dc.end == 4 && dc.mode == WSL_SHARED);
	check_body_strict(&f, (dec_fn)wsl_dec_conflict);
	wsl_buf_free(&b);
}

static void
t_revoke(void **state)
{
	struct wsl_buf		b = { 0 };
	struct wsl_revoke	v = { 3, 0, 100, 77, (const uint8_t *)"key",
				    3 }, d;
	struct wsl_frame	f;

	assert_int_equal(wsl_enc_revoke(&b, &v), 0);
	f = one_frame(&b);
	assert_int_equal(f.id, 0);
	assert_int_equal(wsl_dec_revoke(&f, &d), 0);
	assert_true(d.owner == 3 && d.start == 0 && d.end == 100 &&
	    d.token == 77 && d.keylen == 3);
	check_body_strict(&f, (dec_fn)wsl_dec_revoke);
	wsl_buf_free(&b);
}

static void
t_item(void **state)
{
	struct wsl_buf		b = { 0 };
	struct wsl_item		it = { WSL_ITEM_HOLDER, 1, 2, 3, 1, 4, 5, 6,
				    7, WSL_SHARED, WSL_LOCK_CACHED,
				    (const uint8_t *)"kk", 2 }, d;
	struct wsl_frame	f;

	assert_int_equal(wsl_enc_item(&b, 1, &it), 0);
	f = one_frame(&b);
	assert_int_equal(wsl_dec_item(&f, &d), 0);
	assert_true(d.kind == it.kind && d.session == 1 && d.client_id == 2 &&
	    d.lease_left_ms == 3 && d.connected == 1 && d.owner == 4 &&
	    d.start == 5 && d.end == 6 && d.token == 7 &&
	    d.mode == WSL_SHARED && d.flags == WSL_LOCK_CACHED &&
	    d.datalen == 2);
	check_body_strict(&f, (dec_fn)wsl_dec_item);
	((uint8_t *)f.body)[0] = 9;
	assert_int_equal(wsl_dec_item(&f, &d), -EBADMSG);
	wsl_buf_free(&b);
}

static void
t_type_names(void **state)
{
	assert_string_equal(wsl_type_name(WSL_LOCK), "LOCK");
	assert_string_equal(wsl_type_name(0x9999), "unknown");
	assert_string_equal(wsl_err_name(WSL_E_GRACE),
	    "server in grace period");
}

static void
t_buf_reuse(void **state)
{
	struct wsl_buf	b = { 0 };
	int		i;

	/* Appending and consuming forever must not grow the buffer. */
	for (i = 0; i < 100000; i++) {
		assert_int_equal(wsl_enc_ok(&b, i, i), 0);
		wsl_buf_consume(&b, 24);
	}
	assert_true(b.cap <= 4096);
	assert_int_equal(wsl_buf_pending(&b), 0);
	wsl_buf_free(&b);
}

static void
t_addr(void **state)
{
	struct addr	a;

	assert_int_equal(addr_parse("unix:/run/x.sock", &a), 0);
	assert_int_equal(a.family, AF_UNIX);
	assert_string_equal(a.host, "/run/x.sock");
	assert_int_equal(addr_parse("lock1:7421", &a), 0);
	assert_string_equal(a.host, "lock1");
	assert_string_equal(a.port, "7421");
	assert_int_equal(addr_parse("lock1", &a), 0);
	assert_string_equal(a.port, "7420");
	assert_int_equal(addr_parse("[::1]:99", &a), 0);
	assert_string_equal(a.host, "::1");
	assert_string_equal(a.port, "99");
	assert_int_equal(addr_parse(":7420", &a), 0);
	assert_string_equal(a.host, "");
	assert_int_equal(addr_parse("h:0", &a), 0);
	assert_string_equal(a.port, "0");
	assert_int_equal(addr_parse("h:65536", &a), -EINVAL);
	assert_int_equal(addr_parse("h:", &a), -EINVAL);
	assert_int_equal(addr_parse("h:1x", &a), -EINVAL);
	assert_int_equal(addr_parse("::1", &a), -EINVAL);
	assert_int_equal(addr_parse("[::1", &a), -EINVAL);
	assert_int_equal(addr_parse("unix:", &a), -EINVAL);
}

static void
t_keyfile(void **state)
{
	char		 path[] = "/tmp/test_proto_keyXXXXXX";
	uint8_t		*key;
	size_t		 len;
	int		 fd;

	assert_true((fd = mkstemp(path)) >= 0);
	assert_int_equal(write(fd, "0123456789abcdef0123456789abcde", 31), 31);
	assert_int_equal(auth_keyfile_load(path, &key, &len), -EINVAL);
	assert_int_equal(write(fd, "f", 1), 1);
	assert_int_equal(auth_keyfile_load(path, &key, &len), 0);
	assert_int_equal(len, 32);
	sodium_free(key);
	assert_int_equal(fchmod(fd, 0640), 0);
	assert_int_equal(auth_keyfile_load(path, &key, &len), -EPERM);
	assert_int_equal(fchmod(fd, 0400), 0);
	assert_int_equal(auth_keyfile_load(path, &key, &len), 0);
	sodium_free(key);
	close(fd);
	unlink(path);
	assert_int_equal(auth_keyfile_load(path, &key, &len), -ENOENT);
}

static void
t_mac(void **state)
{
	uint8_t	key[32] = { 1 }, n1[32] = { 2 }, n2[32] = { 3 };
	uint8_t	m1[32], m2[32], m3[32], m4[32];

	auth_mac(key, 32, "client", n1, n2, 5, m1);
	auth_mac(key, 32, "server", n1, n2, 5, m2);
	auth_mac(key, 32, "client", n2, n1, 5, m3);
	auth_mac(key, 32, "client", n1, n2, 6, m4);
	assert_memory_not_equal(m1, m2, 32);
	assert_memory_not_equal(m1, m3, 32);
	assert_memory_not_equal(m1, m4, 32);
	auth_mac(key, 32, "client", n1, n2, 5, m2);
	assert_memory_equal(m1, m2, 32);
	key[31] ^= 1;
	auth_mac(key, 32, "client", n1, n2, 5, m2);
	assert_memory_not_equal(m1, m2, 32);
}

UNIT_MAIN(sodium_init() >= 0, NULL, NULL,
    cmocka_unit_test(t_header),
    cmocka_unit_test(t_header_errors),
    cmocka_unit_test(t_two_frames_in_stream),
    cmocka_unit_test(t_hello),
    cmocka_unit_test(t_challenge_auth),
    cmocka_unit_test(t_welcome),
    cmocka_unit_test(t_lock_types),
    cmocka_unit_test(t_lock_bad_fields),
    cmocka_unit_test(t_lock_chain),
    cmocka_unit_test(t_lock_key_limits),
    cmocka_unit_test(t_small_replies),
    cmocka_unit_test(t_revoke),
    cmocka_unit_test(t_item),
    cmocka_unit_test(t_type_names),
    cmocka_unit_test(t_buf_reuse),
    cmocka_unit_test(t_addr),
    cmocka_unit_test(t_keyfile),
    cmocka_unit_test(t_mac))
