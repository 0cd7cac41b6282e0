/*
 * libwslock: the client library of wslockd, the wsfs cluster lock server.
 * This is its only public header.
 *
 * A handle (struct wslock) is one session with one server: one connection
 * carrying any number of requests, a lease the library renews, and the
 * locks the session holds. Locks are (key, owner, [start, end), mode):
 * keys are opaque bytes (1..1024; wsfs and wsctl spell theirs with
 * lockkey.h, e.g. "g/<SOURCE inode>/<inode>"),
 * owners are 64-bit ids with POSIX per-owner semantics (an owner's locks
 * never conflict with each other; a new lock replaces the owner's overlap,
 * so ranges split, merge, upgrade and downgrade as with fcntl(2)).
 * [0, WSLOCK_EOF) is the whole object.
 *
 * Two layers:
 *  - Asynchronous: poll wslock_fd() for POLLIN/EPOLLIN and call
 *    wslock_process() when it is readable. Requests are answered through
 *    the callbacks of struct wslock_callbacks, from inside
 *    wslock_process() and nowhere else.
 *  - Blocking: wslock_connect_wait(), wslock_lock_wait(),
 *    wslock_unlock_wait(), wslock_test_wait(), wslock_list_wait(). They
 *    drive the handle themselves if no other thread is inside
 *    wslock_process(), and otherwise wait for that thread to do it. They
 *    never run callbacks: what they receive for others is queued for the
 *    next wslock_process().
 *
 * Errors: every function returning int returns 0 (or a documented
 * non-negative value) on success and a negative errno on failure. The
 * library never aborts and never exits; allocation failure is -ENOMEM.
 *
 * Threading: every function may be called from any thread at any time,
 * except that wslock_close() must be the last call, made when no other
 * thread is inside the library. At most one thread runs wslock_process()
 * at a time (others calling it wait for it). Callbacks run only in a
 * thread inside wslock_process(), one at a time and in order, with no
 * library lock held: they may call the asynchronous functions
 * (wslock_lock, wslock_unlock, wslock_cancel, wslock_lease_left, ...) but
 * not the blocking *_wait functions nor wslock_close(). No other function
 * ever runs a callback, so a caller may hold its own mutex (one its
 * callbacks take) around wslock_lock(), wslock_cancel() or
 * wslock_unlock(): a request those finish at once (a cancel of a request
 * not sent yet) is reported by the next wslock_process(), and
 * wslock_fd() turns readable so that a poller calls it.
 *
 * Leases and clocks. The server ends a session whose client has been
 * silent for lease_ms (default 10 s), measured from when it *received* the
 * client's last message. The library measures from when it *sent* the
 * message whose reply it got last (always earlier), on CLOCK_BOOTTIME
 * (which keeps counting through suspend and SIGSTOP), and:
 *   - renews every lease/4;
 *   - reports WSLOCK_JEOPARDY through the state callback once half of the
 *     lease has gone by without a renewal (callers should stop starting
 *     new protected work), and wslock_lease_left() drops to 0 then;
 *   - declares every lock lost (lost callback, reason -ETIMEDOUT) once
 *     90 % of the lease has gone by, before the server can have expired
 *     the session, provided the two clocks' rates differ by less than
 *     10 % (NTP keeps them within 0.05 %). The remaining 10 % also covers
 *     the delay between checking the lease and acting on it.
 *   After a lease was lost the library starts a fresh session (the server
 *   frees whatever the old one still held) and never reclaims.
 *
 * How wsfs uses it (issue 5). Keys are lockkey.h's "<kind>/<SOURCE
 * inode>/<inode>". Object locks: kind 'g', owner 0, [0, WSLOCK_EOF),
 * shared or exclusive, WSLOCK_WAIT | WSLOCK_CACHED, taken once and kept;
 * wslock_held() answers "do I still hold it?" before each write without
 * a round trip; the revoke callback says another node waits, and the
 * node flushes and calls wslock_unlock(). fcntl(2) and flock(2) locks:
 * kinds 'p' and 'f' (the two do not interact, as on one machine), the
 * lock owner of the open file (or of the process) as owner and the byte
 * range as given; F_SETLK is wslock_lock() without WSLOCK_WAIT, F_SETLKW
 * with it (an interrupted wait is wslock_cancel()), F_GETLK is
 * wslock_test() (answered through the tested callback, so no thread
 * waits; wslock_test_wait() blocks), F_UNLCK is wslock_unlock().
 * `wsctl lock --workspace` takes kind 'w' with the workspace directory's
 * inode. Shared locks that only keep caches fresh (stat, lookup) can be
 * asked for with WSLOCK_QUIET, which disturbs no holder. Every grant's
 * token can fence writes on storage that understands it. The lost
 * callback and WSLOCK_JEOPARDY tell the node to stop writing under locks
 * it may no longer have.
 *
 * Reconnects. When the connection breaks the library reconnects by itself
 * (backoff 50 ms doubling to 2 s, or to 0.5 s with a list of replicas,
 * where a failed replica is followed by the next one at once), for as
 * long as the handle lives; an
 * attempt that is not through its handshake within 3 s (a SYN or HELLO
 * lost while a link was cut, a server that accepts and never answers)
 * is dropped and counts as a failure, so reconnecting never stalls. If its lease is still valid it resumes
 * the session or, when the server restarted, reclaims its locks in the
 * server's grace period; a lock it cannot get back is reported lost
 * (-ESTALE). Requests not yet answered are sent again after the reclaim.
 * Resuming takes the session's secret, which the server hands to the
 * library in the handshake and the library keeps; should the server
 * refuse it (the session ended and its client id was taken), every lock
 * is reported lost (-ENOLCK) and the library starts afresh under a new
 * client id. Over TCP every frame after the handshake carries a MAC
 * (PROTOCOL.md); a frame whose MAC fails drops the connection, and the
 * library reconnects as after any other break.
 */
#ifndef WSLOCK_H
#define WSLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "defaults.h"

#define WSLOCK_EOF		UINT64_MAX	/* end of the whole object */
#define WSLOCK_MAX_CHAIN	8	/* keys of wslock_lock_chain's chain */
#define WSLOCK_DEFAULT_PORT	WS_DEFAULT_PORT

/* Modes. */
#define WSLOCK_SHARED		1
#define WSLOCK_EXCLUSIVE	2

/* Request flags. */
#define WSLOCK_WAIT		0x01	/* queue until granted (else -EAGAIN) */
#define WSLOCK_CACHED		0x02	/* ask me (revoke) when someone waits */
/*
 * Only if free right now: never queued, never makes the server ask a
 * holder (revoke) for it; a conflict fails with -EAGAIN as without
 * WSLOCK_WAIT, which it excludes. For locks taken only to cache (shared
 * locks on stat and lookup) that must not disturb other nodes.
 */
#define WSLOCK_QUIET		0x08

/* States reported through the state callback. */
#define WSLOCK_DOWN		0	/* no connection; reconnecting */
#define WSLOCK_UP		1	/* connected, lease valid */
#define WSLOCK_JEOPARDY		2	/* lease renewal overdue */

struct wslock;

/* One key of a chain (wslock_lock_chain), 1..1024 bytes, copied. */
struct wslock_key {
	const void	*key;
	size_t		 len;
};

/* What a lock is about; key is copied, so it may be the caller's buffer. */
struct wslock_range {
	const void	*key;
	size_t		 keylen;
	uint64_t	 owner;
	uint64_t	 start;
	uint64_t	 end;		/* exclusive; WSLOCK_EOF: to the end */
};

/* A conflicting holder, as reported by wslock_test(), wslock_test_wait(). */
struct wslock_conflict {
	uint64_t	session;
	uint64_t	owner;
	uint64_t	start;
	uint64_t	end;
	int		mode;
};

/* One row of wslock_list_wait(); pointers valid during the callback. */
struct wslock_item {
	int		 kind;		/* 1 session, 2 holder, 3 waiter */
	uint64_t	 session;
	uint64_t	 client_id;	/* session */
	uint32_t	 lease_left_ms;	/* session */
	int		 connected;	/* session */
	uint64_t	 owner;
	uint64_t	 start;
	uint64_t	 end;
	uint64_t	 token;		/* holder: fencing token */
	uint64_t	 reqid;		/* waiter: its request id */
	int		 mode;
	int		 cached;
	const void	*data;		/* session: name; else the key */
	size_t		 datalen;
};

/*
 * Callbacks; any may be NULL. arg is wslock_params.arg. Key pointers are
 * valid only during the call.
 */
struct wslock_callbacks {
	/*
	 * A wslock_lock() request finished. status: 0 granted (token is the
	 * fencing token), -EAGAIN conflict without WSLOCK_WAIT, -EBUSY the
	 * server is in its grace period (try again shortly), -ECANCELED
	 * cancelled, -EDQUOT a server limit, -EINVAL refused as malformed.
	 */
	void	(*done)(struct wslock *, uint64_t reqid, int status,
		    uint64_t token, void *reqarg, void *arg);
	/* Someone waits for a lock this session holds with WSLOCK_CACHED. */
	void	(*revoke)(struct wslock *, const struct wslock_range *,
		    uint64_t token, void *arg);
	/*
	 * A lock is gone and must not be relied on: reason -ETIMEDOUT (lease
	 * lapsed), -ENOLCK (the server ended the session), -ESTALE (reclaim
	 * refused after a restart).
	 */
	void	(*lost)(struct wslock *, const struct wslock_range *, int mode,
		    uint64_t token, int reason, void *arg);
	/* Connection/lease state changed: WSLOCK_DOWN, _UP, _JEOPARDY. */
	void	(*state)(struct wslock *, int state, void *arg);
	/*
	 * A wslock_test() was answered. status: 0 the lock could be had
	 * now, 1 it could not and c names the first conflicting holder (c
	 * is NULL otherwise, and valid only during the call), -ECANCELED
	 * cancelled, or another negative errno as for done.
	 */
	void	(*tested)(struct wslock *, uint64_t reqid, int status,
		    const struct wslock_conflict *c, void *reqarg, void *arg);
};

struct wslock_params {
	/*
	 * "unix:PATH" or "HOST[:PORT]", or a comma-separated list of them:
	 * the replicas of one lock service (wslockd --etcd). The library
	 * uses one at a time; a failed connect or handshake, or a standby's
	 * "not active" refusal, moves it to the next (or to the active one
	 * the standby named), and a failover then looks like a restart of
	 * the server: the session is reclaimed in the grace period.
	 */
	const char			*addr;
	const char			*keyfile; /* needed for TCP */
	const char			*name;	/* shown by wsctl locks */
	const struct wslock_callbacks	*cb;
	void				*arg;
};

/*
 * Create a handle and start connecting (asynchronously). On success *out
 * is a handle the caller owns and frees with wslock_close(). Fails with
 * -EINVAL (bad address or parameters), -EPERM/-EINVAL/-errno (key file
 * unusable: group/other-accessible, shorter than 32 bytes, unreadable),
 * -ENOMEM, or -errno from creating descriptors. *out is untouched on
 * failure.
 */
int	wslock_open(const struct wslock_params *, struct wslock **out);

/*
 * End the session cleanly (the server frees its locks at once) waiting at
 * most 1 s for the server, and free everything. NULL is a no-op. Pending
 * requests are not reported through callbacks any more.
 */
void	wslock_close(struct wslock *);

/*
 * The descriptor to poll for input (readable when wslock_process() has
 * work, callbacks to deliver included); owned by the handle, closed by
 * wslock_close().
 */
int	wslock_fd(const struct wslock *);

/* Do everything pending without blocking. 0, or -ENOMEM. */
int	wslock_process(struct wslock *);

/*
 * Ask for a lock. On success returns 0, sets *reqid (if not NULL) and the
 * done callback follows exactly once, with reqarg, unless the handle is
 * closed first. Requests made while disconnected are sent after the
 * reconnect. -EINVAL for a bad range, key, mode or flags (WSLOCK_QUIET
 * with WSLOCK_WAIT); -ENOMEM.
 */
int	wslock_lock(struct wslock *, const struct wslock_range *, int mode,
	    int flags, void *reqarg, uint64_t *reqid);
/*
 * wslock_lock for an object reached through a chain of directories:
 * chain[0] is the lock key of the directory it was reached through, the
 * parent, and chain[1..n-1] are that directory's ancestors, nearest
 * first; n is 1..WSLOCK_MAX_CHAIN and the keys are copied. While nobody
 * holds the object's key, the request also conflicts with another
 * session's exclusive lock on the first key of the chain that has a
 * holder at all (PROTOCOL.md, "Objects under a directory's lock"). The
 * chain is kept with the request and sent again after a reconnect.
 * Returns as wslock_lock; -EINVAL also for n out of range or a NULL,
 * empty or longer than 1024 bytes key in the chain.
 */
int	wslock_lock_chain(struct wslock *, const struct wslock_range *,
	    const struct wslock_key *chain, size_t n, int mode, int flags,
	    void *reqarg, uint64_t *reqid);
/*
 * wslock_lock_chain with a chain of one: the parent alone (parentlen
 * bytes, copied).
 */
int	wslock_lock_under(struct wslock *, const struct wslock_range *,
	    const void *parent, size_t parentlen, int mode, int flags,
	    void *reqarg, uint64_t *reqid);

/*
 * Ask whether mode on the range could be granted now, without taking
 * anything (F_GETLK). On success returns 0, sets *reqid (if not NULL)
 * and the tested callback follows exactly once, with reqarg, unless the
 * handle is closed first; asked while disconnected, the question is sent
 * after the reconnect. wslock_cancel(reqid) withdraws it: tested then
 * reports -ECANCELED. -EINVAL for a bad range, key or mode or when the
 * handle has no tested callback; -ENOMEM.
 */
int	wslock_test(struct wslock *, const struct wslock_range *, int mode,
	    void *reqarg, uint64_t *reqid);

/*
 * Release [start, end) of the owner's locks on key (nothing held is not
 * an error). Takes effect locally at once; the server is told
 * asynchronously. 0, -EINVAL, -ENOMEM.
 */
int	wslock_unlock(struct wslock *, const struct wslock_range *);

/*
 * Withdraw a waiting request or an unanswered test. 0: done will report
 * -ECANCELED, or 0 if the grant crossed the cancel (the lock is then
 * held and must be unlocked); tested reports -ECANCELED. Either way from
 * a later wslock_process(), never from inside this call. -ENOENT: no
 * such unfinished request.
 */
int	wslock_cancel(struct wslock *, uint64_t reqid);

/*
 * Does this session hold [start, end) of key for owner, in mode or
 * stronger, by its own reckoning? 1 yes (and *token set if not NULL), 0
 * no. A lease in jeopardy counts as no.
 */
int	wslock_held(struct wslock *, const struct wslock_range *, int mode,
	    uint64_t *token);

/* Milliseconds of lease the caller can still rely on; 0 if none. */
int64_t	wslock_lease_left(struct wslock *);

/* This handle's session id on the server (0 before the first WELCOME). */
uint64_t wslock_session(struct wslock *);

#define WSLOCK_ERR_TEXT		64
#define WSLOCK_ADDR_TEXT	300

/* The connection's history, for status displays (wsctl status). */
struct wslock_conn_stats {
	int		state;		/* WSLOCK_DOWN, _UP or _JEOPARDY now */
	uint64_t	connects;	/* sessions set up or resumed so far */
	uint64_t	attempts;	/* connection attempts started so far */
	uint64_t	attempts_down;	/* of those, since it went down; 0 up */
	uint64_t	state_ms;	/* since it last came up or went down */
	int		last_err;	/* -errno of the last failure, 0: none */
	char		last_error[WSLOCK_ERR_TEXT]; /* that failure in
					   words, NUL-terminated; "" if none */
	char		server[WSLOCK_ADDR_TEXT]; /* the address of the list
					   in use (or tried) now */
	uint32_t	epoch;		/* the server's, at the last WELCOME */
};

/*
 * Fill *st (the caller's; the text is copied into it, nothing to free)
 * with the handle's connection statistics. The last failure stays until
 * a newer one replaces it, also once the connection is back up: e.g.
 * "handshake: no answer in time" for an attempt dropped after 3 s
 * without an answer, "connect: Connection refused". 0, or -EINVAL for a
 * NULL argument; *st is untouched on failure.
 */
int	wslock_conn_stats(struct wslock *, struct wslock_conn_stats *st);

/*
 * Blocking layer. timeout_ms < 0 waits forever. -ETIMEDOUT when the time
 * ran out (a lock wait is then cancelled; if the grant crossed the cancel
 * the lock is released again), -EINTR never.
 *
 * wslock_connect_wait: until the session is up. Fails early with the
 * reason of the last attempt when the server refuses (-EACCES wrong key
 * or uid, -EPROTO) or when it is not reachable for the whole timeout
 * (-ECONNREFUSED, -ENOENT, ...).
 */
int	wslock_connect_wait(struct wslock *, int timeout_ms);
/* Lock and wait for the answer; status as for the done callback. */
int	wslock_lock_wait(struct wslock *, const struct wslock_range *,
	    int mode, int flags, int timeout_ms, uint64_t *token);
/* Unlock and wait until the server confirmed it. */
int	wslock_unlock_wait(struct wslock *, const struct wslock_range *,
	    int timeout_ms);
/*
 * Would mode on range be granted now? 0 yes; 1 no, with the first
 * conflicting holder in *c (if not NULL). Takes nothing. The blocking
 * form of wslock_test(), which needs no callback.
 */
int	wslock_test_wait(struct wslock *, const struct wslock_range *,
	    int mode, int timeout_ms, struct wslock_conflict *c);
/* Call fn for every session, holder and waiter on the server. */
int	wslock_list_wait(struct wslock *, int timeout_ms,
	    void (*fn)(const struct wslock_item *, void *), void *arg);

#endif
