/*
 * wslockd's replication on etcd (wslockd --etcd): the election of the
 * active replica on an etcd lease, and the facts every replica must share
 * (epoch, known clients) kept in etcd. etcd.c talks to the v3 JSON
 * gateway with libcurl; etcdjson.c builds and parses its JSON.
 */
#ifndef LOCKD_ETCD_H
#define LOCKD_ETCD_H

#include <stddef.h>
#include <stdint.h>

/* etcdjson.c */
struct etcdj_kv {
	int		 found;
	int64_t		 create_rev;
	int64_t		 mod_rev;
	int64_t		 lease;
	char		*value;		/* NUL-terminated, owned */
	size_t		 len;
};

struct etcdj_cmp {
	const char	*key;
	int		 mod;		/* 1: mod_revision, 0: create_revision */
	int64_t		 rev;
};

char	*etcdj_b64(const void *, size_t);
int	 etcdj_lease(const char *, size_t, int64_t *, int64_t *, char *,
	    size_t);
int	 etcdj_txn(const char *, size_t, int *, int64_t *, char *, size_t);
int	 etcdj_range(const char *, size_t, struct etcdj_kv *, char *, size_t);
void	 etcdj_kv_free(struct etcdj_kv *);
char	*etcdj_req_lease(int64_t, int64_t);
char	*etcdj_req_range(const char *);
char	*etcdj_req_txn(const struct etcdj_cmp *, size_t, const char *,
	    const void *, size_t, int64_t);

/* etcd.c */
struct etcd_conf {
	const char	*endpoints;	/* "http://h:p,http://h:p" */
	const char	*prefix;	/* key prefix, e.g. "/wslockd/" */
	const char	*advertise;	/* what clients are told, HOST:PORT */
	const char	*ca;		/* TLS: CA file, client cert and key */
	const char	*cert;
	const char	*key;
	uint32_t	 ttl_s;		/* of the election lease */
};

/* What the main loop learns from the election thread. */
struct etcd_view {
	uint64_t	 term;		/* won terms so far; 0: never */
	int		 active;	/* this term is ours and not over */
	uint64_t	 valid_until;	/* ms, CLOCK_BOOTTIME: may serve until */
	uint32_t	 epoch;		/* of the term, bumped in etcd */
	char		*clients;	/* known clients as the term began */
	char		 leader[256];	/* the active replica, "" unknown */
	int		 healthy;	/* the last etcd request succeeded */
	uint64_t	 failures;	/* etcd requests failed so far */
};

struct etcd;

int	 etcd_start(const struct etcd_conf *, struct etcd **);
void	 etcd_stop(struct etcd *);
int	 etcd_fd(const struct etcd *);
void	 etcd_view(struct etcd *, struct etcd_view *);
void	 etcd_resign(struct etcd *, uint64_t);
void	 etcd_health(struct etcd *, uint64_t *, uint64_t *);
int	 etcd_put_clients(struct etcd *, const char *, size_t);
int	 etcd_put_start(struct etcd *, char *, size_t, uint64_t);
int	 etcd_put_done(struct etcd *, uint64_t *, int *);
int	 etcd_put_fd(const struct etcd *);
int	 etcd_next_epoch(struct etcd *, uint32_t *);

#endif
