/*
 * The open file and directory handles of the mount: one list, so that
 * glock.c can walk the open files and the handles the kernel never
 * released (unmounted by a signal) are freed at exit; and the lock owners
 * that took fcntl locks through an open file, whose OFD locks go with its
 * release. A leaf module: ops.c makes and frees the handles, plock.c and
 * glock.c use them.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "wsfs.h"

static LIST_HEAD(, wshandle)	handles = LIST_HEAD_INITIALIZER(handles);
static pthread_mutex_t		handles_lock = PTHREAD_MUTEX_INITIALIZER;

void
handle_add(struct wshandle *h, int is_dir)
{
	h->is_dir = is_dir;
	pthread_mutex_lock(&handles_lock);
	LIST_INSERT_HEAD(&handles, h, entry);
	pthread_mutex_unlock(&handles_lock);
}

void
handle_del(struct wshandle *h)
{
	pthread_mutex_lock(&handles_lock);
	LIST_REMOVE(h, entry);
	pthread_mutex_unlock(&handles_lock);
}

struct wshandle *
handle_pop(void)
{
	struct wshandle	*h;

	pthread_mutex_lock(&handles_lock);
	if ((h = LIST_FIRST(&handles)) != NULL)
		LIST_REMOVE(h, entry);
	pthread_mutex_unlock(&handles_lock);
	return h;
}

void
handle_files_foreach(void (*fn)(struct inode *, int, void *), void *arg)
{
	struct wshandle	*h;
	struct wsfile	*f;

	pthread_mutex_lock(&handles_lock);
	LIST_FOREACH(h, &handles, entry) {
		if (h->is_dir)
			continue;
		f = (struct wsfile *)h;
		fn(f->inode, f->fd, arg);
	}
	pthread_mutex_unlock(&handles_lock);
}

void
handle_lock_owner(struct fuse_file_info *fi, uint64_t owner)
{
	struct wsfile	*f = (struct wsfile *)(uintptr_t)fi->fh;
	uint64_t	*o;
	size_t		 i;

	if (f == NULL)
		return;
	pthread_mutex_lock(&f->owners_lock);
	for (i = 0; i < f->nowners; i++)
		if (f->owners[i] == owner)
			break;
	if (i == f->nowners &&
	    (o = reallocarray(f->owners, f->nowners + 1, sizeof *o)) != NULL) {
		f->owners = o;
		f->owners[f->nowners++] = owner;
	}
	pthread_mutex_unlock(&f->owners_lock);
}
