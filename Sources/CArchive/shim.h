#ifndef CARCHIVE_SHIM_H
#define CARCHIVE_SHIM_H
// What Swift cannot import from libarchive, re-exported as plain values and functions
// (shared/PLATFORM.md traps 3 and 4).
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <locale.h>
#include <stddef.h>
#include <sys/stat.h>

// AE_IF* are cast macros (`((__LA_MODE_T)0100000)`), which Swift does not import.
static const unsigned int CARCHIVE_AE_IFMT = 0170000;
static const unsigned int CARCHIVE_AE_IFREG = 0100000;
static const unsigned int CARCHIVE_AE_IFLNK = 0120000;
static const unsigned int CARCHIVE_AE_IFSOCK = 0140000;
static const unsigned int CARCHIVE_AE_IFCHR = 0020000;
static const unsigned int CARCHIVE_AE_IFBLK = 0060000;
static const unsigned int CARCHIVE_AE_IFDIR = 0040000;
static const unsigned int CARCHIVE_AE_IFIFO = 0010000;

// UTIME_OMIT is a macro expression Swift does not import.
static const long CARCHIVE_UTIME_OMIT = UTIME_OMIT;

// `archive_set_error` is variadic. Callbacks use this to report a failure of their own
// (for example, an error thrown by a Swift chunk sink) with a fixed message.
static inline void carchive_set_error(struct archive *a, int error_number, const char *message) {
    archive_set_error(a, error_number, "%s", message);
}

// The calling thread's locale, switched to C.UTF-8 for the duration of header calls
// (trap 1): libarchive converts names through the current locale's charset.
static inline locale_t carchive_utf8_locale(void) {
    return newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
}
static inline locale_t carchive_uselocale(locale_t loc) { return uselocale(loc); }
static inline void carchive_freelocale(locale_t loc) { freelocale(loc); }
static inline int carchive_locale_is_null(locale_t loc) { return loc == (locale_t)0; }
#endif
