"""The MX / NV block-scale layouts (docs/semantics.md, "MX and NV block
scales"): a scale tensor in `layout=atom128x4` -> its row-major values
(`atoms_to_rows`), and back (`rows_to_atoms`, padding bytes given). Both
index through `ir.scale_atom_offset`, the one statement of the atom."""

from __future__ import annotations

import numpy as np

from gemmgen import ir


def _offsets(rows: int, kblocks: int) -> np.ndarray:
    """int64 [rows, kblocks]: the flat byte of each scale in one matrix."""
    r = np.arange(rows, dtype=np.int64)[:, None]
    kb = np.arange(kblocks, dtype=np.int64)[None, :]
    k_atoms = ir.cdiv(kblocks, ir.ATOM_KBLOCKS)
    atom = (r // ir.ATOM_ROWS) * k_atoms + kb // ir.ATOM_KBLOCKS
    return atom * (ir.ATOM_ROWS * ir.ATOM_KBLOCKS) + (r % 32) * 16 + (r // 32 % 4) * 4 + kb % 4


def padded_shape(rows: int, kblocks: int) -> tuple[int, int]:
    """The stored [rows, K blocks] of one matrix: both padded to whole atoms."""
    return (ir.cdiv(rows, ir.ATOM_ROWS) * ir.ATOM_ROWS,
            ir.cdiv(kblocks, ir.ATOM_KBLOCKS) * ir.ATOM_KBLOCKS)


def atoms_to_rows(stored: np.ndarray, rows: int, kblocks: int) -> np.ndarray:
    """[..., padded rows, padded K blocks] in atom order -> [..., rows, kblocks]
    row-major (the padding dropped); any element type."""
    stored = np.asarray(stored)
    want = padded_shape(rows, kblocks)
    if stored.shape[-2:] != want:
        raise ValueError(f"atom128x4 scales of {rows} rows x {kblocks} K blocks are stored as "
                         f"[..., {want[0]}, {want[1]}], got {stored.shape}")
    flat = stored.reshape(stored.shape[:-2] + (-1,))
    return flat[..., _offsets(rows, kblocks)]


def rows_to_atoms(values: np.ndarray, fill) -> np.ndarray:
    """[..., rows, kblocks] row-major -> [..., padded rows, padded K blocks]
    in atom order, the padding bytes set to `fill`."""
    values = np.asarray(values)
    rows, kblocks = values.shape[-2:]
    shape = padded_shape(rows, kblocks)
    flat = np.full(values.shape[:-2] + (shape[0] * shape[1],), fill, values.dtype)
    flat[..., _offsets(rows, kblocks)] = values
    return flat.reshape(values.shape[:-2] + shape)
