// libvips's and GLib's headers, for ThumbnailsTests (Sources/CVips declares the constants it
// passes to them itself, so that the program does not link libvips).
#include <vips/vips.h>
