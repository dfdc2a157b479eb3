"""The launch protocol between Python and the emulator's child process: the
request and response files of gg_emu_run_request and gg_emu_run_host
(docs/cuda-emulation.md, "The C ABI"), and the device's environment.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gemmgen.archs import shared_memory_limit
from gemmgen.archs import sm_count as archs_sm_count
from gemmgen.harness.cuda_emu.errors import EmuError
from gemmgen.harness.cuda_emu.tensor_map import TensorMap


SCHEDULES = ("run-ahead", "reverse")

# The ctypes child of a fiber-mode launch.
# The ctypes child: LIBRARY REQUEST RESPONSE [ENTRY] (gg_emu_run_request,
# or gg_emu_run_host for a host program).
_CHILD = """\
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
run = getattr(lib, sys.argv[4] if len(sys.argv) > 4 else "gg_emu_run_request")
run.argtypes = (ctypes.c_char_p, ctypes.c_char_p)
sys.exit(run(sys.argv[2].encode(), sys.argv[3].encode()))
"""


def dim3(value: int | Sequence[int], what: str = "a launch dimension") -> tuple[int, int, int]:
    """A grid or block size as CUDA's (x, y, z): 128 -> (128, 1, 1)."""
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(int(d) < 1 for d in dims):
        raise ValueError(f"{what} must be 1 to 3 positive sizes, got {value!r}")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))  # type: ignore[return-value]


_KIND_BUFFER, _KIND_VALUE, _KIND_NULL, _KIND_TENSOR_MAP = 0, 1, 2, 3
_FLAG_RETURN, _FLAG_POISON, _FLAG_NOT_PARAMETER = 1, 2, 4
_REQUEST_VERSION = 4


def _encode_request(
    kernel: str,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    smem_bytes: int,
    max_dynamic_smem: int,
    args: Sequence[object],
    outputs: Sequence[int],
    inouts: Sequence[int],
    buffers: Sequence[np.ndarray] = (),
    cluster: tuple[int, int, int] = (1, 1, 1),
) -> bytes:
    """The request file of gg_emu_launch.cc's run_request (max_dynamic_smem -1: the
    kernel's attribute is left unset). `buffers` follow `args` as entries
    that are not kernel parameters (only tensor maps reach them). `cluster`
    is the launch's cluster dimension (cudaLaunchAttributeClusterDimension;
    (1, 1, 1): a launch without clusters)."""
    name = kernel.encode()
    entries = [*args, *buffers]
    parts = [
        b"GGEMUREQ",
        struct.pack("<II", _REQUEST_VERSION, len(name)),
        name,
        struct.pack("<9IQqI", *grid, *block, *cluster, smem_bytes, max_dynamic_smem, len(entries)),
    ]
    for i, arg in enumerate(entries):
        hidden = _FLAG_NOT_PARAMETER if i >= len(args) else 0
        if arg is None:
            parts.append(struct.pack("<IIQ", _KIND_NULL, 0, 0))
        elif isinstance(arg, np.ndarray):
            flags = (_FLAG_RETURN | _FLAG_POISON) if i in outputs else (_FLAG_RETURN if i in inouts else 0)
            parts.append(struct.pack("<IIQ", _KIND_BUFFER, flags | hidden, arg.nbytes))
            if not flags & _FLAG_POISON:
                parts.append(np.ascontiguousarray(arg).tobytes())
        elif isinstance(arg, TensorMap):
            data = arg.payload()
            parts.append(struct.pack("<IIQ", _KIND_TENSOR_MAP, 0, len(data)))
            parts.append(data)
        elif isinstance(arg, np.generic):
            data = arg.tobytes()
            parts.append(struct.pack("<IIQ", _KIND_VALUE, 0, len(data)))
            parts.append(data)
        else:
            raise TypeError(
                f"argument #{i} of {kernel}: expected a NumPy array, a NumPy scalar (e.g. np.int32(3)), a TensorMap "
                f"or None, got {type(arg).__name__}: a Python {type(arg).__name__} has no C type"
            )
    return b"".join(parts)


DEFAULT_ARCH = "sm_90a"


def device_env(arch: str, sm_count: int | None = None) -> dict[str, str]:
    """The environment that makes the emulator an `arch` device: its name, its
    opt-in shared memory per block and its SM count (gemmgen.archs's tables;
    `sm_count` overrides the count, e.g. to give a persistent kernel fewer
    blocks than tiles)."""
    count = archs_sm_count(arch) if sm_count is None else int(sm_count)
    return {"GG_EMU_ARCH": arch, "GG_EMU_SMEM_OPTIN": str(shared_memory_limit(arch)),
            "GG_EMU_SM_COUNT": str(count)}


def _encode_host_request(inputs: Mapping[str, object]) -> bytes:
    """The request of gg_emu_cudart.cc's run_host: named byte strings; an int
    value stands for a size-only input of that many bytes."""
    parts = [b"GGEMUHST", struct.pack("<II", 1, len(inputs))]
    for name, value in inputs.items():
        key = name.encode()
        if isinstance(value, int) and not isinstance(value, bool):
            parts += [struct.pack("<I", len(key)), key, struct.pack("<IQ", 1, value)]
            continue
        data = np.ascontiguousarray(value).tobytes() if isinstance(value, (np.ndarray, np.generic)) else bytes(value)
        parts += [struct.pack("<I", len(key)), key, struct.pack("<IQ", 0, len(data)), data]
    return b"".join(parts)


def _response_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise EmuError("the emulator child exited without writing its response") from None


class _Reader:
    """Reads a response file; a short or inconsistent one is an EmuError
    (a child that died while writing it), never a bare struct/ValueError."""

    def __init__(self, data: bytes, magic: bytes) -> None:
        if data[:8] != magic:
            raise EmuError(f"malformed response from the emulator child: expected {magic.decode()}, "
                           f"got {len(data)} bytes starting {data[:8]!r}")
        self.data, self.offset = data, 8

    def take(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        self._need(size)
        values = struct.unpack_from(fmt, self.data, self.offset)
        self.offset += size
        return values

    def raw(self, nbytes: int) -> bytes:
        self._need(nbytes)
        chunk = self.data[self.offset : self.offset + nbytes]
        self.offset += nbytes
        return chunk

    def _need(self, nbytes: int) -> None:
        if self.offset + nbytes > len(self.data):
            raise EmuError(f"truncated response from the emulator child: {len(self.data)} bytes, "
                           f"needed {self.offset + nbytes}")


def _decode_host_response(data: bytes) -> tuple[int, dict[str, bytes]]:
    r = _Reader(data, b"GGEMUOUT")
    _version, status, count = r.take("<IiI")
    outputs: dict[str, bytes] = {}
    for _ in range(count):
        (name_len,) = r.take("<I")
        name = r.raw(name_len).decode(errors="replace")
        (nbytes,) = r.take("<Q")
        outputs[name] = r.raw(nbytes)
    return status, outputs


@dataclass(frozen=True, slots=True)
class HostResult:
    """What a host program (EmuModule.run_host) returned: gg_emu_host_main's
    status, its outputs by name, and the child's output (kernel printf,
    "gg-emu: rejected: ..." lines of failed runtime calls)."""

    status: int
    outputs: dict[str, bytes]
    log: str


def _decode_response(data: bytes, args: Sequence[object]) -> dict[int, np.ndarray]:
    r = _Reader(data, b"GGEMURSP")
    (count,) = r.take("<I")
    arrays: dict[int, np.ndarray] = {}
    for _ in range(count):
        index, nbytes = r.take("<IQ")
        like = args[index] if index < len(args) else None
        if not isinstance(like, np.ndarray) or nbytes != like.nbytes:
            raise EmuError(f"malformed response from the emulator child: buffer #{index} of {nbytes} bytes "
                           "is not an array argument of that size")
        flat = np.frombuffer(r.raw(nbytes), dtype=like.dtype, count=like.size)
        arrays[index] = flat.reshape(like.shape).copy()
    return arrays
