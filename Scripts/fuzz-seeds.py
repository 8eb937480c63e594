#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (Fuzz/corpus/<target>/) from the BagIt
conformance suite (../shared/bagit-conformance-suite, or the path given) and from the
hostile inputs of our tests. Each seed begins with the bytes its target reads first
(the choices of algorithm, version, encoding and piece sizes: see Fuzz/Sources)."""
import hashlib, os, pathlib, sys

root = pathlib.Path(__file__).resolve().parent.parent
suite = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else root.parent / "shared" / "bagit-conformance-suite")
corpus = root / "Fuzz" / "corpus"
algorithms = ["md5", "sha1", "sha224", "sha256", "sha384", "sha512"]
versions = ["1.0", "0.97", "0.96", "0.93"]
encodings = ["UTF-8", "ISO-8859-1", "UTF-16"]
MAX = 8192


def put(target, data):
    folder = corpus / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)


def declared(bag):
    """The version and encoding index a bag's bagit.txt declares (1.0 and UTF-8 when unsure)."""
    version, encoding = 0, 0
    try:
        text = (bag / "bagit.txt").read_bytes().decode("utf-8", "replace")
        for line in text.splitlines():
            label, _, value = line.partition(":")
            value = value.strip()
            if label.strip() == "BagIt-Version" and value in versions:
                version = versions.index(value)
            if label.strip() == "Tag-File-Character-Encoding":
                for i, name in enumerate(encodings):
                    if value.upper().replace("-", "") == name.replace("-", ""):
                        encoding = i
    except OSError:
        pass
    return version, encoding


if suite.is_dir():
    for path in sorted(suite.rglob("*.txt")):
        if not path.is_file() or path.stat().st_size > MAX or "data" in path.relative_to(suite).parts:
            continue
        data = path.read_bytes()
        version, encoding = declared(path.parent)
        if path.name in ("bagit.txt", "bag-info.txt"):
            put("fuzz-bag-tagfiles", bytes([0]) + data)
        elif path.name.startswith(("manifest-", "tagmanifest-")):
            name = path.stem.split("-", 1)[1].lower()
            if name in algorithms:
                put("fuzz-bag-manifest", bytes([algorithms.index(name), version, encoding, 0]) + data)
        elif path.name == "fetch.txt":
            put("fuzz-bag-fetch", bytes([version, 0]) + data)
else:
    print(f"no conformance suite at {suite}: its seeds are left out", file=sys.stderr)

# The hostile inputs of Tests/BagItTests/TagFileTests.swift and BundleHostileTests.swift.
sha = "ab" * 32
for text in [
    "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n",
    "BagIt-Version: 0.96\rTag-File-Character-Encoding: utf-8",
    "BagIt-Version:   1.0  \n\nTag-File-Character-Encoding:UTF-8\n",
    "BagIt-Version : 1.0\nTag-File-Character-Encoding: UTF-8\n",
    "Source-Organization: Example\nContact-Name: A\n  and B\n\tand C\nContact-Name: D\nEmpty:\n",
    " continued\n",
    "A: 1\n: value\n",
]:
    put("fuzz-bag-tagfiles", bytes([0]) + text.encode())
put("fuzz-bag-tagfiles", bytes([0, 0xEF, 0xBB, 0xBF]) + b"BagIt-Version: 1.0\n")
put("fuzz-bag-tagfiles", bytes([2, 1, 3, 0xFF, 0xFE]) + "A: é\n".encode("utf-16-le") + b"\x00\xd8")
for text in [
    f"{sha}  data/a.txt\n{sha.upper()}\tdata/b c.txt\r\n\n  \n{sha} ./data//d.txt",
    f"{sha}  data/.../a..b/.hidden\n{sha}  data/x/./y//z/\n{sha}  data/é 日本/..c\n",
    f"{sha}  data/100%25.txt\n{sha}  data/two%0Alines%0d.txt\n{sha}  data/%41%.txt%",
    f"{sha}  ../etc/passwd\n{sha}  /etc/passwd\n",
    f"{sha} *data/binary.bin\n{sha}  *data/star.bin\n",
    f"{sha}  data/a\n{sha}  data/a\n",
    f"{sha}  data/a\x00b\n",
]:
    put("fuzz-bag-manifest", bytes([3, 0, 0, 0]) + text.encode())
put("fuzz-bag-manifest", bytes([3, 0, 2, 3, 1, 7, 2]) + "\ufeff".encode("utf-16-be") + f"{sha}  data/é\n".encode("utf-16-be"))
for text in [
    "http://example.com/a 12 data/a.txt\n- - data/b\n",
    "http://example.com/a - ../outside\nhttp://x 1 /abs\nhttp://x 1 data/../../x\n",
    "http://x abc data/a\nhttp://x 1 tagfile.txt\n",
]:
    put("fuzz-bag-fetch", bytes([0, 0]) + text.encode())

records = root / "TestAssets" / "bundles" / "records-v1" / "assetcat-records.json"
put("fuzz-records", bytes([0]) + records.read_bytes())
for text in [
    '{"format":"assetcat-records","version":1,"assets":[]}',
    '{"format":"assetcat-records","version":2,"assets":[],"extra":{"a":[1,"]"]}}',
    '{"format":"assetcat-records","version":1,"assets":[{"key":1}]}',
    '{"assets":[],"assets":[]}',
    '[]',
]:
    put("fuzz-records", bytes([3, 1, 5, 200]) + text.encode())

# ExtractionGuard: the members of TestAssets/archives/hostile-*.tar, as the target reads
# them (default policy, paths remembered; per member: kind, size, path, 0xFE, link target).
FILE, DIR, SYMLINK, HARDLINK, CHARDEV, FIFO = 0, 1, 2, 3, 4, 6
def members(*entries):
    out = bytearray([0, 0])
    for kind, path, *target in entries:
        out += bytes([kind, 1]) + path.encode() + b"\xfe" + (target[0].encode() if target else b"") + b"\xff"
    return bytes(out)
for seed in [
    members((FILE, "ok.txt"), (FILE, "/archiveio-hostile-absolute/evil.txt")),
    members((FILE, "ok.txt"), (CHARDEV, "dev/null-copy")),
    members((FILE, "ok.txt"), (FILE, "sub/../../escaped.txt")),
    members((FILE, "a.txt"), (FILE, "a.txt"), (FILE, "./a.txt")),
    members((FIFO, "pipe")),
    members((FILE, "ok.txt"), (HARDLINK, "hl", "../../etc/passwd"), (HARDLINK, "h2", "./ok.txt")),
    members((HARDLINK, "hl", "not-extracted.txt")),
    members((FILE, "dir/" + "y" * 300), (FILE, "x" * 5000)),
    members((SYMLINK, "etc-link", "/etc")),
    members((SYMLINK, "d/up", ".."), (SYMLINK, "d/sneaky", "up/../..")),
    members((FILE, "ok.txt"), (SYMLINK, "docs/link", "../../outside"), (FILE, "docs/link/evil.txt")),
    members((DIR, "real/"), (SYMLINK, "inner-link", "real"), (FILE, "inner-link/evil.txt"), (DIR, "./")),
]:
    put("fuzz-extraction-guard", seed)
put("fuzz-extraction-guard", bytes([1, 20, 8, 3, 2, 0]) + b"\x00\x01a/b/c\xfe\xff\x00\x05evil\x00\xfe\xff")
