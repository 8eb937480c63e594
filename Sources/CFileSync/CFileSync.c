#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include "CFileSync.h"

int cfilesync_syncfs(int fd) {
    return syncfs(fd);
}

int cfilesync_open_unnamed(const char *directory, int mode) {
#ifdef O_TMPFILE
    return open(directory, O_TMPFILE | O_WRONLY | O_CLOEXEC, (mode_t)mode);
#else
    errno = EOPNOTSUPP;
    return -1;
#endif
}

int cfilesync_link_unnamed(int fd, const char *path) {
    char name[64];
    snprintf(name, sizeof name, "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, name, AT_FDCWD, path, AT_SYMLINK_FOLLOW) == 0) return 0;
    int first = errno;
    if (first == EEXIST) return -1;
    // Without /proc: AT_EMPTY_PATH (which needs CAP_DAC_READ_SEARCH).
    if (linkat(fd, "", AT_FDCWD, path, AT_EMPTY_PATH) == 0) return 0;
    if (errno != EEXIST) errno = first;
    return -1;
}

int cfilesync_rename_noreplace(const char *from, const char *to) {
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS) return -1;
    // A file system without RENAME_NOREPLACE: a second link (which never replaces), then
    // the first name goes.
    if (link(from, to) != 0) return -1;
    unlink(from);
    return 0;
}
