/*
 * The default paths and port that wsfs, wslockd and wsctl agree on, in
 * one place. They do not depend on the install prefix: configuration and
 * run-time state are where the service units and the man pages say,
 * whatever --prefix was given to configure.
 */
#ifndef WS_DEFAULTS_H
#define WS_DEFAULTS_H

#define WS_DEFAULT_PORT		7420
#define WS_DEFAULT_PORT_STR	"7420"

#define WS_CONF_DIR		"/etc/wsfs"
#define WS_DEFAULT_CONF		WS_CONF_DIR "/wsfs.conf"
#define WS_DEFAULT_KEY		WS_CONF_DIR "/cluster.key"

/* Where wslockd listens by default, and where its clients look first. */
#define WS_DEFAULT_LOCKD	"unix:/run/wslockd/wslockd.sock"
#define WS_DEFAULT_LOCKD_TCP	":" WS_DEFAULT_PORT_STR
#define WS_DEFAULT_LOCKD_STATE	"/var/lib/wslockd"

/* wsfs's control sockets (ctl-HASH.sock) and the default scratch base. */
#define WS_RUN_DIR		"/run/wsfs"
#define WS_DEFAULT_SCRATCH	"/var/lib/wsfs/scratch"

#endif
