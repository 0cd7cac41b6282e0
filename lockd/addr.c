/*
 * Pieces shared by wslockd and libwslock that touch the system: parsing a
 * listen/connect address, loading the cluster key file, and the HMAC used
 * by the challenge-response handshake (PROTOCOL.md, "Authentication").
 */
#include "config.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "lockd.h"

/*
 * ADDR is "unix:PATH", "HOST:PORT", "[V6ADDR]:PORT", "HOST" (default port)
 * or ":PORT" (any address, for listening).
 */
int
wsl_addr_parse(const char *s, struct wsl_addr *a)
{
	struct wsl_addr	 x;
	const char	*colon, *host, *port;
	size_t		 hostlen;
	char		*end;
	unsigned long	 p;

	memset(&x, 0, sizeof x);
	if (strncmp(s, "unix:", 5) == 0) {
		if (s[5] == '\0' || strlen(s + 5) >=
		    sizeof(((struct sockaddr_un *)0)->sun_path))
			return -EINVAL;
		x.family = AF_UNIX;
		snprintf(x.host, sizeof x.host, "%s", s + 5);
		*a = x;
		return 0;
	}
	x.family = AF_UNSPEC;
	if (s[0] == '[') {
		if ((colon = strchr(s, ']')) == NULL)
			return -EINVAL;
		host = s + 1;
		hostlen = colon - host;
		if (colon[1] == ':')
			port = colon + 2;
		else if (colon[1] == '\0')
			port = NULL;
		else
			return -EINVAL;
	} else {
		colon = strrchr(s, ':');
		if (colon != NULL && strchr(s, ':') != colon)
			return -EINVAL;	/* bare IPv6 needs brackets */
		host = s;
		hostlen = colon ? (size_t)(colon - s) : strlen(s);
		port = colon ? colon + 1 : NULL;
	}
	if (hostlen >= sizeof x.host)
		return -EINVAL;
	memcpy(x.host, host, hostlen);
	if (port == NULL)
		snprintf(x.port, sizeof x.port, "%d", WSL_DEFAULT_PORT);
	else {
		errno = 0;
		p = strtoul(port, &end, 10);
		if (*port == '\0' || *end != '\0' || errno != 0 ||
		    p > 65535)
			return -EINVAL;
		snprintf(x.port, sizeof x.port, "%lu", p);
	}
	*a = x;
	return 0;
}

/*
 * Load the cluster key: any file of 32 to 4096 bytes, used as raw bytes.
 * A key others can read is no secret, so a file with any group or other
 * permission bit is refused with -EPERM; a short one with -EINVAL. The
 * caller frees *key with sodium_free().
 */
int
wsl_keyfile_load(const char *path, uint8_t **key, size_t *len)
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
wsl_be64(uint8_t *out, uint64_t v)
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
wsl_mac(const uint8_t *key, size_t keylen, const char *label,
    const uint8_t *n1, const uint8_t *n2, uint64_t client_id, uint8_t *out)
{
	crypto_auth_hmacsha256_state	st;
	uint8_t				id[8];

	wsl_be64(id, client_id);
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
wsl_session_keys(const uint8_t *key, size_t keylen, const uint8_t *nc,
    const uint8_t *ns, uint64_t client_id, uint8_t *c2s, uint8_t *s2c,
    uint8_t *pad)
{
	wsl_mac(key, keylen, WSL_LABEL_C2S, nc, ns, client_id, c2s);
	wsl_mac(key, keylen, WSL_LABEL_S2C, nc, ns, client_id, s2c);
	wsl_mac(key, keylen, WSL_LABEL_PAD, nc, ns, client_id, pad);
}

/*
 * Proof that the sender holds the secret of the session it names:
 * HMAC-SHA256(secret, label || client nonce || client id).
 */
void
wsl_resume_proof(const uint8_t *secret, const uint8_t *nc, uint64_t client_id,
    uint8_t *out)
{
	crypto_auth_hmacsha256_state	st;
	uint8_t				id[8];

	wsl_be64(id, client_id);
	crypto_auth_hmacsha256_init(&st, secret, WSL_SECRET_LEN);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)WSL_LABEL_RESUME,
	    sizeof WSL_LABEL_RESUME);
	crypto_auth_hmacsha256_update(&st, nc, WSL_NONCE_LEN);
	crypto_auth_hmacsha256_update(&st, id, sizeof id);
	crypto_auth_hmacsha256_final(&st, out);
	sodium_memzero(&st, sizeof st);
}
