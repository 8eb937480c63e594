#ifndef CFILESYNC_OPEN_BENEATH_H
#define CFILESYNC_OPEN_BENEATH_H

/// Opens `path`, relative to the directory `dirfd`, without leaving that
/// directory and without following a symbolic link at any component: Linux
/// openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or, where the kernel
/// lacks openat2 (ENOSYS) or `use_openat2` is 0, openat(2) component by
/// component with O_NOFOLLOW. The last component is opened with
/// O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | `flags` (a FIFO
/// opens at once instead of waiting for a writer; the caller fstat()s what it
/// got). Returns the descriptor, or -1 with errno set: ELOOP for a symbolic
/// link at any component, EXDEV for an absolute path or a `..` component.
int cfilesync_open_beneath(int dirfd, const char *path, int flags, int use_openat2);

#endif
