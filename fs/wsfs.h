/* wsfs private header: see the module banners below. */
#ifndef WSFS_H
#define WSFS_H
#endif
