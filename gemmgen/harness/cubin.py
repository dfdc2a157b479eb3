"""Reading a cubin (a CUDA ELF) without the CUDA toolkit: the arch it is built
for and its function symbols, what the driver checks when it loads a module
and looks an entry up (gemmgen.harness.cupy_standin re-exports them).
"""

from __future__ import annotations

import struct

EM_CUDA = 190  # e_machine of a CUDA ELF


def cubin_arch(cubin: bytes) -> int:
    """The SM number (major * 10 + minor) a CUDA ELF is built for: bits 8-15
    of e_flags (what cuobjdump reports as its arch; tests/launchers/test_cupy_call.py
    checks it against cuobjdump)."""
    (flags,) = struct.unpack_from("<I", cubin, 48)
    return (flags >> 8) & 0xFF


def cubin_functions(cubin: bytes) -> set[str]:
    """The names of the function symbols of an ELF64 (its .symtab)."""
    shoff, = struct.unpack_from("<Q", cubin, 40)
    shentsize, shnum = struct.unpack_from("<HH", cubin, 58)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names = set()
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != 2:  # SHT_SYMTAB
            continue
        strtab = sections[link][4]
        for j in range(size // entsize):
            name, info = struct.unpack_from("<IB", cubin, offset + j * entsize)
            if info & 0xF == 2:  # STT_FUNC
                end = cubin.index(b"\0", strtab + name)
                names.add(cubin[strtab + name:end].decode())
    return names


EIATTR_KPARAM_INFO = 0x17
EIFMT_SVAL = 0x04


def cubin_params(cubin: bytes, function: str) -> tuple[int, ...] | None:
    """The byte size of each parameter of entry `function`, in order, as the
    driver reads them from its `.nv.info.<function>` section (the
    EIATTR_KPARAM_INFO records: index u32, ordinal u16, offset u16, then a
    word whose bits 18-31 are the size; cuobjdump -elf prints them as
    "Ordinal", "Offset", "Size"); None without that section."""
    shoff, = struct.unpack_from("<Q", cubin, 40)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 58)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names = sections[shstrndx][4]
    want = f".nv.info.{function}".encode()
    for name, _, _, _, offset, size, *_ in sections:
        end = cubin.index(b"\0", names + name)
        if cubin[names + name:end] != want:
            continue
        params: dict[int, int] = {}
        at = offset
        while at < offset + size:
            fmt, attribute = cubin[at], cubin[at + 1]
            if fmt == EIFMT_SVAL:
                (length,) = struct.unpack_from("<H", cubin, at + 2)
                if attribute == EIATTR_KPARAM_INFO:
                    _, ordinal, _, word = struct.unpack_from("<IHHI", cubin, at + 4)
                    params[ordinal] = (word >> 18) & 0x3FFF
                at += 4 + length
            else:  # EIFMT_NVAL (no value), EIFMT_BVAL / HVAL (a 2-byte value)
                at += 2 if fmt == 0x01 else 4
        return tuple(params[i] for i in range(len(params)))
    return None
