"""Protobuf by hand, for tests that send raw gRPC calls: the messages of
proto/colonnade/v1/shard.proto are few and flat, and an encoder written from
the wire format is a reference independent of the shard's prost code."""

from __future__ import annotations

import struct


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def read_varint(data: bytes, i: int) -> tuple[int, int]:
    """The varint at `data[i:]` and the index after it."""
    n = shift = 0
    while True:
        b = data[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def field_varint(num: int, value: int) -> bytes:
    return varint(num << 3) + varint(value)


def field_bytes(num: int, value: bytes) -> bytes:
    return varint(num << 3 | 2) + varint(len(value)) + value


def field_float(num: int, value: float) -> bytes:
    return varint(num << 3 | 5) + struct.pack("<f", value)


class F:
    """A float field's value (fixed32) for [`field`] and [`msg`]."""

    def __init__(self, x: float):
        self.x = x


def field(num: int, value) -> bytes:
    """One field: int/bool as a varint, bytes/str as length-delimited, a float
    as fixed32 (wrap it in `F`)."""
    if isinstance(value, F):
        return field_float(num, value.x)
    if isinstance(value, (bool, int)):
        return field_varint(num, int(value))
    if isinstance(value, str):
        value = value.encode()
    return field_bytes(num, value)


def msg(**fields) -> bytes:
    """A message from `f<number>=value` keyword arguments (lists repeat the field)."""
    out = b""
    for key, value in fields.items():
        num = int(key[1:])
        for v in value if isinstance(value, list) else [value]:
            out += field(num, v)
    return out


def parse(data: bytes) -> dict[int, list]:
    """Field number -> values (varints as int, length-delimited as bytes, fixed as bytes)."""
    out: dict[int, list] = {}
    i = 0
    while i < len(data):
        key, i = read_varint(data, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = read_varint(data, i)
        elif wire == 2:
            n, i = read_varint(data, i)
            v, i = data[i : i + n], i + n
        elif wire == 1:
            v, i = data[i : i + 8], i + 8
        elif wire == 5:
            v, i = data[i : i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        out.setdefault(num, []).append(v)
    return out


def u32s(values) -> bytes:
    """Little-endian u32s, as the shard's packed row ids."""
    values = list(values)
    return struct.pack(f"<{len(values)}I", *values)
