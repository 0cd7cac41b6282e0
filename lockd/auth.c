/*
 * What the handshake proves and the frames are signed with (PROTOCOL.md,
 * "Authentication"): the cluster key file, and the HMACs made from it,
 * shared by wslockd and libwslock.
 */
#include "config.h"

#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "lockd.h"

/*
 * Load the cluster key: any file of 32 to 4096 bytes, used as raw bytes.
 * A key others can read is no secret, so a file with any group or other
 * permission bit is refused with -EPERM; a short one with -EINVAL. The
 * caller frees *key with sodium_free().
 */
int
auth_keyfile_load(const char *path, uint8_t **key, size_t *len)
{
	struct stat	 sb;
	uint8_t		*buf = NULL;
	ssize_t		 n;
	int		 fd, r;

	if (sodium_init() < 0)
		return -ENOMEM;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -errno;
	if (fstat(fd, &sb) < 0) {
		r = -errno;
		goto out;
	}
	if (!S_ISREG(sb.st_mode)) {
		r = -EINVAL;
		goto out;
	}
	if (sb.st_mode & 077) {
		r = -EPERM;
		goto out;
	}
	if (sb.st_size < 32 || sb.st_size > 4096) {
		r = -EINVAL;
		goto out;
	}
	if ((buf = sodium_malloc(sb.st_size)) == NULL) {
		r = -ENOMEM;
		goto out;
	}
	if ((n = read(fd, buf, sb.st_size)) != sb.st_size) {
		r = n < 0 ? -errno : -EIO;
		goto out;
	}
	*key = buf;
	*len = sb.st_size;
	buf = NULL;
	r = 0;
out:
	sodium_free(buf);
	close(fd);
	return r;
}

/* A client id as it goes into a MAC: 8 bytes, big-endian. */
static void
auth_be64(uint8_t *out, uint64_t v)
{
	int	i;

	for (i = 7; i >= 0; i--) {
		out[i] = v & 0xff;
		v >>= 8;
	}
}

/*
 * HMAC-SHA256 over label (with its NUL), two nonces and the client id.
 * Distinct labels keep a proof or key made for one purpose from ever
 * serving another.
 */
void
auth_mac(const uint8_t *key, size_t keylen, const char *label,
    const uint8_t *n1, const uint8_t *n2, uint64_t client_id, uint8_t *out)
{
	crypto_auth_hmacsha256_state	st;
	uint8_t				id[8];

	auth_be64(id, client_id);
	crypto_auth_hmacsha256_init(&st, key, keylen);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)label,
	    strlen(label) + 1);
	crypto_auth_hmacsha256_update(&st, n1, WSL_NONCE_LEN);
	crypto_auth_hmacsha256_update(&st, n2, WSL_NONCE_LEN);
	crypto_auth_hmacsha256_update(&st, id, sizeof id);
	crypto_auth_hmacsha256_final(&st, out);
	sodium_memzero(&st, sizeof st);
}

/*
 * What both ends derive from the cluster key once the handshake has
 * shown they share it: the MAC keys of the two directions and the pad
 * that hides the session secret in WELCOME. The labels keep each apart
 * from the others and from the proofs; both nonces make them new for
 * every connection.
 */
void
auth_session_keys(const uint8_t *key, size_t keylen, const uint8_t *nc,
    const uint8_t *ns, uint64_t client_id, uint8_t *c2s, uint8_t *s2c,
    uint8_t *pad)
{
	auth_mac(key, keylen, WSL_LABEL_C2S, nc, ns, client_id, c2s);
	auth_mac(key, keylen, WSL_LABEL_S2C, nc, ns, client_id, s2c);
	auth_mac(key, keylen, WSL_LABEL_PAD, nc, ns, client_id, pad);
}

/*
 * Proof that the sender holds the secret of the session it names:
 * HMAC-SHA256(secret, label || client nonce || client id).
 */
void
auth_resume_proof(const uint8_t *secret, const uint8_t *nc, uint64_t client_id,
    uint8_t *out)
{
	crypto_auth_hmacsha256_state	st;
	uint8_t				id[8];

	auth_be64(id, client_id);
	crypto_auth_hmacsha256_init(&st, secret, WSL_SECRET_LEN);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)WSL_LABEL_RESUME,
	    sizeof WSL_LABEL_RESUME);
	crypto_auth_hmacsha256_update(&st, nc, WSL_NONCE_LEN);
	crypto_auth_hmacsha256_update(&st, id, sizeof id);
	crypto_auth_hmacsha256_final(&st, out);
	sodium_memzero(&st, sizeof st);
}
