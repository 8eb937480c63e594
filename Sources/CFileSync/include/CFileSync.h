#ifndef CFILESYNC_H
#define CFILESYNC_H

#include "CFileSyncOpenBeneath.h"

/// Makes every written file and directory entry of the filesystem holding
/// `fd` durable at once (Linux syncfs(2)); one journal commit instead of one
/// per fsync. Returns 0, or -1 with errno set.
int cfilesync_syncfs(int fd);

/// Opens a new unnamed file for writing in `directory` (Linux O_TMPFILE), which
/// vanishes with its last descriptor unless linked. Returns the descriptor, or -1
/// with errno set (EOPNOTSUPP or EISDIR where the file system has no unnamed files).
int cfilesync_open_unnamed(const char *directory, int mode);

/// Gives the unnamed file `fd` the name `path` (linkat through /proc/self/fd, else
/// AT_EMPTY_PATH); never replaces an existing file (EEXIST). Returns 0, or -1 with errno set.
int cfilesync_link_unnamed(int fd, const char *path);

/// Renames `from` to `to` unless `to` exists (renameat2 RENAME_NOREPLACE; EEXIST).
/// Returns 0, or -1 with errno set.
int cfilesync_rename_noreplace(const char *from, const char *to);

#endif
