#ifndef CFILESYNC_H
#define CFILESYNC_H

#include "CFileSyncOpenBeneath.h"

/// Makes every written file and directory entry of the filesystem holding
/// `fd` durable at once (Linux syncfs(2)); one journal commit instead of one
/// per fsync. Returns 0, or -1 with errno set.
int cfilesync_syncfs(int fd);

#endif
