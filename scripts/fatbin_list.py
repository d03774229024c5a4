#!/usr/bin/python3
"""Lists the GPU code in a CUDA program's fat binaries as `cuobjdump --list-elf` / `--list-ptx`
print it ("ELF file    1: megatrain.1.sm_80.cubin"), for machines without cuobjdump (CI's CUDA
toolkit has nvcc but no cuobjdump).

The .nv_fatbin section holds containers: a 16-byte header (magic 0xBA55ED50, version 1, header
size, size of the entries), then entries, each a header (kind: 1 PTX, 2 ELF; its own size; the
payload's size; the SM number at byte 28; flags at byte 40, where 0x100000 marks an
architecture-specific target such as sm_90a and 0x200000 a family one such as sm_100f) followed
by its payload. Usage: fatbin_list.py --list-elf|--list-ptx BINARY
"""
import os
import struct
import sys

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_ELF = 1, 2
FLAG_ARCH_SPECIFIC, FLAG_FAMILY = 0x100000, 0x200000


def fail(message):
    sys.stderr.write("fatbin_list: %s\n" % message)
    sys.exit(1)


def sections(data):
    """(name, offset, size) of each section of a 64-bit little-endian ELF file."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        fail("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]
    for name_at, _type, _flags, _addr, offset, size in headers:
        end = data.index(b"\0", names + name_at)
        yield data[names + name_at:end].decode(), offset, size


def entries(blob):
    """(kind, target) of each entry of the containers in one .nv_fatbin section."""
    at = 0
    while at + 16 <= len(blob):
        magic, _version, header, size = struct.unpack_from("<IHHQ", blob, at)
        if magic != FATBIN_MAGIC:
            if blob[at:].strip(b"\0"):
                fail("no fat binary header at byte %d of .nv_fatbin" % at)
            return  # the section's zero padding
        entry, end = at + header, at + header + size
        if end > len(blob):
            fail("a fat binary at byte %d runs past its section" % at)
        while entry < end:
            kind, _unknown, entry_header, payload = struct.unpack_from("<HHIQ", blob, entry)
            sm, = struct.unpack_from("<I", blob, entry + 28)
            flags, = struct.unpack_from("<Q", blob, entry + 40)
            if entry_header < 64:
                fail("a fat binary entry at byte %d has a %d-byte header" % (entry, entry_header))
            suffix = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
            yield kind, "sm_%d%s" % (sm, suffix)
            entry += entry_header + payload
        at = end


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("--list-elf", "--list-ptx"):
        fail("usage: fatbin_list.py --list-elf|--list-ptx BINARY")
    path = sys.argv[2]
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail("%s: %s" % (path, e.strerror))
    want = KIND_ELF if sys.argv[1] == "--list-elf" else KIND_PTX
    label, ext = ("ELF", "cubin") if want == KIND_ELF else ("PTX", "ptx")
    base = os.path.basename(path)
    count = 0
    try:
        for name, offset, size in sections(data):
            if name != ".nv_fatbin":
                continue
            for kind, target in entries(data[offset:offset + size]):
                if kind == want:
                    count += 1
                    print("%s file %4d: %s.%d.%s.%s" % (label, count, base, count, target, ext))
    except (struct.error, ValueError, IndexError):
        fail("%s: truncated or malformed ELF or fat binary" % path)


if __name__ == "__main__":
    main()
