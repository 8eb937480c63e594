#ifndef CVIPS_SHIM_H
#define CVIPS_SHIM_H
// libvips, for Thumbnails: its calls that take options are variadic (a NULL-ended list of
// names and values), which Swift cannot call; these wrappers fix the options each one needs.
#include <vips/vips.h>

// Starts libvips once, for thumbnails of untrusted files: the loaders libvips itself marks
// untrusted (ImageMagick, PDF, SVG, matrix, FITS…) are blocked, its operation cache is off
// (nothing of one file stays in memory for the next), and each image is worked on by one
// thread; its warnings are not printed. Returns 0, or -1 with the reason in vips_error_buffer().
static inline void cvips_ignore(const gchar *domain, GLogLevelFlags level, const gchar *message, gpointer data) {}

static inline int cvips_start(void) {
    if (VIPS_INIT("assetcat") != 0) return -1;
    // Its warnings (a damaged tile, a row cut short) would go to the process's stderr, once a
    // tile: what matters of them comes back as the error of the call that failed.
    g_log_set_handler("VIPS", G_LOG_LEVEL_WARNING | G_LOG_LEVEL_MESSAGE | G_LOG_LEVEL_INFO, cvips_ignore, NULL);
    vips_block_untrusted_set(TRUE);
    vips_cache_set_max(0);
    vips_cache_set_max_mem(0);
    vips_concurrency_set(1);
    return 0;
}

// The image's header, for its size, with no pixel decoded (sequential access).
static inline VipsImage *cvips_header(VipsSource *source) {
    return vips_image_new_from_source(source, "", "access", VIPS_ACCESS_SEQUENTIAL, NULL);
}

// A thumbnail within `side` × `side` pixels, never enlarged, upright by its orientation tag;
// a damaged or truncated image fails rather than giving grey rows.
static inline int cvips_thumbnail(VipsSource *source, VipsImage **out, int side) {
    // (The loader of a source takes fail_on through the option string only.)
    return vips_thumbnail_source(
        source, out, side, "height", side, "size", VIPS_SIZE_DOWN, "option_string", "fail_on=truncated", NULL);
}

// `image` as WebP (quality 75, metadata stripped) into a buffer the caller frees with g_free.
static inline int cvips_webp(VipsImage *image, void **buffer, size_t *length) {
    return vips_webpsave_buffer(image, buffer, length, "Q", 75, "strip", TRUE, NULL);
}

// Whether the image is stored interlaced (an Adam7 PNG, a progressive JPEG), which its
// loader decodes whole rather than a few rows at a time.
static inline int cvips_interlaced(VipsImage *image) {
    int value = 0;
    if (vips_image_get_typeof(image, "interlaced") == 0) return 0;
    if (vips_image_get_int(image, "interlaced", &value) != 0) return 0;
    return value;
}

// The bytes of one decoded pixel: bands times the size of a sample.
static inline size_t cvips_pixel_bytes(VipsImage *image) {
    return (size_t)vips_image_get_bands(image) * vips_format_sizeof(vips_image_get_format(image));
}

// g_object_unref, for Swift (it takes a gpointer).
static inline void cvips_release(void *object) { g_object_unref(object); }

#endif
