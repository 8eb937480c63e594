#ifndef CVIPS_H
#define CVIPS_H
// libvips, for Thumbnails, loaded when the first thumbnail is made (dlopen) rather than when
// the program starts: linked, libvips and the hundred libraries it needs would be loaded and
// relocated by every command, which most often makes no thumbnail.
//
// libvips's calls that take options are variadic (a NULL-ended list of names and values),
// which Swift cannot call; these wrappers fix the options each one needs. Its types are
// opaque here; the few constants passed are libvips's and GLib's ABI, checked against their
// headers by ThumbnailsTests.
#include <stddef.h>

typedef struct cvips_source cvips_source;
typedef struct cvips_image cvips_image;

// VipsAccess's VIPS_ACCESS_SEQUENTIAL, VipsSize's VIPS_SIZE_DOWN, and the GLogLevelFlags of
// the messages not printed.
#define CVIPS_ACCESS_SEQUENTIAL 1
#define CVIPS_SIZE_DOWN 2
#define CVIPS_LOG_LEVEL_WARNING (1 << 4)
#define CVIPS_LOG_LEVEL_MESSAGE (1 << 5)
#define CVIPS_LOG_LEVEL_INFO (1 << 6)

// The library opened by cvips_start when it is given no name: libvips's ABI 42 (8.x).
#define CVIPS_LIBRARY "libvips.so.42"

// Loads `library` and starts libvips, for thumbnails of untrusted files: the loaders libvips
// itself marks untrusted (ImageMagick, PDF, SVG, matrix, FITS…) are blocked, its operation
// cache is off (nothing of one file stays in memory for the next), and each image is worked
// on by one thread; its warnings are not printed. Returns 0, or -1 with the reason in
// cvips_start_error(). Not thread-safe: called once, before any other call here.
int cvips_start(const char *library);
// Why cvips_start failed (the loader's or libvips's own words).
const char *cvips_start_error(void);

// A source reading the file open at `descriptor` (through a descriptor of its own).
cvips_source *cvips_source_new_from_descriptor(int descriptor);
// The name of the loader of the image at the source's start, or NULL for none.
const char *cvips_find_load_source(cvips_source *source);
// The image's header, for its size, with no pixel decoded (sequential access).
cvips_image *cvips_header(cvips_source *source);
// A thumbnail within `side` × `side` pixels, never enlarged, upright by its orientation tag;
// a damaged or truncated image fails rather than giving grey rows.
int cvips_thumbnail(cvips_source *source, cvips_image **out, int side);
// `image` as WebP (quality 75, metadata stripped) into a buffer the caller frees with cvips_free.
int cvips_webp(cvips_image *image, void **buffer, size_t *length);
// The image's size in pixels.
int cvips_width(cvips_image *image);
int cvips_height(cvips_image *image);
// Whether the image is stored interlaced (an Adam7 PNG, a progressive JPEG), which its
// loader decodes whole rather than a few rows at a time.
int cvips_interlaced(cvips_image *image);
// The bytes of one decoded pixel: bands times the size of a sample.
size_t cvips_pixel_bytes(cvips_image *image);
// g_object_unref of a source, of an image.
void cvips_release_source(cvips_source *source);
void cvips_release_image(cvips_image *image);
// g_free of a buffer libvips made.
void cvips_free(void *buffer);
// libvips's error buffer (the reasons of the calls that failed since it was last cleared).
const char *cvips_error_buffer(void);
void cvips_error_clear(void);

#endif
