/*
 * libFuzzer target for the wslockd wire codec: the input is a byte stream
 * as a connection would deliver it. Every whole frame is handed to every
 * body decoder, whatever its type, because a decoder must refuse any body
 * it was not built for without reading past it; a decoded lock request is
 * re-encoded and must decode to the same fields.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lockd.h"

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
	    memcmp(d.key, q->key, q->keylen) != 0)
		abort();
	if (g.bodylen != f->bodylen || memcmp(g.body, f->body, g.bodylen) != 0)
		abort();
	wsl_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *, size_t);

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
	uint8_t			n[WSL_NONCE_LEN];
	uint64_t		u;
	int			len;

	while ((len = wsl_frame_decode(data, size, WSL_MAX_FRAME, &f)) > 0) {
		(void)wsl_type_name(f.type);
		(void)wsl_dec_empty(&f);
		(void)wsl_dec_hello(&f, &h);
		(void)wsl_dec_nonce(&f, n);
		(void)wsl_dec_welcome(&f, &w);
		if (wsl_dec_lock(&f, &q) == 0)
			check_lock_roundtrip(&f, &q);
		(void)wsl_dec_cancel(&f, &u);
		(void)wsl_dec_u64(&f, &u);
		if (wsl_dec_error(&f, &e) == 0)
			(void)wsl_err_name(e.code);
		(void)wsl_dec_conflict(&f, &c);
		(void)wsl_dec_revoke(&f, &v);
		(void)wsl_dec_item(&f, &it);
		data += len;
		size -= len;
	}
	return 0;
}
