/*
 * The wslockd wire protocol: frame header, message types, field layouts,
 * error codes and limits. lockd/PROTOCOL.md is the prose specification;
 * this header is its machine-readable half and must agree with it.
 *
 * Every frame is a 16-byte header followed by a body and, on TCP once the
 * handshake is done, a 32-byte MAC; all integers are big-endian. Message
 * types are numbered in blocks of 0x100 by purpose; a retired number is
 * listed as retired and never given a new meaning.
 */
#ifndef WSL_PROTO_H
#define WSL_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include <sodium.h>

#define WSL_PROTO_VERSION	4	/* 3: no ancestor chain; 2: no LOCK
					   UNDER; 1: no MAC */
#define WSL_DEFAULT_PORT	7420

/* Header: u32 length (whole frame), u16 version, u16 type, u64 request id. */
#define WSL_HDR_LEN		16
#define WSL_MAX_FRAME		65536	/* default and hard upper bound */
#define WSL_MAX_KEY		1024
#define WSL_MAX_NAME		255
#define WSL_MAX_TEXT		512
#define WSL_MAX_CHAIN		8	/* a LOCK's chain: parent, ancestors */
#define WSL_NONCE_LEN		32
#define WSL_MAC_LEN		32	/* HMAC-SHA256 */
#define WSL_SECRET_LEN		32	/* a session's resume secret */
#define WSL_RANGE_END		UINT64_MAX	/* [0, UINT64_MAX) = whole object */

enum wsl_type {
	/* 0x01xx: session. */
	WSL_HELLO		= 0x0101,	/* C->S */
	WSL_CHALLENGE		= 0x0102,	/* S->C, TCP only */
	WSL_AUTH		= 0x0103,	/* C->S, TCP only */
	WSL_WELCOME		= 0x0104,	/* S->C */
	WSL_RENEW		= 0x0105,	/* C->S */
	WSL_BYE			= 0x0106,	/* C->S */
	WSL_RECLAIM_DONE	= 0x0107,	/* C->S */

	/* 0x02xx: lock requests, client to server. */
	WSL_LOCK		= 0x0201,
	WSL_UNLOCK		= 0x0202,
	WSL_CANCEL		= 0x0203,
	WSL_RECLAIM		= 0x0204,

	/* 0x03xx: replies, carrying the request id they answer. */
	WSL_OK			= 0x0301,
	WSL_ERROR		= 0x0302,
	WSL_QUEUED		= 0x0303,
	WSL_CONFLICT		= 0x0304,

	/* 0x04xx: server pushes. */
	WSL_GRANT		= 0x0401,	/* id of the waiting WSL_LOCK */
	WSL_REVOKE		= 0x0402,	/* id 0 */
	WSL_EXPIRED		= 0x0403,	/* id 0; the server then closes */

	/* 0x05xx: administration. */
	WSL_LIST		= 0x0501,	/* C->S */
	WSL_LIST_ITEM		= 0x0502,	/* S->C, any number */
	WSL_LIST_END		= 0x0503,	/* S->C, last */
};

/* HMAC labels (PROTOCOL.md, Handshake), each hashed with its NUL. */
#define WSL_LABEL_CLIENT	"wslock2 client"	/* AUTH proof */
#define WSL_LABEL_C2S		"wslock2 c2s"		/* MAC key C->S */
#define WSL_LABEL_S2C		"wslock2 s2c"		/* MAC key S->C */
#define WSL_LABEL_PAD		"wslock2 secret"	/* hides the secret */
#define WSL_LABEL_RESUME	"wslock2 resume"	/* HELLO proof */

/* HELLO flags. */
#define WSL_HELLO_RESUME	0x0001	/* I held locks; keep or reclaim them */

/* WELCOME flags. */
#define WSL_WELCOME_RESUMED	0x0001	/* your live session was kept */
#define WSL_WELCOME_GRACE	0x0002	/* server in grace: reclaim now */
#define WSL_WELCOME_NEW		0x0004	/* fresh session: nothing is held */

/* Lock modes. */
#define WSL_SHARED		1
#define WSL_EXCLUSIVE		2

/* LOCK and RECLAIM flags. */
#define WSL_LOCK_WAIT		0x01	/* queue instead of failing */
#define WSL_LOCK_CACHED		0x02	/* holder caches: revoke when wanted */
#define WSL_LOCK_TEST		0x04	/* only report a conflict (F_GETLK) */
#define WSL_LOCK_QUIET		0x08	/* only if free now; no queue, no revoke */
#define WSL_LOCK_UNDER		0x10	/* LOCK only: a parent key follows */
#define WSL_LOCK_ABOVE		0x20	/* with UNDER: the parent's ancestors
					   follow it */
#define WSL_LOCK_FLAGS		0x3f

/* ERROR codes: wire values, not host errno numbers. */
enum wsl_err {
	WSL_E_AGAIN		= 1,	/* conflict and no WAIT */
	WSL_E_INVAL		= 2,	/* malformed field value */
	WSL_E_LIMIT		= 3,	/* per-connection limit reached */
	WSL_E_GRACE		= 4,	/* in grace: no new try-locks */
	WSL_E_NOENT		= 5,	/* cancel: no such waiting request */
	WSL_E_STALE		= 6,	/* reclaim refused */
	WSL_E_CANCELED		= 7,	/* waiting lock cancelled */
	WSL_E_VERSION		= 8,	/* unsupported protocol version */
	WSL_E_PERM		= 9,	/* authentication failed */
	WSL_E_PROTO		= 10,	/* message not allowed now */
	WSL_E_SECRET		= 11,	/* client id of a session not proven */
	WSL_E_NOTACTIVE		= 12,	/* a standby replica; text names the
					   active one ("active is ADDR") */
};

/* LIST_ITEM kinds. */
#define WSL_ITEM_SESSION	1
#define WSL_ITEM_HOLDER		2
#define WSL_ITEM_WAITER		3

/* Decoded frame header; body points into the caller's buffer. */
struct wsl_frame {
	uint32_t	 len;
	uint16_t	 version;
	uint16_t	 type;
	uint64_t	 id;
	const uint8_t	*body;
	size_t		 bodylen;
};

struct wsl_hello {
	uint32_t	 flags;
	uint64_t	 client_id;
	uint32_t	 lease_ms;	/* 0: server default */
	uint8_t		 nonce[WSL_NONCE_LEN];
	uint8_t		 resume[WSL_MAC_LEN];	/* proof of the secret, or 0 */
	const char	*name;		/* not NUL-terminated */
	size_t		 namelen;
};

struct wsl_welcome {
	uint32_t	flags;
	uint64_t	session;
	uint32_t	lease_ms;
	uint32_t	grace_ms;	/* left; 0 outside grace */
	uint32_t	epoch;
	uint32_t	max_frame;
	uint32_t	max_locks;
	uint32_t	max_waiters;
	uint8_t		secret[WSL_SECRET_LEN];	/* masked on TCP */
};

/* A key (1..WSL_MAX_KEY bytes) in the caller's or the frame's buffer. */
struct wsl_key {
	const uint8_t	*key;
	size_t		 len;
};

/*
 * LOCK, RECLAIM (token used) and UNLOCK (mode, flags unused). A LOCK with
 * WSL_LOCK_UNDER carries the chain of directories the object was reached
 * through, nearest first: chain[0] is the parent, and with WSL_LOCK_ABOVE
 * its ancestors follow (nchain 2..WSL_MAX_CHAIN); without UNDER nchain is
 * 0. Only LOCK carries a chain: the encoder refuses one whose flags do
 * not match it and ignores it for the other types.
 */
struct wsl_lockreq {
	uint64_t	 owner;
	uint64_t	 start;
	uint64_t	 end;
	uint8_t		 mode;
	uint8_t		 flags;
	uint64_t	 token;
	const uint8_t	*key;
	size_t		 keylen;
	struct wsl_key	 chain[WSL_MAX_CHAIN];
	size_t		 nchain;
};

struct wsl_error {
	uint32_t	 code;
	const char	*text;
	size_t		 textlen;
};

struct wsl_conflict {
	uint64_t	session;
	uint64_t	owner;
	uint64_t	start;
	uint64_t	end;
	uint8_t		mode;
};

struct wsl_revoke {
	uint64_t	 owner;
	uint64_t	 start;
	uint64_t	 end;
	uint64_t	 token;
	const uint8_t	*key;
	size_t		 keylen;
};

struct wsl_item {
	uint8_t		 kind;
	uint64_t	 session;
	uint64_t	 client_id;	/* SESSION */
	uint32_t	 lease_left_ms;	/* SESSION */
	uint8_t		 connected;	/* SESSION */
	uint64_t	 owner;		/* HOLDER, WAITER */
	uint64_t	 start;
	uint64_t	 end;
	uint64_t	 token;		/* HOLDER; request id for WAITER */
	uint8_t		 mode;
	uint8_t		 flags;		/* HOLDER: WSL_LOCK_CACHED */
	const uint8_t	*data;		/* SESSION: name; others: key */
	size_t		 datalen;
};

/*
 * One direction of an authenticated connection: every frame carries
 * HMAC-SHA256(key, u64 seq || frame), seq counting that direction's
 * frames from 0. The key is kept as an HMAC state already past the key
 * (wsl_seal_init), which halves the hashing per frame.
 */
struct wsl_seal {
	crypto_auth_hmacsha256_state	 base;
	uint64_t			 seq;	/* of the next frame */
};

/*
 * A growable output buffer the encoders append frames to; with seal set,
 * every frame appended gets its MAC (the seal is the owner's and stays
 * across wsl_buf_free).
 */
struct wsl_buf {
	uint8_t			*data;
	size_t			 len;
	size_t			 cap;
	size_t			 off;	/* bytes already consumed (written) */
	struct wsl_seal		*seal;
};

/* codec.c */
void	 wsl_buf_free(struct wsl_buf *);
int	 wsl_buf_reserve(struct wsl_buf *, size_t);
void	 wsl_buf_consume(struct wsl_buf *, size_t);
size_t	 wsl_buf_pending(const struct wsl_buf *);
int	 wsl_frame_decode(const uint8_t *, size_t, size_t, struct wsl_frame *);
void	 wsl_seal_init(struct wsl_seal *, const uint8_t *);
int	 wsl_frame_open(struct wsl_seal *, const uint8_t *, struct wsl_frame *);
const char *wsl_type_name(uint16_t);
const char *wsl_err_name(uint32_t);
int	 wsl_err_to_errno(uint32_t);

int	 wsl_enc_empty(struct wsl_buf *, uint16_t, uint64_t);
int	 wsl_enc_hello(struct wsl_buf *, uint64_t, const struct wsl_hello *);
int	 wsl_enc_challenge(struct wsl_buf *, uint64_t, const uint8_t *);
int	 wsl_enc_auth(struct wsl_buf *, uint64_t, const uint8_t *);
int	 wsl_enc_welcome(struct wsl_buf *, uint64_t,
	    const struct wsl_welcome *);
int	 wsl_enc_lock(struct wsl_buf *, uint16_t, uint64_t,
	    const struct wsl_lockreq *);
int	 wsl_enc_cancel(struct wsl_buf *, uint64_t, uint64_t);
int	 wsl_enc_ok(struct wsl_buf *, uint64_t, uint64_t);
int	 wsl_enc_error(struct wsl_buf *, uint64_t, uint32_t, const char *);
int	 wsl_enc_conflict(struct wsl_buf *, uint64_t,
	    const struct wsl_conflict *);
int	 wsl_enc_grant(struct wsl_buf *, uint64_t, uint64_t);
int	 wsl_enc_revoke(struct wsl_buf *, const struct wsl_revoke *);
int	 wsl_enc_item(struct wsl_buf *, uint64_t, const struct wsl_item *);

int	 wsl_dec_empty(const struct wsl_frame *);
int	 wsl_dec_hello(const struct wsl_frame *, struct wsl_hello *);
int	 wsl_dec_nonce(const struct wsl_frame *, uint8_t *);
int	 wsl_dec_welcome(const struct wsl_frame *, struct wsl_welcome *);
int	 wsl_dec_lock(const struct wsl_frame *, struct wsl_lockreq *);
int	 wsl_dec_cancel(const struct wsl_frame *, uint64_t *);
int	 wsl_dec_u64(const struct wsl_frame *, uint64_t *);
int	 wsl_dec_error(const struct wsl_frame *, struct wsl_error *);
int	 wsl_dec_conflict(const struct wsl_frame *, struct wsl_conflict *);
int	 wsl_dec_revoke(const struct wsl_frame *, struct wsl_revoke *);
int	 wsl_dec_item(const struct wsl_frame *, struct wsl_item *);

#endif
