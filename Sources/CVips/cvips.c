#include "cvips.h"

#include <dlfcn.h>
#include <stdio.h>

// libvips's and GLib's functions, as found in the library cvips_start loaded: all of them,
// or (before a start that found them all) none.
struct functions {
    int (*vips_init)(const char *argv0);
    const char *(*vips_error_buffer)(void);
    void (*vips_error_clear)(void);
    unsigned int (*g_log_set_handler)(
        const char *domain, int levels, void (*handler)(const char *, int, const char *, void *), void *data);
    void (*vips_block_untrusted_set)(int state);
    void (*vips_cache_set_max)(int max);
    void (*vips_cache_set_max_mem)(size_t max);
    void (*vips_concurrency_set)(int concurrency);
    cvips_source *(*vips_source_new_from_descriptor)(int descriptor);
    const char *(*vips_foreign_find_load_source)(cvips_source *source);
    cvips_image *(*vips_image_new_from_source)(cvips_source *source, const char *options, ...);
    int (*vips_thumbnail_source)(cvips_source *source, cvips_image **out, int width, ...);
    int (*vips_webpsave_buffer)(cvips_image *image, void **buffer, size_t *length, ...);
    int (*vips_image_get_width)(const cvips_image *image);
    int (*vips_image_get_height)(const cvips_image *image);
    int (*vips_image_get_bands)(const cvips_image *image);
    int (*vips_image_get_format)(const cvips_image *image);
    unsigned long long (*vips_format_sizeof)(int format);
    unsigned long (*vips_image_get_typeof)(const cvips_image *image, const char *name);
    int (*vips_image_get_int)(const cvips_image *image, const char *name, int *out);
    void (*g_object_unref)(void *object);
    void (*g_free)(void *buffer);
};
static struct functions lib;

static char start_error[512];

static void ignore(const char *domain, int level, const char *message, void *data) {}

// Finds `name` in `library` (or in a library it needs) into `*function`; 0, or -1 saying which.
static int find(void *library, const char *name, void **function) {
    *function = dlsym(library, name);
    if (*function) return 0;
    snprintf(start_error, sizeof start_error, "it has no function %s", name);
    return -1;
}

#define FIND(name) find(library, #name, (void **)&found.name)

int cvips_start(const char *library_name) {
    void *library = dlopen(library_name ? library_name : CVIPS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        const char *reason = dlerror();
        snprintf(start_error, sizeof start_error, "%s", reason ? reason : "it could not be loaded");
        return -1;
    }
    struct functions found;
    if (FIND(vips_init) || FIND(vips_error_buffer) || FIND(vips_error_clear) || FIND(g_log_set_handler)
        || FIND(vips_block_untrusted_set) || FIND(vips_cache_set_max) || FIND(vips_cache_set_max_mem)
        || FIND(vips_concurrency_set) || FIND(vips_source_new_from_descriptor) || FIND(vips_foreign_find_load_source)
        || FIND(vips_image_new_from_source) || FIND(vips_thumbnail_source) || FIND(vips_webpsave_buffer)
        || FIND(vips_image_get_width) || FIND(vips_image_get_height) || FIND(vips_image_get_bands)
        || FIND(vips_image_get_format) || FIND(vips_format_sizeof) || FIND(vips_image_get_typeof)
        || FIND(vips_image_get_int) || FIND(g_object_unref) || FIND(g_free)) {
        dlclose(library);
        return -1;
    }
    lib = found;
    if (lib.vips_init("assetcat") != 0) {
        snprintf(start_error, sizeof start_error, "%s", lib.vips_error_buffer());
        return -1;  // (libvips stays loaded: it may have registered types with GLib)
    }
    // Its warnings (a damaged tile, a row cut short) would go to the process's stderr, once a
    // tile: what matters of them comes back as the error of the call that failed.
    lib.g_log_set_handler(
        "VIPS", CVIPS_LOG_LEVEL_WARNING | CVIPS_LOG_LEVEL_MESSAGE | CVIPS_LOG_LEVEL_INFO, ignore, NULL);
    lib.vips_block_untrusted_set(1);
    lib.vips_cache_set_max(0);
    lib.vips_cache_set_max_mem(0);
    lib.vips_concurrency_set(1);
    return 0;
}

const char *cvips_start_error(void) { return start_error; }

cvips_source *cvips_source_new_from_descriptor(int descriptor) {
    return lib.vips_source_new_from_descriptor(descriptor);
}

const char *cvips_find_load_source(cvips_source *source) { return lib.vips_foreign_find_load_source(source); }

cvips_image *cvips_header(cvips_source *source) {
    return lib.vips_image_new_from_source(source, "", "access", CVIPS_ACCESS_SEQUENTIAL, NULL);
}

int cvips_thumbnail(cvips_source *source, cvips_image **out, int side) {
    // (The loader of a source takes fail_on through the option string only.)
    return lib.vips_thumbnail_source(
        source, out, side, "height", side, "size", CVIPS_SIZE_DOWN, "option_string", "fail_on=truncated", NULL);
}

int cvips_webp(cvips_image *image, void **buffer, size_t *length) {
    return lib.vips_webpsave_buffer(image, buffer, length, "Q", 75, "strip", 1, NULL);
}

int cvips_width(cvips_image *image) { return lib.vips_image_get_width(image); }

int cvips_height(cvips_image *image) { return lib.vips_image_get_height(image); }

int cvips_interlaced(cvips_image *image) {
    int value = 0;
    if (lib.vips_image_get_typeof(image, "interlaced") == 0) return 0;
    if (lib.vips_image_get_int(image, "interlaced", &value) != 0) return 0;
    return value;
}

size_t cvips_pixel_bytes(cvips_image *image) {
    return (size_t)lib.vips_image_get_bands(image) * lib.vips_format_sizeof(lib.vips_image_get_format(image));
}

void cvips_release_source(cvips_source *source) { lib.g_object_unref(source); }

void cvips_release_image(cvips_image *image) { lib.g_object_unref(image); }

void cvips_free(void *buffer) { lib.g_free(buffer); }

const char *cvips_error_buffer(void) { return lib.vips_error_buffer(); }

void cvips_error_clear(void) { lib.vips_error_clear(); }
