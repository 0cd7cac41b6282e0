/*
 * Private header of wslockd and libwslock: the lock table (table.c), the
 * server (server.c) and the state directory (state.c). The wire format is
 * in proto.h; the client library's public interface is wslock.h.
 */
#ifndef LOCKD_H
#define LOCKD_H

#include <sys/queue.h>

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

/* glibc's sys/queue.h lacks the _SAFE iterators of the BSDs. */
#ifndef TAILQ_FOREACH_SAFE
#define TAILQ_FOREACH_SAFE(var, head, field, tvar)			\
	for ((var) = TAILQ_FIRST((head));				\
	    (var) != NULL && ((tvar) = TAILQ_NEXT((var), field), 1);	\
	    (var) = (tvar))
#endif

/* table.c */
struct table;
struct table_sess;

/*
 * What the table tells its user. The callbacks run inside table calls and
 * must not call back into the table; they only queue messages.
 */
struct table_ops {
	uint64_t	(*token)(void *arg);
	void		(*grant)(void *arg, struct table_sess *, uint64_t reqid,
			    uint64_t token);
	void		(*revoke)(void *arg, struct table_sess *,
			    const uint8_t *key, size_t keylen, uint64_t owner,
			    uint64_t start, uint64_t end, uint64_t token);
};

/* One lock request; key and chain point into the caller's buffers. */
struct table_req {
	const uint8_t	*key;
	size_t		 keylen;
	uint64_t	 owner;
	uint64_t	 start;		/* [start, end), start < end */
	uint64_t	 end;
	uint8_t		 mode;		/* WSL_SHARED, WSL_EXCLUSIVE */
	uint8_t		 flags;		/* WSL_LOCK_* */
	uint64_t	 reqid;		/* answered by grant() after a wait */
	uint64_t	 token;		/* reclaim only */
	/*
	 * With WSL_LOCK_UNDER: the keys of the directories the object was
	 * reached through, parent first, nchain 1..WSL_MAX_CHAIN (see
	 * table_lock); else NULL and 0.
	 */
	const struct wsl_key *chain;
	size_t		 nchain;
};

/* A read-only view of one holder or waiter, for table_walk(). */
struct table_entry {
	int			 kind;	/* WSL_ITEM_HOLDER or WSL_ITEM_WAITER */
	struct table_sess	*sess;
	const uint8_t		*key;
	size_t			 keylen;
	uint64_t		 owner;
	uint64_t		 start;
	uint64_t		 end;
	uint8_t			 mode;
	uint8_t			 cached;
	uint64_t		 token;	/* holder: fencing token */
	uint64_t		 reqid;	/* waiter: request id */
};

struct table	*table_new(const struct table_ops *, void *, uint32_t,
		    uint32_t);
void		 table_free(struct table *);
void		 table_set_grace(struct table *, int);
int		 table_in_grace(const struct table *);
size_t		 table_nkeys(const struct table *);
struct table_sess *table_sess_new(struct table *, uint64_t, void *);
void		 table_sess_free(struct table *, struct table_sess *);
void		 table_sess_release(struct table *, struct table_sess *);
void		 table_sess_drop_waiters(struct table *, struct table_sess *);
void		 table_sess_resync_begin(struct table *, struct table_sess *);
void		 table_sess_resync_end(struct table *, struct table_sess *);
uint64_t	 table_sess_id(const struct table_sess *);
void		*table_sess_udata(const struct table_sess *);
uint32_t	 table_sess_nlocks(const struct table_sess *);
uint32_t	 table_sess_nwaiters(const struct table_sess *);
int		 table_lock(struct table *, struct table_sess *,
		    const struct table_req *, uint64_t *,
		    struct table_entry *);
int		 table_reclaim(struct table *, struct table_sess *,
		    const struct table_req *);
int		 table_insert(struct table *, struct table_sess *,
		    const struct table_req *, uint64_t);
int		 table_unlock(struct table *, struct table_sess *,
		    const struct table_req *);
int		 table_cancel(struct table *, struct table_sess *, uint64_t);
int		 table_walk(struct table *, struct table_sess *,
		    int (*)(const struct table_entry *, void *), void *);

/* state.c */
struct state;
/* Where replicas keep the state (etcd.c); each returns 0 or -errno. */
struct state_store {
	int		(*put_clients)(void *, const char *, size_t);
	int		(*next_epoch)(void *, uint32_t *);
	void		*arg;
};
int		 state_open(const char *, struct state **);
int		 state_open_store(const struct state_store *, uint32_t, char *,
		    struct state **);
void		 state_close(struct state *);
uint32_t	 state_epoch(const struct state *);
int		 state_next_epoch(struct state *);
size_t		 state_nclients(const struct state *);
int		 state_has_client(const struct state *, uint64_t);
int		 state_add_client(struct state *, uint64_t, const uint8_t *);
int		 state_client_secret(const struct state *, uint64_t, uint8_t *);
int		 state_del_client(struct state *, uint64_t);
const uint64_t	*state_clients(const struct state *);
int		 state_sync(struct state *);
uint64_t	 state_changes(const struct state *);
int		 state_take(struct state *, char **, size_t *, uint64_t *);

/* server.c */
struct etcd_conf;
struct server_conf {
	const char	**listen;	/* NULL-terminated */
	const char	 *keyfile;	/* NULL: unix sockets only */
	const char	 *statedir;
	const char	 *metrics;	/* NULL: no metrics endpoint */
	const struct etcd_conf *etcd;	/* NULL: one server, statedir */
	uint32_t	  lease_ms;
	uint32_t	  grace_ms;
	uint32_t	  max_frame;
	uint32_t	  max_locks;
	uint32_t	  max_waiters;
	uint32_t	  max_conns;
};

int		 server_run(const struct server_conf *);

/* addr.c: shared by server, client and the metrics endpoints. */
struct addr {
	int		 family;	/* AF_UNIX or AF_INET/AF_INET6 */
	char		 host[256];	/* or the unix path */
	char		 port[8];
};
/* 0 and *a set, or -EINVAL; see addr.c for the forms. */
int		 addr_parse(const char *, struct addr *);

/* auth.c: shared by server and client. */
/*
 * 0 with *key (sodium_malloc'd: the caller frees it with sodium_free)
 * and *len; -EPERM for a file others may read, -EINVAL for one that is
 * not a key, -errno if it cannot be read.
 */
int		 auth_keyfile_load(const char *, uint8_t **, size_t *);
void		 auth_mac(const uint8_t *, size_t, const char *,
		    const uint8_t *, const uint8_t *, uint64_t, uint8_t *);
void		 auth_session_keys(const uint8_t *, size_t, const uint8_t *,
		    const uint8_t *, uint64_t, uint8_t *, uint8_t *,
		    uint8_t *);
void		 auth_resume_proof(const uint8_t *, const uint8_t *, uint64_t,
		    uint8_t *);

#endif
