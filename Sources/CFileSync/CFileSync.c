#define _GNU_SOURCE
#include <unistd.h>
#include "CFileSync.h"

int cfilesync_syncfs(int fd) {
    return syncfs(fd);
}
