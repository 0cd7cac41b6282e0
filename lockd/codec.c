/*
 * Frame codec for the wslockd protocol (see PROTOCOL.md and proto.h). Pure
 * code, shared by the server, the client library and the fuzz target:
 * encoders append whole frames to a wsl_buf (and their MAC when the buffer
 * has a seal), decoders check every length against the received frame
 * before they read a byte of it and return -EBADMSG for anything
 * malformed; wsl_frame_open() checks and strips a received frame's MAC.
 * Nothing here does I/O.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "proto.h"

/* Reading cursor over one frame body; a short read sets err. */
struct rd {
	const uint8_t	*p;
	size_t		 left;
	int		 err;
};

static void
rd_init(struct rd *r, const struct wsl_frame *f)
{
	r->p = f->body;
	r->left = f->bodylen;
	r->err = 0;
}

static const uint8_t *
rd_bytes(struct rd *r, size_t n)
{
	const uint8_t	*p;

	if (r->err || r->left < n) {
		r->err = 1;
		return NULL;
	}
	p = r->p;
	r->p += n;
	r->left -= n;
	return p;
}

static uint64_t
rd_be(struct rd *r, size_t n)
{
	const uint8_t	*p;
	uint64_t	 v = 0;
	size_t		 i;

	if ((p = rd_bytes(r, n)) == NULL)
		return 0;
	for (i = 0; i < n; i++)
		v = (v << 8) | p[i];
	return v;
}

#define rd_u8(r)	((uint8_t)rd_be((r), 1))
#define rd_u16(r)	((uint16_t)rd_be((r), 2))
#define rd_u32(r)	((uint32_t)rd_be((r), 4))
#define rd_u64(r)	rd_be((r), 8)

/* A decoder succeeds only if it consumed the body exactly. */
static int
rd_end(const struct rd *r)
{
	return (r->err || r->left != 0) ? -EBADMSG : 0;
}

static void
put_be(uint8_t *p, uint64_t v, size_t n)
{
	while (n-- > 0) {
		p[n] = v & 0xff;
		v >>= 8;
	}
}

void
wsl_buf_free(struct wsl_buf *b)
{
	struct wsl_seal	*seal = b->seal;

	free(b->data);
	memset(b, 0, sizeof *b);
	b->seal = seal;
}

int
wsl_buf_reserve(struct wsl_buf *b, size_t n)
{
	uint8_t	*p;
	size_t	 cap;

	/* Reclaim consumed space first so a long-lived buffer stays small. */
	if (b->off > 0 && (b->off == b->len || b->len + n > b->cap)) {
		memmove(b->data, b->data + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
	}
	if (b->len + n <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 4096;
	while (cap < b->len + n) {
		if (cap > SIZE_MAX / 2)
			return -ENOMEM;
		cap *= 2;
	}
	if ((p = realloc(b->data, cap)) == NULL)
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

void
wsl_buf_consume(struct wsl_buf *b, size_t n)
{
	b->off += n;
	if (b->off >= b->len)
		b->off = b->len = 0;
}

size_t
wsl_buf_pending(const struct wsl_buf *b)
{
	return b->len - b->off;
}

/* Frame builder: reserve room for header + body, fill, then commit. */
struct wr {
	struct wsl_buf	*b;
	uint8_t		*start;
	uint8_t		*p;
};

static int
wr_begin(struct wr *w, struct wsl_buf *b, uint16_t type, uint64_t id,
    size_t bodylen)
{
	size_t	len = WSL_HDR_LEN + bodylen + (b->seal ? WSL_MAC_LEN : 0);
	int	r;

	if (len > WSL_MAX_FRAME)
		return -EMSGSIZE;
	if ((r = wsl_buf_reserve(b, len)) < 0)
		return r;
	w->b = b;
	w->start = w->p = b->data + b->len;
	put_be(w->p, len, 4);
	put_be(w->p + 4, WSL_PROTO_VERSION, 2);
	put_be(w->p + 6, type, 2);
	put_be(w->p + 8, id, 8);
	w->p += WSL_HDR_LEN;
	return 0;
}

static void
wr_be(struct wr *w, uint64_t v, size_t n)
{
	put_be(w->p, v, n);
	w->p += n;
}

static void
wr_bytes(struct wr *w, const void *d, size_t n)
{
	if (n > 0)
		memcpy(w->p, d, n);
	w->p += n;
}

/* A seal for the frames of one direction, from its 32-byte key. */
void
wsl_seal_init(struct wsl_seal *s, const uint8_t *key)
{
	crypto_auth_hmacsha256_init(&s->base, key, WSL_MAC_LEN);
	s->seq = 0;
}

/* HMAC-SHA256(key, u64 seq || frame): the MAC of one frame. */
static void
frame_mac(const struct wsl_seal *s, const uint8_t *frame, size_t len,
    uint8_t *out)
{
	crypto_auth_hmacsha256_state	st = s->base;
	uint8_t				seq[8];

	put_be(seq, s->seq, 8);
	crypto_auth_hmacsha256_update(&st, seq, sizeof seq);
	crypto_auth_hmacsha256_update(&st, frame, len);
	crypto_auth_hmacsha256_final(&st, out);
	sodium_memzero(&st, sizeof st);
}

static int
wr_commit(struct wr *w)
{
	struct wsl_seal	*s = w->b->seal;

	if (s != NULL) {
		frame_mac(s, w->start, w->p - w->start, w->p);
		w->p += WSL_MAC_LEN;
		s->seq++;
	}
	w->b->len += w->p - w->start;
	return 0;
}

/*
 * Check the MAC that ends the frame f decoded from buf (its whole frame)
 * against the next sequence number of s, and take it off the body. 0, or
 * -EBADMSG for a frame too short to carry one or a MAC that does not
 * match: forged, replayed, reordered or from another connection.
 */
int
wsl_frame_open(struct wsl_seal *s, const uint8_t *buf, struct wsl_frame *f)
{
	uint8_t	want[WSL_MAC_LEN];
	int	r;

	if (f->bodylen < WSL_MAC_LEN)
		return -EBADMSG;
	frame_mac(s, buf, f->len - WSL_MAC_LEN, want);
	r = sodium_memcmp(want, buf + f->len - WSL_MAC_LEN, WSL_MAC_LEN);
	sodium_memzero(want, sizeof want);
	if (r != 0)
		return -EBADMSG;
	s->seq++;
	f->bodylen -= WSL_MAC_LEN;
	return 0;
}

/*
 * Decode the frame header at the start of buf. Returns the frame length
 * when a whole frame is present, 0 when more bytes are needed, -EMSGSIZE
 * for a frame longer than maxframe, -EBADMSG for a length shorter than the
 * header and -EPROTONOSUPPORT for another protocol version.
 */
int
wsl_frame_decode(const uint8_t *buf, size_t len, size_t maxframe,
    struct wsl_frame *f)
{
	struct wsl_frame	fr;
	size_t			i;

	if (len < 4)
		return 0;
	fr.len = 0;
	for (i = 0; i < 4; i++)
		fr.len = (fr.len << 8) | buf[i];
	if (fr.len < WSL_HDR_LEN)
		return -EBADMSG;
	if (fr.len > maxframe || fr.len > WSL_MAX_FRAME)
		return -EMSGSIZE;
	if (len < WSL_HDR_LEN)
		return 0;
	fr.version = (buf[4] << 8) | buf[5];
	if (fr.version != WSL_PROTO_VERSION)
		return -EPROTONOSUPPORT;
	if (len < fr.len)
		return 0;
	fr.type = (buf[6] << 8) | buf[7];
	fr.id = 0;
	for (i = 8; i < 16; i++)
		fr.id = (fr.id << 8) | buf[i];
	fr.body = buf + WSL_HDR_LEN;
	fr.bodylen = fr.len - WSL_HDR_LEN;
	*f = fr;
	return (int)fr.len;
}

static const struct {
	uint16_t	 type;
	const char	*name;
} wsl_type_names[] = {
	{ WSL_HELLO, "HELLO" },
	{ WSL_CHALLENGE, "CHALLENGE" },
	{ WSL_AUTH, "AUTH" },
	{ WSL_WELCOME, "WELCOME" },
	{ WSL_RENEW, "RENEW" },
	{ WSL_BYE, "BYE" },
	{ WSL_RECLAIM_DONE, "RECLAIM_DONE" },
	{ WSL_LOCK, "LOCK" },
	{ WSL_UNLOCK, "UNLOCK" },
	{ WSL_CANCEL, "CANCEL" },
	{ WSL_RECLAIM, "RECLAIM" },
	{ WSL_OK, "OK" },
	{ WSL_ERROR, "ERROR" },
	{ WSL_QUEUED, "QUEUED" },
	{ WSL_CONFLICT, "CONFLICT" },
	{ WSL_GRANT, "GRANT" },
	{ WSL_REVOKE, "REVOKE" },
	{ WSL_EXPIRED, "EXPIRED" },
	{ WSL_LIST, "LIST" },
	{ WSL_LIST_ITEM, "LIST_ITEM" },
	{ WSL_LIST_END, "LIST_END" },
};

const char *
wsl_type_name(uint16_t type)
{
	size_t	i;

	for (i = 0; i < sizeof wsl_type_names / sizeof wsl_type_names[0]; i++)
		if (wsl_type_names[i].type == type)
			return wsl_type_names[i].name;
	return "unknown";
}

static const struct {
	uint32_t	 code;
	int		 err;
	const char	*name;
} wsl_errs[] = {
	{ WSL_E_AGAIN, EAGAIN, "conflict" },
	{ WSL_E_INVAL, EINVAL, "invalid argument" },
	{ WSL_E_LIMIT, EDQUOT, "per-connection limit reached" },
	{ WSL_E_GRACE, EBUSY, "server in grace period" },
	{ WSL_E_NOENT, ENOENT, "no such waiting request" },
	{ WSL_E_STALE, ESTALE, "reclaim refused" },
	{ WSL_E_CANCELED, ECANCELED, "cancelled" },
	{ WSL_E_VERSION, EPROTONOSUPPORT, "unsupported protocol version" },
	{ WSL_E_PERM, EACCES, "authentication failed" },
	{ WSL_E_PROTO, EPROTO, "message not allowed now" },
	{ WSL_E_SECRET, EKEYREJECTED, "session secret not proven" },
	{ WSL_E_NOTACTIVE, EREMCHG, "not the active replica" },
};

const char *
wsl_err_name(uint32_t code)
{
	size_t	i;

	for (i = 0; i < sizeof wsl_errs / sizeof wsl_errs[0]; i++)
		if (wsl_errs[i].code == code)
			return wsl_errs[i].name;
	return "unknown error";
}

/* Map a wire error code to a negative errno for library callers. */
int
wsl_err_to_errno(uint32_t code)
{
	size_t	i;

	for (i = 0; i < sizeof wsl_errs / sizeof wsl_errs[0]; i++)
		if (wsl_errs[i].code == code)
			return -wsl_errs[i].err;
	return -EPROTO;
}

int
wsl_enc_empty(struct wsl_buf *b, uint16_t type, uint64_t id)
{
	struct wr	w;
	int		r;

	if ((r = wr_begin(&w, b, type, id, 0)) < 0)
		return r;
	return wr_commit(&w);
}

int
wsl_enc_hello(struct wsl_buf *b, uint64_t id, const struct wsl_hello *h)
{
	struct wr	w;
	int		r;

	if (h->namelen > WSL_MAX_NAME)
		return -EINVAL;
	if ((r = wr_begin(&w, b, WSL_HELLO, id,
	    4 + 8 + 4 + WSL_NONCE_LEN + WSL_MAC_LEN + 2 + h->namelen)) < 0)
		return r;
	wr_be(&w, h->flags, 4);
	wr_be(&w, h->client_id, 8);
	wr_be(&w, h->lease_ms, 4);
	wr_bytes(&w, h->nonce, WSL_NONCE_LEN);
	wr_bytes(&w, h->resume, WSL_MAC_LEN);
	wr_be(&w, h->namelen, 2);
	wr_bytes(&w, h->name, h->namelen);
	return wr_commit(&w);
}

int
wsl_enc_challenge(struct wsl_buf *b, uint64_t id, const uint8_t *nonce)
{
	struct wr	w;
	int		r;

	if ((r = wr_begin(&w, b, WSL_CHALLENGE, id, WSL_NONCE_LEN)) < 0)
		return r;
	wr_bytes(&w, nonce, WSL_NONCE_LEN);
	return wr_commit(&w);
}

int
wsl_enc_auth(struct wsl_buf *b, uint64_t id, const uint8_t *mac)
{
	struct wr	w;
	int		r;

	if ((r = wr_begin(&w, b, WSL_AUTH, id, WSL_MAC_LEN)) < 0)
		return r;
	wr_bytes(&w, mac, WSL_MAC_LEN);
	return wr_commit(&w);
}

int
wsl_enc_welcome(struct wsl_buf *b, uint64_t id, const struct wsl_welcome *wl)
{
	struct wr	w;
	int		r;

	if ((r = wr_begin(&w, b, WSL_WELCOME, id,
	    4 * 7 + 8 + WSL_SECRET_LEN)) < 0)
		return r;
	wr_be(&w, wl->flags, 4);
	wr_be(&w, wl->session, 8);
	wr_be(&w, wl->lease_ms, 4);
	wr_be(&w, wl->grace_ms, 4);
	wr_be(&w, wl->epoch, 4);
	wr_be(&w, wl->max_frame, 4);
	wr_be(&w, wl->max_locks, 4);
	wr_be(&w, wl->max_waiters, 4);
	wr_bytes(&w, wl->secret, WSL_SECRET_LEN);
	return wr_commit(&w);
}

/*
 * The chain a LOCK carries must match its flags: UNDER for a parent,
 * ABOVE for ancestors after it. 0 and *len the bytes it takes, or
 * -EINVAL.
 */
static int
chain_check(const struct wsl_lockreq *q, size_t *len)
{
	size_t	i, n = 0;
	int	under = (q->flags & WSL_LOCK_UNDER) != 0;
	int	above = (q->flags & WSL_LOCK_ABOVE) != 0;

	if (q->nchain > WSL_MAX_CHAIN || under != (q->nchain >= 1) ||
	    above != (q->nchain >= 2))
		return -EINVAL;
	for (i = 0; i < q->nchain; i++) {
		if (q->chain[i].key == NULL || q->chain[i].len == 0 ||
		    q->chain[i].len > WSL_MAX_KEY)
			return -EINVAL;
		n += 2 + q->chain[i].len;
	}
	if (above)
		n += 1;
	*len = n;
	return 0;
}

/* LOCK and RECLAIM carry mode, flags (and RECLAIM a token); UNLOCK not. */
int
wsl_enc_lock(struct wsl_buf *b, uint16_t type, uint64_t id,
    const struct wsl_lockreq *q)
{
	struct wr	w;
	size_t		len, clen = 0, i;
	int		r;

	if (q->keylen == 0 || q->keylen > WSL_MAX_KEY || q->start >= q->end)
		return -EINVAL;
	switch (type) {
	case WSL_LOCK:
		if ((r = chain_check(q, &clen)) < 0)
			return r;
		len = 8 * 3 + 2 + 2 + q->keylen + clen;
		break;
	case WSL_RECLAIM:
		len = 8 * 3 + 2 + 8 + 2 + q->keylen;
		break;
	case WSL_UNLOCK:
		len = 8 * 3 + 2 + q->keylen;
		break;
	default:
		return -EINVAL;
	}
	if ((r = wr_begin(&w, b, type, id, len)) < 0)
		return r;
	wr_be(&w, q->owner, 8);
	wr_be(&w, q->start, 8);
	wr_be(&w, q->end, 8);
	if (type != WSL_UNLOCK) {
		wr_be(&w, q->mode, 1);
		wr_be(&w, q->flags, 1);
	}
	if (type == WSL_RECLAIM)
		wr_be(&w, q->token, 8);
	wr_be(&w, q->keylen, 2);
	wr_bytes(&w, q->key, q->keylen);
	if (clen > 0) {
		wr_be(&w, q->chain[0].len, 2);
		wr_bytes(&w, q->chain[0].key, q->chain[0].len);
		if (q->nchain > 1)
			wr_be(&w, q->nchain - 1, 1);
		for (i = 1; i < q->nchain; i++) {
			wr_be(&w, q->chain[i].len, 2);
			wr_bytes(&w, q->chain[i].key, q->chain[i].len);
		}
	}
	return wr_commit(&w);
}

int
wsl_enc_cancel(struct wsl_buf *b, uint64_t id, uint64_t target)
{
	struct wr	w;
	int		r;

	if ((r = wr_begin(&w, b, WSL_CANCEL, id, 8)) < 0)
		return r;
	wr_be(&w, target, 8);
	return wr_commit(&w);
}

static int
enc_u64(struct wsl_buf *b, uint16_t type, uint64_t id, uint64_t v)
{
	struct wr	w;
	int		r;

	if ((r = wr_begin(&w, b, type, id, 8)) < 0)
		return r;
	wr_be(&w, v, 8);
	return wr_commit(&w);
}

int
wsl_enc_ok(struct wsl_buf *b, uint64_t id, uint64_t token)
{
	return enc_u64(b, WSL_OK, id, token);
}

int
wsl_enc_grant(struct wsl_buf *b, uint64_t id, uint64_t token)
{
	return enc_u64(b, WSL_GRANT, id, token);
}

int
wsl_enc_error(struct wsl_buf *b, uint64_t id, uint32_t code, const char *text)
{
	struct wr	w;
	size_t		len = text ? strlen(text) : 0;
	int		r;

	if (len > WSL_MAX_TEXT)
		len = WSL_MAX_TEXT;
	if ((r = wr_begin(&w, b, WSL_ERROR, id, 4 + 2 + len)) < 0)
		return r;
	wr_be(&w, code, 4);
	wr_be(&w, len, 2);
	wr_bytes(&w, text, len);
	return wr_commit(&w);
}

int
wsl_enc_conflict(struct wsl_buf *b, uint64_t id, const struct wsl_conflict *c)
{
	struct wr	w;
	int		r;

	if ((r = wr_begin(&w, b, WSL_CONFLICT, id, 8 * 4 + 1)) < 0)
		return r;
	wr_be(&w, c->session, 8);
	wr_be(&w, c->owner, 8);
	wr_be(&w, c->start, 8);
	wr_be(&w, c->end, 8);
	wr_be(&w, c->mode, 1);
	return wr_commit(&w);
}

int
wsl_enc_revoke(struct wsl_buf *b, const struct wsl_revoke *v)
{
	struct wr	w;
	int		r;

	if (v->keylen == 0 || v->keylen > WSL_MAX_KEY)
		return -EINVAL;
	if ((r = wr_begin(&w, b, WSL_REVOKE, 0, 8 * 4 + 2 + v->keylen)) < 0)
		return r;
	wr_be(&w, v->owner, 8);
	wr_be(&w, v->start, 8);
	wr_be(&w, v->end, 8);
	wr_be(&w, v->token, 8);
	wr_be(&w, v->keylen, 2);
	wr_bytes(&w, v->key, v->keylen);
	return wr_commit(&w);
}

int
wsl_enc_item(struct wsl_buf *b, uint64_t id, const struct wsl_item *it)
{
	struct wr	w;
	int		r;

	if (it->datalen > WSL_MAX_KEY)
		return -EINVAL;
	if ((r = wr_begin(&w, b, WSL_LIST_ITEM, id,
	    1 + 8 * 6 + 4 + 1 + 1 + 1 + 2 + it->datalen)) < 0)
		return r;
	wr_be(&w, it->kind, 1);
	wr_be(&w, it->session, 8);
	wr_be(&w, it->client_id, 8);
	wr_be(&w, it->lease_left_ms, 4);
	wr_be(&w, it->connected, 1);
	wr_be(&w, it->owner, 8);
	wr_be(&w, it->start, 8);
	wr_be(&w, it->end, 8);
	wr_be(&w, it->token, 8);
	wr_be(&w, it->mode, 1);
	wr_be(&w, it->flags, 1);
	wr_be(&w, it->datalen, 2);
	wr_bytes(&w, it->data, it->datalen);
	return wr_commit(&w);
}

int
wsl_dec_empty(const struct wsl_frame *f)
{
	return f->bodylen == 0 ? 0 : -EBADMSG;
}

int
wsl_dec_hello(const struct wsl_frame *f, struct wsl_hello *h)
{
	struct wsl_hello	 x;
	struct rd		 r;
	const uint8_t		*p;

	rd_init(&r, f);
	x.flags = rd_u32(&r);
	x.client_id = rd_u64(&r);
	x.lease_ms = rd_u32(&r);
	if ((p = rd_bytes(&r, WSL_NONCE_LEN)) != NULL)
		memcpy(x.nonce, p, WSL_NONCE_LEN);
	if ((p = rd_bytes(&r, WSL_MAC_LEN)) != NULL)
		memcpy(x.resume, p, WSL_MAC_LEN);
	x.namelen = rd_u16(&r);
	if (x.namelen > WSL_MAX_NAME)
		return -EBADMSG;
	x.name = (const char *)rd_bytes(&r, x.namelen);
	if (rd_end(&r) < 0 || (x.flags & ~WSL_HELLO_RESUME) != 0)
		return -EBADMSG;
	*h = x;
	return 0;
}

/* CHALLENGE carries a nonce, AUTH a MAC: both 32 opaque bytes. */
int
wsl_dec_nonce(const struct wsl_frame *f, uint8_t *out)
{
	struct rd	 r;
	const uint8_t	*p;

	rd_init(&r, f);
	p = rd_bytes(&r, WSL_NONCE_LEN);
	if (rd_end(&r) < 0)
		return -EBADMSG;
	memcpy(out, p, WSL_NONCE_LEN);
	return 0;
}

int
wsl_dec_welcome(const struct wsl_frame *f, struct wsl_welcome *wl)
{
	struct wsl_welcome	 x;
	struct rd		 r;
	const uint8_t		*p;

	rd_init(&r, f);
	x.flags = rd_u32(&r);
	x.session = rd_u64(&r);
	x.lease_ms = rd_u32(&r);
	x.grace_ms = rd_u32(&r);
	x.epoch = rd_u32(&r);
	x.max_frame = rd_u32(&r);
	x.max_locks = rd_u32(&r);
	x.max_waiters = rd_u32(&r);
	if ((p = rd_bytes(&r, WSL_SECRET_LEN)) != NULL)
		memcpy(x.secret, p, WSL_SECRET_LEN);
	if (rd_end(&r) < 0 || x.lease_ms == 0 || x.max_frame < 256)
		return -EBADMSG;
	*wl = x;
	return 0;
}

/* A key of a LOCK's chain: u16 length 1..WSL_MAX_KEY, key; else err. */
static void
rd_key(struct rd *r, struct wsl_key *k)
{
	size_t	len = rd_u16(r);

	if (len == 0 || len > WSL_MAX_KEY) {
		r->err = 1;
		return;
	}
	k->key = rd_bytes(r, len);
	k->len = len;
}

/* Decodes LOCK, RECLAIM and UNLOCK, by the frame's type. */
int
wsl_dec_lock(const struct wsl_frame *f, struct wsl_lockreq *q)
{
	struct wsl_lockreq	x;
	struct rd		r;
	size_t			i, n;

	memset(&x, 0, sizeof x);
	rd_init(&r, f);
	x.owner = rd_u64(&r);
	x.start = rd_u64(&r);
	x.end = rd_u64(&r);
	if (f->type == WSL_LOCK || f->type == WSL_RECLAIM) {
		x.mode = rd_u8(&r);
		x.flags = rd_u8(&r);
		if (x.mode != WSL_SHARED && x.mode != WSL_EXCLUSIVE)
			return -EBADMSG;
		if ((x.flags & ~WSL_LOCK_FLAGS) != 0)
			return -EBADMSG;
		/* QUIET never queues; a test never disturbs anyone anyway. */
		if ((x.flags & WSL_LOCK_QUIET) &&
		    (x.flags & (WSL_LOCK_WAIT | WSL_LOCK_TEST)))
			return -EBADMSG;
		/* Ancestors come only after a parent. */
		if ((x.flags & WSL_LOCK_ABOVE) && !(x.flags & WSL_LOCK_UNDER))
			return -EBADMSG;
	} else if (f->type != WSL_UNLOCK)
		return -EBADMSG;
	if (f->type == WSL_RECLAIM) {
		x.token = rd_u64(&r);
		if (x.flags & (WSL_LOCK_WAIT | WSL_LOCK_TEST | WSL_LOCK_QUIET |
		    WSL_LOCK_UNDER | WSL_LOCK_ABOVE))
			return -EBADMSG;
	}
	x.keylen = rd_u16(&r);
	if (x.keylen == 0 || x.keylen > WSL_MAX_KEY)
		return -EBADMSG;
	x.key = rd_bytes(&r, x.keylen);
	if (x.flags & WSL_LOCK_UNDER) {
		/* The parent, then (ABOVE) u8 n and n ancestors above it. */
		rd_key(&r, &x.chain[0]);
		n = 1;
		if (x.flags & WSL_LOCK_ABOVE) {
			n += rd_u8(&r);
			if (n < 2 || n > WSL_MAX_CHAIN)
				r.err = 1;
		}
		for (i = 1; i < n && !r.err; i++)
			rd_key(&r, &x.chain[i]);
		x.nchain = n;
	}
	if (rd_end(&r) < 0 || x.start >= x.end)
		return -EBADMSG;
	*q = x;
	return 0;
}

int
wsl_dec_cancel(const struct wsl_frame *f, uint64_t *target)
{
	return wsl_dec_u64(f, target);
}

/* OK and GRANT: one u64 (the fencing token, 0 when none applies). */
int
wsl_dec_u64(const struct wsl_frame *f, uint64_t *v)
{
	struct rd	r;
	uint64_t	x;

	rd_init(&r, f);
	x = rd_u64(&r);
	if (rd_end(&r) < 0)
		return -EBADMSG;
	*v = x;
	return 0;
}

int
wsl_dec_error(const struct wsl_frame *f, struct wsl_error *e)
{
	struct wsl_error	x;
	struct rd		r;

	rd_init(&r, f);
	x.code = rd_u32(&r);
	x.textlen = rd_u16(&r);
	if (x.textlen > WSL_MAX_TEXT)
		return -EBADMSG;
	x.text = (const char *)rd_bytes(&r, x.textlen);
	if (rd_end(&r) < 0)
		return -EBADMSG;
	*e = x;
	return 0;
}

int
wsl_dec_conflict(const struct wsl_frame *f, struct wsl_conflict *c)
{
	struct wsl_conflict	x;
	struct rd		r;

	rd_init(&r, f);
	x.session = rd_u64(&r);
	x.owner = rd_u64(&r);
	x.start = rd_u64(&r);
	x.end = rd_u64(&r);
	x.mode = rd_u8(&r);
	if (rd_end(&r) < 0)
		return -EBADMSG;
	*c = x;
	return 0;
}

int
wsl_dec_revoke(const struct wsl_frame *f, struct wsl_revoke *v)
{
	struct wsl_revoke	x;
	struct rd		r;

	rd_init(&r, f);
	x.owner = rd_u64(&r);
	x.start = rd_u64(&r);
	x.end = rd_u64(&r);
	x.token = rd_u64(&r);
	x.keylen = rd_u16(&r);
	if (x.keylen == 0 || x.keylen > WSL_MAX_KEY)
		return -EBADMSG;
	x.key = rd_bytes(&r, x.keylen);
	if (rd_end(&r) < 0 || x.start >= x.end)
		return -EBADMSG;
	*v = x;
	return 0;
}

int
wsl_dec_item(const struct wsl_frame *f, struct wsl_item *it)
{
	struct wsl_item	x;
	struct rd	r;

	rd_init(&r, f);
	x.kind = rd_u8(&r);
	x.session = rd_u64(&r);
	x.client_id = rd_u64(&r);
	x.lease_left_ms = rd_u32(&r);
	x.connected = rd_u8(&r);
	x.owner = rd_u64(&r);
	x.start = rd_u64(&r);
	x.end = rd_u64(&r);
	x.token = rd_u64(&r);
	x.mode = rd_u8(&r);
	x.flags = rd_u8(&r);
	x.datalen = rd_u16(&r);
	if (x.datalen > WSL_MAX_KEY)
		return -EBADMSG;
	x.data = rd_bytes(&r, x.datalen);
	if (rd_end(&r) < 0)
		return -EBADMSG;
	if (x.kind < WSL_ITEM_SESSION || x.kind > WSL_ITEM_WAITER)
		return -EBADMSG;
	*it = x;
	return 0;
}
