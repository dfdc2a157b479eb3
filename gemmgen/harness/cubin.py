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
