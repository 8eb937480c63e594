#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "CFileSyncOpenBeneath.h"

// <linux/openat2.h>'s values, spelled out: glibc 2.36 has no wrapper, and the header may be
// missing where the kernel headers are old.
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
struct cfilesync_open_how {
    uint64_t flags;
    uint64_t mode;
    uint64_t resolve;
};
#define CFILESYNC_RESOLVE_NO_MAGICLINKS 0x02
#define CFILESYNC_RESOLVE_NO_SYMLINKS 0x04
#define CFILESYNC_RESOLVE_BENEATH 0x08

/// Set once openat2 answered ENOSYS: the kernel lacks it, don't ask again.
static int openat2_missing = 0;

static int open_components(int dirfd, const char *path, int last_flags) {
    if (path[0] == '/') {
        errno = EXDEV;
        return -1;
    }
    char *copy = strdup(path);
    if (copy == NULL) {
        errno = ENOMEM;
        return -1;
    }
    int fd = dirfd;  // not ours to close until it changes
    char *rest = copy;
    int result = -1;
    for (;;) {
        char *slash = strchr(rest, '/');
        if (slash != NULL) *slash = '\0';
        const char *name = rest;
        rest = slash != NULL ? slash + 1 : NULL;
        // Skip empty and `.` components, but never end on one: the last must name something.
        while (rest != NULL && *rest == '/') rest++;
        if (strcmp(name, "..") == 0) {
            errno = EXDEV;
            break;
        }
        int is_last = rest == NULL || *rest == '\0';
        if (name[0] == '\0' || strcmp(name, ".") == 0) {
            if (is_last) {
                errno = ENOENT;
                break;
            }
            continue;
        }
        int next = is_last ? openat(fd, name, last_flags)
                           : openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0) {
            // A symbolic link opened with O_DIRECTORY | O_NOFOLLOW: ELOOP or ENOTDIR, depending
            // on the kernel and the component; say ELOOP whenever the component is a link.
            int saved = errno;
            if (saved == ENOTDIR && (!is_last || (last_flags & O_DIRECTORY))) {
                struct stat info;
                if (fstatat(fd, name, &info, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(info.st_mode)) saved = ELOOP;
            }
            errno = saved;
            break;
        }
        if (fd != dirfd) close(fd);
        fd = next;
        if (is_last) {
            result = fd;
            break;
        }
    }
    if (result < 0 && fd != dirfd) {
        int saved = errno;
        close(fd);
        errno = saved;
    }
    free(copy);
    return result;
}

int cfilesync_open_beneath(int dirfd, const char *path, int flags, int use_openat2) {
    int last_flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | flags;
    if (use_openat2 && !__atomic_load_n(&openat2_missing, __ATOMIC_RELAXED)) {
        struct cfilesync_open_how how;
        memset(&how, 0, sizeof how);
        how.flags = (uint64_t)last_flags;
        how.resolve = CFILESYNC_RESOLVE_BENEATH | CFILESYNC_RESOLVE_NO_SYMLINKS | CFILESYNC_RESOLVE_NO_MAGICLINKS;
        long fd;
        int tries = 0;
        do {
            // EAGAIN: a rename raced the lookup; a few tries, not a loop an attacker controls.
            fd = syscall(SYS_openat2, dirfd, path, &how, sizeof how);
        } while (fd < 0 && (errno == EINTR || errno == EAGAIN) && ++tries < 16);
        if (fd >= 0) return (int)fd;
        // ENOSYS: an older kernel. EPERM: a seccomp filter (older container runtimes) that
        // refuses system calls it does not know; the fallback gives the true answer.
        // ENOTDIR: perhaps a link where a directory was asked for, which the component walk
        // tells apart (ELOOP).
        if (errno == ENOSYS) {
            __atomic_store_n(&openat2_missing, 1, __ATOMIC_RELAXED);
        } else if (errno != EPERM && errno != ENOTDIR) {
            return -1;
        }
    }
    int fd;
    do {
        fd = open_components(dirfd, path, last_flags);
    } while (fd < 0 && errno == EINTR);
    return fd;
}
