#include <sqlite3.h>

/// Turns a connection's triggers on or off (`sqlite3_db_config` with
/// `SQLITE_DBCONFIG_ENABLE_TRIGGER`, which Swift cannot call: it is variadic).
/// Returns the setting now in force (1 on, 0 off), or -1 if SQLite refused.
static inline int persistence_set_triggers_enabled(sqlite3 *db, int enabled) {
    int now = -1;
    if (sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, enabled, &now) != SQLITE_OK) return -1;
    return now;
}
