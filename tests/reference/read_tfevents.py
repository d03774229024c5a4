#!/usr/bin/env python3
# Reads TensorBoard event files without megatrain's code (nor TensorBoard's): the TFRecord framing
# (uint64 length, masked CRC32C of the length, data, masked CRC32C of the data; CRC32C computed
# bit by bit here), and the Event protobuf decoded field by field (wall_time = 1 double, step = 2
# int64, file_version = 3 string, summary = 5 { value = 1 { tag = 1 string, simple_value = 2 float } }).
# Prints one JSON line per event: {"wall_time", "step", "file_version"} or {"wall_time", "step",
# "scalars": {tag: value}}. Exits 1 naming the file and offset on any framing, CRC or encoding error.
import json, struct, sys

def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF

def masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

def varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]; i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i

def fields(buf):
    """(field number, wire type, value) of a protobuf message."""
    i = 0
    while i < len(buf):
        k, i = varint(buf, i)
        field, wire = k >> 3, k & 7
        if wire == 0:
            v, i = varint(buf, i)
        elif wire == 1:
            v = buf[i:i + 8]; i += 8
        elif wire == 2:
            n, i = varint(buf, i)
            v = buf[i:i + n]; i += n
            if i > len(buf):
                raise ValueError("length field past the end of its message")
        elif wire == 5:
            v = buf[i:i + 4]; i += 4
        else:
            raise ValueError(f"wire type {wire}")
        yield field, wire, v

def event(buf):
    out = {}
    for field, wire, v in fields(buf):
        if field == 1 and wire == 1: out["wall_time"] = struct.unpack("<d", v)[0]
        elif field == 2 and wire == 0: out["step"] = v - (1 << 64) if v >= 1 << 63 else v
        elif field == 3 and wire == 2: out["file_version"] = v.decode("utf-8")
        elif field == 5 and wire == 2:
            scalars = {}
            for f, w, value in fields(v):
                if f != 1 or w != 2: raise ValueError(f"Summary field {f} wire {w}")
                tag = simple = None
                for f2, w2, v2 in fields(value):
                    if f2 == 1 and w2 == 2: tag = v2.decode("utf-8")
                    elif f2 == 2 and w2 == 5: simple = struct.unpack("<f", v2)[0]
                    else: raise ValueError(f"Value field {f2} wire {w2}")
                scalars[tag] = simple
            out["scalars"] = scalars
        else:
            raise ValueError(f"Event field {field} wire {wire}")
    return out

for path in sys.argv[1:]:
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        try:
            if at + 12 > len(data): raise ValueError("a torn record header")
            head = data[at:at + 8]
            (n,) = struct.unpack("<Q", head)
            (crc_len,) = struct.unpack("<I", data[at + 8:at + 12])
            if crc_len != masked(head): raise ValueError("the length's CRC does not match")
            body = data[at + 12:at + 12 + n]
            if len(body) != n or at + 16 + n > len(data): raise ValueError("a torn record")
            (crc_data,) = struct.unpack("<I", data[at + 12 + n:at + 16 + n])
            if crc_data != masked(body): raise ValueError("the data's CRC does not match")
            print(json.dumps(event(body)))
        except (ValueError, IndexError, UnicodeDecodeError) as e:
            print(f"{path}: offset {at}: {e}", file=sys.stderr)
            sys.exit(1)
        at += 16 + n
