"""The emulator's errors, and the report of a failed child process turned into one."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path




class EmuError(RuntimeError):
    """Base of the emulator's errors; `log` holds the full compiler or child output."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


class EmuCompileError(EmuError):
    """g++ rejected the kernel source."""


class EmuLaunchError(EmuError):
    """The launch was rejected before any CUDA thread ran."""


class EmuKernelError(EmuError):
    """The kernel misbehaved: deadlock, warp divergence, out-of-bounds access, crash."""


class EmuRaceError(EmuKernelError):
    """ThreadSanitizer reported a data race (``tsan=True`` modules)."""


class EmuMemoryError(EmuKernelError):
    """The memory checker stopped the kernel: a misaligned access (a GPU
    faults on it) found while the kernel ran."""


class EmuTimeout(EmuKernelError):
    """The launch did not finish within its timeout."""

# Exit statuses of the child (gg_emu_core.h, gg_emu_memcheck.cc).
_EXIT_REJECTED = 2
_EXIT_TSAN = 66
_EXIT_KERNEL = 70
_EXIT_FAULT = 71
_EXIT_RACE = 72  # the memory checker's race between blocks (gg_emu_memcheck.cc)


def _name_sites(message: str, library: Path | None, source_name: str) -> str:
    """Replaces the memory checker's "[site 0x...]" by the source line."""
    sites = [int(h, 16) for h in re.findall(r"\[site (0x[0-9a-f]+)\]", message)]
    if not sites or library is None:
        return message
    from gemmgen.harness.counters import resolve_sites

    where = resolve_sites(library, sites, source_name)
    return re.sub(r"\[site (0x[0-9a-f]+)\]", lambda m: f"({where.get(int(m.group(1), 16)) or 'line unknown'})",
                  message)


def _error_from_child(proc: subprocess.CompletedProcess, kernel: str, library: Path | None = None,
                      source_name: str = "") -> EmuError:
    log = (proc.stdout or "") + (proc.stderr or "")
    stderr = proc.stderr or ""
    start = stderr.find("gg-emu: error:")
    tsan = stderr.find("WARNING: ThreadSanitizer")
    if start < 0 and tsan >= 0:
        end = stderr.find("SUMMARY: ThreadSanitizer", tsan)
        end = stderr.find("\n", end) if end >= 0 else len(stderr)
        return EmuRaceError(f"{kernel}: ThreadSanitizer reported a data race:\n{stderr[tsan:end].strip()}", log)
    if start >= 0:
        message = _name_sites(stderr[start + len("gg-emu: error:") :].strip(), library, source_name)
    else:
        message = "\n".join(stderr.strip().splitlines()[-40:])
    if proc.returncode == _EXIT_REJECTED:
        return EmuLaunchError(f"{kernel}: launch rejected: {message}", log)
    if proc.returncode == _EXIT_RACE:
        return EmuRaceError(f"{kernel}: {message}", log)
    if proc.returncode == _EXIT_FAULT and message.startswith("misaligned"):
        return EmuMemoryError(f"{kernel}: {message}", log)
    if proc.returncode in (_EXIT_KERNEL, _EXIT_FAULT):
        return EmuKernelError(f"{kernel}: {message}", log)
    if proc.returncode < 0:
        reason = signal.Signals(-proc.returncode).name
        return EmuKernelError(f"{kernel}: the emulated kernel crashed ({reason}):\n{message}", log)
    return EmuKernelError(f"{kernel}: the emulator exited with status {proc.returncode}:\n{message}", log)
