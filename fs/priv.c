/*
 * Least privilege. wsfs must be root to mount and to serve allow_other,
 * but once mounted it only needs to act on files for their owners. It keeps
 * these capabilities and no others, in every set including the bounding set,
 * with no_new_privs:
 *
 *   CAP_CHOWN           give new files to the calling user, serve chown
 *   CAP_DAC_OVERRIDE    the kernel has already checked the caller's access
 *   CAP_DAC_READ_SEARCH open_by_handle_at and linkat(AT_EMPTY_PATH)
 *   CAP_FOWNER          chmod, utimes and xattrs on other users' files
 *   CAP_FSETID          keep the mode bits the caller set; the kernel, not
 *                       the daemon's own writes, clears setuid/setgid
 *   CAP_SYS_ADMIN       permitted but not effective: raised only at exit to
 *                       unmount
 *   CAP_SETFCAP         permitted but not effective: raised only in the
 *                       thread that removes a file's security.capability
 *                       (priv_remove_capability), never to set one
 *
 * Dropped, among all others: CAP_MKNOD (no device node can be made even
 * if a check were missed), CAP_SETUID/SETGID, CAP_SYS_PTRACE, CAP_NET_*.
 * No file capability can be planted on the backing store: setting
 * security.capability needs CAP_SETFCAP effective, which only the removal
 * raises.
 * Capabilities are per thread, so this runs before any thread starts.
 */
#include "config.h"

#include <sys/prctl.h>
#include <sys/xattr.h>

#include <cap-ng.h>
#include <errno.h>
#include <string.h>

#include "wsfs.h"

static const int priv_keep[] = {
	CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER,
	CAP_FSETID,
};

void
priv_drop(void)
{
	size_t	i;
	int	r;

	if (geteuid() != 0)
		return;
	capng_clear(CAPNG_SELECT_BOTH);
	for (i = 0; i < sizeof priv_keep / sizeof priv_keep[0]; i++)
		if (capng_update(CAPNG_ADD, CAPNG_EFFECTIVE | CAPNG_PERMITTED |
		    CAPNG_BOUNDING_SET, (unsigned)priv_keep[i]) != 0)
			fatalx("capng_update failed");
	if (capng_update(CAPNG_ADD, CAPNG_PERMITTED | CAPNG_BOUNDING_SET,
	    CAP_SYS_ADMIN) != 0 || capng_update(CAPNG_ADD, CAPNG_PERMITTED |
	    CAPNG_BOUNDING_SET, CAP_SETFCAP) != 0)
		fatalx("capng_update failed");
	if ((r = capng_apply(CAPNG_SELECT_BOTH)) != 0)
		fatalx("could not drop capabilities (capng_apply %d)", r);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == -1)
		fatal("prctl(PR_SET_NO_NEW_PRIVS)");
	log_debug("capabilities dropped; no_new_privs set");
}

void
priv_unmount_begin(void)
{
	if (geteuid() != 0)
		return;
	if (capng_update(CAPNG_ADD, CAPNG_EFFECTIVE, CAP_SYS_ADMIN) != 0 ||
	    capng_apply(CAPNG_SELECT_CAPS) != 0)
		log_warn("could not raise CAP_SYS_ADMIN to unmount");
}

/*
 * Remove security.capability from the file at path (a /proc/self/fd
 * path): 0 or -errno. The kernel sends this removal when a write or a
 * truncate must clear a capability (from its own kill-priv, which checks
 * nobody) or for a caller it found holding CAP_SETFCAP; on a local
 * filesystem both succeed, and removing a capability never grants one.
 * CAP_SETFCAP is effective in this thread only for the one call.
 */
int
priv_remove_capability(const char *path)
{
	int	r, raised = 0;

	if (geteuid() == 0) {
		if (capng_get_caps_process() != 0 ||
		    capng_update(CAPNG_ADD, CAPNG_EFFECTIVE, CAP_SETFCAP) != 0 ||
		    capng_apply(CAPNG_SELECT_CAPS) != 0)
			log_warn("could not raise CAP_SETFCAP to remove a "
			    "file capability");
		else
			raised = 1;
	}
	r = removexattr(path, "security.capability") == -1 ? -errno : 0;
	if (raised && (capng_update(CAPNG_DROP, CAPNG_EFFECTIVE,
	    CAP_SETFCAP) != 0 || capng_apply(CAPNG_SELECT_CAPS) != 0))
		fatalx("could not lower CAP_SETFCAP again");
	return r;
}
