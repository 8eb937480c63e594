#!/usr/bin/env python3
"""Writes a PNG of WIDTH x HEIGHT pixels (a gradient, RGB) for the thumbnail tests, a row at
a time, in constant memory whatever its size.

usage: make-png.py WIDTH HEIGHT OUT [--gray] [--truncate BYTES] [--header-only]
  --gray         one byte a pixel, all zero: compresses a thousandfold (a decompression bomb)
  --truncate N   keeps only the first N bytes of the file (a download cut short)
  --header-only  a header claiming the size, then one row of pixel data (a decompression bomb's
                 first bytes)
"""
import struct
import sys
import zlib


def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def main():
    width, height, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    gray = "--gray" in sys.argv
    truncate = int(sys.argv[sys.argv.index("--truncate") + 1]) if "--truncate" in sys.argv else None
    with open(out, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0 if gray else 2, 0, 0, 0)))
        if "--header-only" in sys.argv:
            f.write(chunk(b"IDAT", zlib.compress(bytes(width * (1 if gray else 3) + 1))))
            f.write(chunk(b"IEND", b""))
        else:
            compressor = zlib.compressobj(6)
            pending = b""
            for y in range(height):
                if gray:
                    row = bytes(width + 1)
                else:
                    row = b"\x00" + bytes(
                        (x * 255 // max(1, width - 1)) if c == 0 else (y * 255 // max(1, height - 1)) if c == 1 else 128
                        for x in range(width)
                        for c in range(3)
                    )
                pending += compressor.compress(row)
                if len(pending) > 1 << 20:
                    f.write(chunk(b"IDAT", pending))
                    pending = b""
            pending += compressor.flush()
            f.write(chunk(b"IDAT", pending))
            f.write(chunk(b"IEND", b""))
    if truncate is not None:
        with open(out, "r+b") as f:
            f.truncate(truncate)


main()
