/*
 * libFuzzer target for the wslockd wire codec: the input is a byte stream
 * as a connection would deliver it. Every whole frame is handed to every
 * body decoder, whatever its type, because a decoder must refuse any body
 * it was not built for without reading past it, and to the MAC check of
 * protocol version 2, which must refuse it (the fuzzer does not know the
 * key) without reading past it either. A decoded lock request is
 * re-encoded and must decode to the same fields, its chain of ancestors
 * included, which must agree with its flags and lie inside the frame;
 * sealed with a MAC it must open under the same key and sequence number,
 * and no longer once one byte of it changes.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "fuzz.h"
#include "lockd.h"

/* A key the input cannot know: what it sends is never authentic. */
static const uint8_t	fuzz_key[WSL_MAC_LEN] = { 0x5e, 0xa1 };

static void
seal_init(struct wsl_seal *s, uint64_t seq)
{
	wsl_seal_init(s, fuzz_key);
	s->seq = seq;
}

/* q sealed as the seq-th frame opens as that frame, and only unchanged. */
static void
check_sealed(const struct wsl_frame *f, const struct wsl_lockreq *q,
    uint64_t seq, size_t flip)
{
	struct wsl_seal		tx, rx;
	struct wsl_buf		b = { 0 };
	struct wsl_frame	g;
	struct wsl_lockreq	d;

	seal_init(&tx, seq);
	b.seal = &tx;
	if (wsl_enc_lock(&b, f->type, f->id, q) < 0)
		abort();
	if (wsl_frame_decode(b.data, b.len, WSL_MAX_FRAME, &g) != (int)b.len)
		abort();
	seal_init(&rx, seq);
	if (wsl_frame_open(&rx, b.data, &g) < 0 || rx.seq != seq + 1 ||
	    wsl_dec_lock(&g, &d) < 0 || d.keylen != q->keylen ||
	    memcmp(d.key, q->key, q->keylen) != 0)
		abort();
	b.data[flip % b.len] ^= 0x01;
	seal_init(&rx, seq);
	if (wsl_frame_decode(b.data, b.len, WSL_MAX_FRAME, &g) == (int)b.len &&
	    wsl_frame_open(&rx, b.data, &g) != -EBADMSG)
		abort();
	wsl_buf_free(&b);
}

/* The chain agrees with the flags (PROTOCOL.md, field rules). */
static void
check_chain(const struct wsl_frame *f, const struct wsl_lockreq *q)
{
	size_t	i;

	if (q->nchain > WSL_MAX_CHAIN ||
	    ((q->flags & WSL_LOCK_UNDER) != 0) != (q->nchain >= 1) ||
	    ((q->flags & WSL_LOCK_ABOVE) != 0) != (q->nchain >= 2) ||
	    (q->nchain > 0 && f->type != WSL_LOCK))
		abort();
	for (i = 0; i < q->nchain; i++)
		if (q->chain[i].len == 0 || q->chain[i].len > WSL_MAX_KEY ||
		    q->chain[i].key < f->body || q->chain[i].key +
		    q->chain[i].len > f->body + f->bodylen)
			abort();
}

static int
same_chain(const struct wsl_lockreq *a, const struct wsl_lockreq *b)
{
	size_t	i;

	if (a->nchain != b->nchain)
		return 0;
	for (i = 0; i < a->nchain; i++)
		if (a->chain[i].len != b->chain[i].len ||
		    memcmp(a->chain[i].key, b->chain[i].key,
		    a->chain[i].len) != 0)
			return 0;
	return 1;
}

static void
check_lock_roundtrip(const struct wsl_frame *f, const struct wsl_lockreq *q)
{
	struct wsl_buf		b = { 0 };
	struct wsl_frame	g;
	struct wsl_lockreq	d;

	if (wsl_enc_lock(&b, f->type, f->id, q) < 0)
		abort();
	if (wsl_frame_decode(b.data, b.len, WSL_MAX_FRAME, &g) != (int)b.len)
		abort();
	if (wsl_dec_lock(&g, &d) < 0 || d.owner != q->owner ||
	    d.start != q->start || d.end != q->end || d.keylen != q->keylen ||
	    memcmp(d.key, q->key, q->keylen) != 0 || d.flags != q->flags ||
	    !same_chain(&d, q))
		abort();
	if (g.bodylen != f->bodylen || memcmp(g.body, f->body, g.bodylen) != 0)
		abort();
	wsl_buf_free(&b);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wsl_frame	f;
	struct wsl_hello	h;
	struct wsl_welcome	w;
	struct wsl_lockreq	q;
	struct wsl_error	e;
	struct wsl_conflict	c;
	struct wsl_revoke	v;
	struct wsl_item		it;
	struct wsl_seal		rx;
	struct wsl_frame	m;
	uint8_t			n[WSL_NONCE_LEN];
	uint64_t		u, seq = 0;
	int			len;

	if (sodium_init() < 0)
		abort();
	while ((len = wsl_frame_decode(data, size, WSL_MAX_FRAME, &f)) > 0) {
		/* Forged by construction: the MAC check must say so. */
		m = f;
		seal_init(&rx, seq);
		if (wsl_frame_open(&rx, data, &m) == 0)
			abort();
		(void)wsl_type_name(f.type);
		(void)wsl_dec_empty(&f);
		(void)wsl_dec_hello(&f, &h);
		(void)wsl_dec_nonce(&f, n);
		(void)wsl_dec_welcome(&f, &w);
		if (wsl_dec_lock(&f, &q) == 0) {
			check_chain(&f, &q);
			check_lock_roundtrip(&f, &q);
			check_sealed(&f, &q, seq, (size_t)f.id ^ size);
		}
		(void)wsl_dec_cancel(&f, &u);
		(void)wsl_dec_u64(&f, &u);
		if (wsl_dec_error(&f, &e) == 0)
			(void)wsl_err_name(e.code);
		(void)wsl_dec_conflict(&f, &c);
		(void)wsl_dec_revoke(&f, &v);
		(void)wsl_dec_item(&f, &it);
		data += len;
		size -= len;
		seq++;
	}
	return 0;
}
