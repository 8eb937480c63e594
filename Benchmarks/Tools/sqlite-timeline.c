/*
 * sqlite-timeline: what a process asks of SQLite, in order, with the time of each call.
 *
 * An LD_PRELOAD library that wraps sqlite3_open_v2, sqlite3_prepare_v2/v3, sqlite3_step,
 * sqlite3_exec and sqlite3_close(_v2), and writes at exit one line a call: milliseconds since
 * the library was loaded, the call's own milliseconds, what it was, and the statement's text.
 * The gaps between lines are the process's own work. It works on a binary that links SQLite
 * dynamically (assetcat does, even with --static-swift-stdlib). The first 4,096 calls are kept.
 *
 *   cc -O2 -shared -fPIC -o /tmp/sqlite-timeline.so Benchmarks/Tools/sqlite-timeline.c -ldl
 *   LD_PRELOAD=/tmp/sqlite-timeline.so SQLITE_TIMELINE=/tmp/timeline.txt assetcat show 3
 *
 * With SQLITE_TIMELINE_TOTALS=1 it keeps no order: one line a distinct call (what it was and
 * the first 200 bytes of its statement), with the milliseconds of all its calls and how many
 * there were — for a run too long for a timeline, an add of a million files:
 *
 *   LD_PRELOAD=/tmp/sqlite-timeline.so SQLITE_TIMELINE_TOTALS=1 SQLITE_TIMELINE=/tmp/totals.txt \
 *       assetcat add --reference --recursive --tag bulk DIR
 *   sort -rn /tmp/totals.txt | head
 *
 * Statements SQLite runs inside another (FTS5's writes of its own tables) count on their own
 * lines and in the time of the statement that ran them.
 *
 * Each wrapped call costs a few microseconds: read the gaps and the shares, not the total.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;

enum { capacity = 4096, width = 200 };
static double starts[capacity], durations[capacity];
static char texts[capacity][width];
static long calls[capacity];  /* with totals: how many calls each line sums */
static int used, totals;
static double loaded;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void write_timeline(void) {
    const char *path = getenv("SQLITE_TIMELINE");
    FILE *file = fopen(path ? path : "sqlite-timeline.txt", "w");
    if (!file) return;
    for (int i = 0; i < used; i++) {
        if (totals) {
            fprintf(file, "%10.1f ms %9ld  %s\n", durations[i] * 1000, calls[i], texts[i]);
        } else {
            fprintf(file, "%8.3f %7.3f  %s\n", (starts[i] - loaded) * 1000, durations[i] * 1000, texts[i]);
        }
    }
    fclose(file);
}

__attribute__((constructor)) static void start(void) {
    loaded = now();
    totals = getenv("SQLITE_TIMELINE_TOTALS") != NULL;
    atexit(write_timeline);
}

static void record(double start, const char *kind, const char *sql) {
    double duration = now() - start;
    char text[width];
    snprintf(text, width, "%s %s", kind, sql ? sql : "?");
    for (char *c = text; *c; c++) {
        if (*c == '\n') *c = ' ';
    }
    pthread_mutex_lock(&lock);
    int i = used;
    if (totals) {
        for (i = 0; i < used && strcmp(texts[i], text) != 0; i++) {}
    }
    if (i < used || used < capacity) {
        if (i == used) {
            strcpy(texts[used], text);
            starts[used] = start;
            durations[used] = 0;
            calls[used] = 0;
            used++;
        }
        durations[i] += duration;
        calls[i]++;
    }
    pthread_mutex_unlock(&lock);
}

/* `declaration` names the wrapped function `real`; it is found once, in the next library. */
#define REAL(name, declaration) \
    static declaration; \
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, name)

int sqlite3_open_v2(const char *path, sqlite3 **db, int flags, const char *vfs) {
    REAL("sqlite3_open_v2", int (*real)(const char *, sqlite3 **, int, const char *));
    double t = now();
    int result = real(path, db, flags, vfs);
    record(t, "open", path);
    return result;
}

int sqlite3_prepare_v2(sqlite3 *db, const char *sql, int n, sqlite3_stmt **statement, const char **tail) {
    REAL("sqlite3_prepare_v2", int (*real)(sqlite3 *, const char *, int, sqlite3_stmt **, const char **));
    double t = now();
    int result = real(db, sql, n, statement, tail);
    record(t, "prepare", sql);
    return result;
}

int sqlite3_prepare_v3(
    sqlite3 *db, const char *sql, int n, unsigned int flags, sqlite3_stmt **statement, const char **tail) {
    REAL("sqlite3_prepare_v3", int (*real)(sqlite3 *, const char *, int, unsigned int, sqlite3_stmt **, const char **));
    double t = now();
    int result = real(db, sql, n, flags, statement, tail);
    record(t, "prepare", sql);
    return result;
}

int sqlite3_step(sqlite3_stmt *statement) {
    REAL("sqlite3_step", int (*real)(sqlite3_stmt *));
    static const char *(*sql)(sqlite3_stmt *);
    if (!sql) *(void **)&sql = dlsym(RTLD_NEXT, "sqlite3_sql");
    double t = now();
    int result = real(statement);
    record(t, "step", sql(statement));
    return result;
}

int sqlite3_exec(sqlite3 *db, const char *sql, int (*callback)(void *, int, char **, char **), void *context,
                 char **error) {
    REAL("sqlite3_exec", int (*real)(sqlite3 *, const char *, int (*)(void *, int, char **, char **), void *, char **));
    double t = now();
    int result = real(db, sql, callback, context, error);
    record(t, "exec", sql);
    return result;
}

/* Both closes, timed alike: `real` is the one called. */
static int timed_close(int (*real)(sqlite3 *), sqlite3 *db) {
    double t = now();
    int result = real(db);
    record(t, "close", "");
    return result;
}

int sqlite3_close(sqlite3 *db) {
    REAL("sqlite3_close", int (*real)(sqlite3 *));
    return timed_close(real, db);
}

int sqlite3_close_v2(sqlite3 *db) {
    REAL("sqlite3_close_v2", int (*real)(sqlite3 *));
    return timed_close(real, db);
}
