/*
 * Unit tests for what authenticates protocol version 2: the MAC every
 * frame carries after the handshake (codec.c: a sealed buffer appends it,
 * wsl_frame_open checks and strips it), the keys and the resume proof
 * derived in addr.c, and the session secrets the state directory keeps
 * across restarts (state.c).
 */
#include "config.h"

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

static void
seal_init(struct wsl_seal *s, uint8_t fill)
{
	uint8_t	key[WSL_MAC_LEN];

	memset(key, fill, sizeof key);
	wsl_seal_init(s, key);
}

/* A sealed buffer appends a MAC that only the matching seal accepts. */
static void
t_seal_roundtrip(void **state)
{
	struct wsl_seal		 tx, rx;
	struct wsl_buf		 b = { 0 };
	struct wsl_lockreq	 q = { 7, 0, 100, WSL_EXCLUSIVE, WSL_LOCK_WAIT,
				    0, (const uint8_t *)"key", 3,
				    { { NULL, 0 } }, 0 }, d;
	struct wsl_frame	 f;
	int			 n;

	seal_init(&tx, 1);
	seal_init(&rx, 1);
	b.seal = &tx;
	assert_int_equal(wsl_enc_ok(&b, 1, 42), 0);
	assert_int_equal(wsl_enc_lock(&b, WSL_LOCK, 2, &q), 0);
	assert_true(tx.seq == 2);
	n = wsl_frame_decode(b.data, b.len, WSL_MAX_FRAME, &f);
	assert_int_equal(n, WSL_HDR_LEN + 8 + WSL_MAC_LEN);
	assert_int_equal(f.len, n);
	assert_int_equal(wsl_frame_open(&rx, b.data, &f), 0);
	assert_int_equal(f.bodylen, 8);
	assert_true(rx.seq == 1);
	assert_int_equal(wsl_frame_decode(b.data + n, b.len - n,
	    WSL_MAX_FRAME, &f), (int)b.len - n);
	assert_int_equal(wsl_frame_open(&rx, b.data + n, &f), 0);
	assert_int_equal(wsl_dec_lock(&f, &d), 0);
	assert_true(d.owner == 7 && d.end == 100 && d.keylen == 3);
	/* The seal stays when the buffer's memory is given back. */
	wsl_buf_free(&b);
	assert_ptr_equal(b.seal, &tx);
	assert_int_equal(wsl_enc_empty(&b, WSL_RENEW, 3), 0);
	assert_int_equal(b.len, WSL_HDR_LEN + WSL_MAC_LEN);
	wsl_buf_free(&b);
}

/* Any changed byte, another sequence number or key: refused. */
static void
t_seal_refuses(void **state)
{
	struct wsl_seal		 tx, rx;
	struct wsl_buf		 b = { 0 };
	struct wsl_frame	 f;
	uint8_t			 copy[WSL_HDR_LEN + 8 + WSL_MAC_LEN];
	size_t			 i;
	int			 bit;

	seal_init(&tx, 9);
	b.seal = &tx;
	assert_int_equal(wsl_enc_grant(&b, 5, 77), 0);
	assert_int_equal(b.len, sizeof copy);
	for (i = 0; i < sizeof copy; i++) {
		for (bit = 0; bit < 8; bit++) {
			memcpy(copy, b.data, sizeof copy);
			copy[i] ^= 1 << bit;
			seal_init(&rx, 9);
			if (wsl_frame_decode(copy, sizeof copy, WSL_MAX_FRAME,
			    &f) != (int)sizeof copy)
				continue;	/* the length itself changed */
			assert_int_equal(wsl_frame_open(&rx, copy, &f),
			    -EBADMSG);
			assert_true(rx.seq == 0);
		}
	}
	/* Replayed: the receiver expects the next number. */
	seal_init(&rx, 9);
	assert_int_equal(wsl_frame_decode(b.data, b.len, WSL_MAX_FRAME, &f),
	    (int)b.len);
	assert_int_equal(wsl_frame_open(&rx, b.data, &f), 0);
	assert_int_equal(wsl_frame_decode(b.data, b.len, WSL_MAX_FRAME, &f),
	    (int)b.len);
	assert_int_equal(wsl_frame_open(&rx, b.data, &f), -EBADMSG);
	/* Another connection's key. */
	seal_init(&rx, 8);
	assert_int_equal(wsl_frame_open(&rx, b.data, &f), -EBADMSG);
	wsl_buf_free(&b);
	/* A frame too short to carry a MAC. */
	b.seal = NULL;
	assert_int_equal(wsl_enc_empty(&b, WSL_RENEW, 1), 0);
	assert_int_equal(wsl_frame_decode(b.data, b.len, WSL_MAX_FRAME, &f),
	    WSL_HDR_LEN);
	seal_init(&rx, 9);
	assert_int_equal(wsl_frame_open(&rx, b.data, &f), -EBADMSG);
	wsl_buf_free(&b);
}

/* Keys, pad and proofs depend on everything they are made from. */
static void
t_derivation(void **state)
{
	uint8_t	key[32], nc[32], ns[32], secret[32];
	uint8_t	c2s[32], s2c[32], pad[32], x[32], y[32], z[32];
	uint8_t	p1[32], p2[32];

	memset(key, 1, sizeof key);
	memset(nc, 2, sizeof nc);
	memset(ns, 3, sizeof ns);
	memset(secret, 4, sizeof secret);
	auth_session_keys(key, sizeof key, nc, ns, 9, c2s, s2c, pad);
	assert_memory_not_equal(c2s, s2c, 32);
	assert_memory_not_equal(c2s, pad, 32);
	assert_memory_not_equal(s2c, pad, 32);
	auth_session_keys(key, sizeof key, nc, ns, 9, x, y, z);
	assert_memory_equal(c2s, x, 32);
	assert_memory_equal(s2c, y, 32);
	assert_memory_equal(pad, z, 32);
	auth_session_keys(key, sizeof key, ns, nc, 9, x, y, z);
	assert_memory_not_equal(c2s, x, 32);
	auth_session_keys(key, sizeof key, nc, ns, 10, x, y, z);
	assert_memory_not_equal(c2s, x, 32);
	key[0] ^= 1;
	auth_session_keys(key, sizeof key, nc, ns, 9, x, y, z);
	assert_memory_not_equal(s2c, y, 32);
	/* Not the AUTH proof either. */
	key[0] ^= 1;
	auth_mac(key, sizeof key, WSL_LABEL_CLIENT, nc, ns, 9, x);
	assert_memory_not_equal(c2s, x, 32);

	auth_resume_proof(secret, nc, 9, p1);
	auth_resume_proof(secret, nc, 9, p2);
	assert_memory_equal(p1, p2, 32);
	auth_resume_proof(secret, ns, 9, p2);
	assert_memory_not_equal(p1, p2, 32);
	auth_resume_proof(secret, nc, 8, p2);
	assert_memory_not_equal(p1, p2, 32);
	secret[31] ^= 1;
	auth_resume_proof(secret, nc, 9, p2);
	assert_memory_not_equal(p1, p2, 32);
}

static void
write_file(const char *dir, const char *name, const char *text)
{
	char	path[256];
	int	fd;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	assert_true((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600)) >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

/* Secrets survive a restart; a list without them reads as unknown. */
static void
t_state_secrets(void **state)
{
	struct state	*st;
	char		 dir[] = "/tmp/wslock-state.XXXXXX", path[256];
	uint8_t		 s1[WSL_SECRET_LEN], s2[WSL_SECRET_LEN], out[32];
	struct stat	 sb;

	assert_non_null(mkdtemp(dir));
	memset(s1, 0x11, sizeof s1);
	memset(s2, 0xee, sizeof s2);
	assert_int_equal(state_open(dir, &st), 0);
	assert_int_equal(state_add_client(st, 0x1234, s1), 0);
	assert_int_equal(state_add_client(st, 0xffffffffffffffffULL, s2), 0);
	assert_int_equal(state_add_client(st, 0x99, s1), 0);
	assert_int_equal(state_del_client(st, 0x99), 0);
	assert_int_equal(state_sync(st), 0);
	state_close(st);
	snprintf(path, sizeof path, "%s/clients", dir);
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);

	assert_int_equal(state_open(dir, &st), 0);
	assert_int_equal(state_nclients(st), 2);
	assert_int_equal(state_client_secret(st, 0x1234, out), 0);
	assert_memory_equal(out, s1, sizeof s1);
	assert_int_equal(state_client_secret(st, 0xffffffffffffffffULL, out),
	    0);
	assert_memory_equal(out, s2, sizeof s2);
	assert_int_equal(state_client_secret(st, 0x99, out), -ENOENT);
	/* A new session of a known client replaces the secret. */
	assert_int_equal(state_add_client(st, 0x1234, s2), 0);
	assert_int_equal(state_sync(st), 0);
	state_close(st);
	assert_int_equal(state_open(dir, &st), 0);
	assert_int_equal(state_client_secret(st, 0x1234, out), 0);
	assert_memory_equal(out, s2, sizeof s2);
	state_close(st);

	/* Written before secrets existed: known clients, secrets unknown. */
	write_file(dir, "clients", "0000000000001234\n00000000000000ab\n");
	assert_int_equal(state_open(dir, &st), 0);
	assert_int_equal(state_nclients(st), 2);
	assert_true(state_has_client(st, 0xab));
	assert_int_equal(state_client_secret(st, 0xab, out), -ENOENT);
	state_close(st);
	/* Malformed secrets are refused, not half read. */
	write_file(dir, "clients", "0000000000001234 abcd\n");
	assert_int_equal(state_open(dir, &st), -EINVAL);
	write_file(dir, "clients", "0000000000001234 "
	    "zz11111111111111111111111111111111111111111111111111111111111111"
	    "\n");
	assert_int_equal(state_open(dir, &st), -EINVAL);

	snprintf(path, sizeof path, "%s/clients", dir);
	unlink(path);
	snprintf(path, sizeof path, "%s/epoch", dir);
	unlink(path);
	rmdir(dir);
}

UNIT_MAIN(sodium_init() >= 0, NULL, NULL,
    cmocka_unit_test(t_seal_roundtrip),
    cmocka_unit_test(t_seal_refuses),
    cmocka_unit_test(t_derivation),
    cmocka_unit_test(t_state_secrets))
