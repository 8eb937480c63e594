/*
 * sqlite-statement-times: where a process's time in SQLite goes, statement by statement.
 *
 * An LD_PRELOAD library that wraps sqlite3_step and writes at exit one line a distinct
 * statement text: the milliseconds spent in its steps, how many steps, and the text (its first
 * 200 bytes). Statements that SQLite runs inside another (FTS5's writes of its own tables, a
 * trigger's) are counted on their own lines *and* in the time of the statement that ran them.
 * Unlike sqlite-timeline.c it keeps no order and no limit, so it suits a long run: an add of a
 * million files. It works on a binary that links SQLite dynamically (assetcat does, even with
 * --static-swift-stdlib).
 *
 *   cc -O2 -shared -fPIC -o /tmp/sqlite-statement-times.so Benchmarks/Tools/sqlite-statement-times.c -ldl
 *   LD_PRELOAD=/tmp/sqlite-statement-times.so SQLITE_STATEMENT_TIMES=/tmp/times.txt \
 *       assetcat add --reference --recursive --tag bulk DIR
 *   sort -rn /tmp/times.txt | head
 *
 * Each wrapped step costs two clock reads and a lock: read the shares, not the total.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct sqlite3_stmt sqlite3_stmt;
const char *sqlite3_sql(sqlite3_stmt *);

enum { capacity = 1024, width = 200 };
static char texts[capacity][width];
static double seconds[capacity];
static long steps[capacity];
static int used;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void write_times(void) {
    const char *path = getenv("SQLITE_STATEMENT_TIMES");
    FILE *out = path ? fopen(path, "w") : stderr;
    if (!out) return;
    for (int i = 0; i < used; i++) fprintf(out, "%10.1f ms %9ld  %s\n", seconds[i] * 1e3, steps[i], texts[i]);
    if (out != stderr) fclose(out);
}

int sqlite3_step(sqlite3_stmt *statement) {
    static int (*step)(sqlite3_stmt *);
    if (!step) {
        step = (int (*)(sqlite3_stmt *))dlsym(RTLD_NEXT, "sqlite3_step");
        atexit(write_times);
    }
    double start = now();
    int result = step(statement);
    double spent = now() - start;
    char text[width];
    const char *sql = sqlite3_sql(statement);
    snprintf(text, width, "%s", sql ? sql : "?");
    for (char *c = text; *c; c++)
        if (*c == '\n') *c = ' ';
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < used && strcmp(texts[i], text) != 0) i++;
    if (i == used && used < capacity) strcpy(texts[used++], text);
    if (i < used) {
        seconds[i] += spent;
        steps[i]++;
    }
    pthread_mutex_unlock(&lock);
    return result;
}
