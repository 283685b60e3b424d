"""A GGUF file's metadata (its key-value section), read in one pass.

`gguf.GGUFReader` maps every tensor and every array item to a numpy view: opening Gemma 3's
file (a 262,144-token vocabulary, three arrays of that length) takes seconds, more than
loading the model in llama.cpp.  Chat templates need a few keys and the vocabulary's texts,
which this reads from a memory map in a fraction of that (so the default model starts
in about a second).  Layout: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
"""GGUF value types with a fixed size, as `struct` formats."""
_STRING, _ARRAY = 8, 9


class GGUFError(ValueError):
    """The file is not a GGUF this reader understands."""


def read_metadata(path: Path) -> dict[str, Any]:
    """Every key's value: numbers, booleans, strings, and lists of them."""
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != b"GGUF":
            raise GGUFError(f"{path} is not a GGUF file")
        (version,) = struct.unpack_from("<I", data, 4)
        if version not in (2, 3):  # a big-endian file reads as a huge version
            raise GGUFError(f"{path}: GGUF version {version} is not supported (little-endian versions 2 and 3 are)")
        try:
            (count,) = struct.unpack_from("<Q", data, 16)
            offset, metadata = 24, {}
            for _ in range(count):
                key, offset = _string(data, offset)
                (kind,) = struct.unpack_from("<I", data, offset)
                metadata[key], offset = _value(data, offset + 4, kind)
        except (struct.error, KeyError) as exc:
            raise GGUFError(f"{path}: malformed GGUF metadata ({exc})") from None
        return metadata


def _string(data: mmap.mmap, offset: int) -> tuple[str, int]:
    (length,) = struct.unpack_from("<Q", data, offset)
    start = offset + 8
    if start + length > len(data):
        raise struct.error("a string runs past the end of the file")
    return data[start : start + length].decode("utf-8", "replace"), start + length


def _value(data: mmap.mmap, offset: int, kind: int) -> tuple[Any, int]:
    if kind == _STRING:
        return _string(data, offset)
    if kind == _ARRAY:
        item_kind, count = struct.unpack_from("<IQ", data, offset)
        offset += 12
        if item_kind in _SCALARS:
            form = f"<{count}{_SCALARS[item_kind]}"
            return list(struct.unpack_from(form, data, offset)), offset + struct.calcsize(form)
        items = []
        for _ in range(count):
            item, offset = _value(data, offset, item_kind)
            items.append(item)
        return items, offset
    form = "<" + _SCALARS[kind]
    (value,) = struct.unpack_from(form, data, offset)
    return value, offset + struct.calcsize(form)
