"""The emulator's memory checker, uninitialised-value poisoning and counters
on hand-written kernels (tests/cuda_src/memcheck.cu).

Every verdict must hold in every mode: one worker, two workers (blocks run
concurrently, in any order), and the reverse warp schedule. The counters'
expected numbers are worked out by hand from the CUDA and PTX definitions
(docs/cuda-emulation.md, "Counters"), never taken from the emulator.
"""

import re

import numpy as np
import pytest

from cuda_runtime_cases import CUDA_SRC, ldmatrix_expected
from gemmgen.harness.cuda_emu import EmuMemoryError, EmuModule, EmuRaceError

MODES = [("run-ahead", 1), ("run-ahead", 2), ("reverse", 2)]
MODE_IDS = ["1-worker", "2-workers", "reverse"]

# GCC's -ftrivial-auto-var-init=pattern fills locals with 0xFE bytes.
PATTERN_F32 = np.frombuffer(b"\xfe" * 4, np.float32)[0]  # -1.6947395e38
PATTERN_I32 = np.frombuffer(b"\xfe" * 4, np.int32)[0]  # -16843010


@pytest.fixture(scope="module")
def mc() -> EmuModule:
    return EmuModule.from_file(CUDA_SRC / "memcheck.cu")


def run(module, kernel, grid, block, smem, args, outputs=(), *, mode=MODES[0], **kw):
    schedule, workers = mode
    return module.launch(kernel, grid, block, smem, args, outputs, schedule=schedule, workers=workers, **kw)


# ---------------------------------------------------------------------------
# Races between blocks.


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_two_blocks_writing_one_byte_race(mc, mode):
    expected = ("race between blocks in kernel race_write_write: byte offset 0 of argument #0 `out` (128 bytes) "
                "was written by block (0,0,0) and by block (1,0,0) in the same launch")
    with pytest.raises(EmuRaceError, match=re.escape(expected)):
        run(mc, "race_write_write", 2, 32, 0, [np.zeros(32, np.float32)], inouts=[0], mode=mode)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_reading_what_another_block_writes_races(mc, mode):
    expected = ("byte offset 0 of argument #0 `data` (128 bytes) was written by one and read by the other of "
                "block (0,0,0) and block (1,0,0)")
    with pytest.raises(EmuRaceError, match=re.escape(expected)):
        run(mc, "race_read_write", 2, 32, 0, [np.zeros(32, np.float32), np.zeros(64, np.float32)], mode=mode)
    # With more readers the verdict stays; the pair named may vary.
    with pytest.raises(EmuRaceError, match=r"race between blocks in kernel race_read_write: byte offset 0 of "
                                           r"argument #0 `data`"):
        run(mc, "race_read_write", 5, 32, 0, [np.zeros(32, np.float32), np.zeros(160, np.float32)], mode=mode)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_atomic_and_plain_accesses_of_two_blocks_race(mc, mode):
    with pytest.raises(EmuRaceError, match=re.escape("byte offset 0 of argument #0 `counter` (4 bytes) was accessed "
                                                     "atomically and plainly by block (0,0,0) and block (1,0,0)")):
        run(mc, "atomic_vs_plain", 2, 32, 0, [np.zeros(1, np.int32)], mode=mode)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_no_race_without_conflicts(mc, mode):
    (out,) = run(mc, "disjoint_writes", 4, 32, 0, [np.zeros(128, np.float32)], inouts=[0], mode=mode)
    np.testing.assert_array_equal(out, np.repeat(np.arange(4), 32))
    (out,) = run(mc, "shared_input", 3, 32, 0, [np.arange(32, dtype=np.float32), np.zeros(96, np.float32)],
                 inouts=[1], mode=mode)
    np.testing.assert_array_equal(out, np.tile(np.arange(32) + 1, 3))
    (counter,) = run(mc, "atomic_counter", 3, 32, 0, [np.zeros(1, np.int32)], inouts=[0], mode=mode)
    assert counter[0] == 96
    (data,) = run(mc, "same_block_exchange", 1, 32, 0, [np.zeros(32, np.float32)], inouts=[0], mode=mode)
    np.testing.assert_array_equal(data, (np.arange(32) + 1) % 32)


# ---------------------------------------------------------------------------
# Alignment.


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_misaligned_uint2_store_is_reported(mc, mode):
    with pytest.raises(EmuMemoryError) as e:
        run(mc, "store_uint2_at", 1, 32, 0, [np.zeros(80, np.uint32), np.int32(1)], mode=mode)
    m = re.search(r"misaligned 8-byte store at byte offset (\d+) of argument #0 `out` \(320 bytes\) "
                  r"\(memcheck\.cu:(\d+)\)", str(e.value))
    assert m, str(e.value)
    assert int(m.group(1)) % 8 == 4
    assert "*reinterpret_cast<uint2*>" in (CUDA_SRC / "memcheck.cu").read_text().splitlines()[int(m.group(2)) - 1]
    assert "in kernel store_uint2_at, block (0,0,0)" in str(e.value)
    (out,) = run(mc, "store_uint2_at", 1, 32, 0, [np.zeros(80, np.uint32), np.int32(2)], inouts=[0], mode=mode)
    np.testing.assert_array_equal(out[2:66].reshape(32, 2), np.stack([np.arange(32), np.full(32, 7)], axis=1))


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_misaligned_shared_load_is_reported(mc, mode):
    with pytest.raises(EmuMemoryError, match=r"misaligned 8-byte load at byte \d+ of dynamic shared memory "
                                             r"\(memcheck\.cu:\d+\)"):
        run(mc, "load_float2_shared_at", 1, 32, 512, [np.zeros(32, np.float32), np.int32(1)], mode=mode)
    (out,) = run(mc, "load_float2_shared_at", 1, 32, 512, [np.zeros(32, np.float32), np.int32(0)], [0], mode=mode)
    np.testing.assert_array_equal(out, np.full(32, 2.0))


def test_a_memcpy_at_any_offset_is_not_an_alignment_error(mc):
    data = np.arange(300, dtype=np.uint8)
    (out,) = mc.launch("memcpy_load_at", 1, 32, 0, [data, np.zeros(64, np.uint32), np.int32(3)], [1])
    np.testing.assert_array_equal(out, data[3:259].view(np.uint32))


# ---------------------------------------------------------------------------
# Uninitialised values.


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_uninitialised_registers_start_as_the_pattern(mc, mode):
    # s = pattern + 8: the pattern's magnitude swallows the 8.
    (out,) = run(mc, "uninit_scalar", 2, 32, 0, [np.ones(8, np.float32), np.empty(64, np.float32), np.int32(8)],
                 [1], mode=mode)
    np.testing.assert_array_equal(out, np.full(64, PATTERN_F32))
    (out,) = run(mc, "uninit_int", 2, 32, 0, [np.ones(8, np.int32), np.empty(64, np.int32), np.int32(8)],
                 [1], mode=mode)
    np.testing.assert_array_equal(out, np.full(64, PATTERN_I32 + 8))


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_fiber_stacks_are_poisoned_at_every_block(mc, mode):
    # Block 0 fills its whole 64 KiB array with 1.0; every other block sums
    # four words of an array it never wrote, 16 KiB apart (the deepest lies
    # below the first stack window): poison, even on block 0's worker.
    args = [np.empty(128, np.float32), np.int32(16384), np.int32(4), np.int32(4096)]
    (out,) = run(mc, "uninit_stack", 4, 32, 0, args, [0], mode=mode)
    np.testing.assert_array_equal(out[:32], np.full(32, 4.0))
    assert np.isnan(out[32:]).all()


# ---------------------------------------------------------------------------
# Counters, against numbers worked out by hand.


def sites(counters, op):
    return sorted((s.wavefronts, s.ideal_wavefronts) for s in counters.sites if s.op == op)


def test_shared_memory_bank_conflicts(mc):
    mc.launch("shared_patterns", 1, 32, 0, [np.zeros(32, np.float32)], [0], counters=True)
    c = mc.last_counters
    # buf[i] for i = lane + 32 j: 32 requests of 128 contiguous bytes, one
    # word per bank: one wavefront each (grouped per execution of the site).
    st = c.total("st.shared")
    assert (st.requests, st.wavefronts, st.ideal_wavefronts) == (32, 32, 32)
    # One request each:
    # - buf[32 * lane]: every word in bank 0, 32 distinct: 32 wavefronts (ideal 1);
    # - buf[5]: one word for all lanes (broadcast): 1 (ideal 1);
    # - float2 at byte 16 * lane: two phases of 16 lanes; in each, lanes l and
    #   l + 8 hit the same two banks with different words: 2 + 2 (ideal 2);
    # - float4 at byte 16 * lane: four phases of 8 lanes, 128 contiguous bytes
    #   each: 4 (ideal 4).
    assert sites(c, "ld.shared") == [(1, 1), (4, 2), (4, 4), (32, 1)]
    ld = c.total("ld.shared")
    assert (ld.requests, ld.wavefronts, ld.ideal_wavefronts, ld.conflicts) == (4, 41, 8, 33)
    assert c.total("bar.sync").requests == 1
    # out[lane]: 128 bytes from a 128-byte aligned buffer: 4 sectors.
    assert (c.total("st.global").sectors, c.total("st.global").ideal_sectors) == (4, 4)


@pytest.mark.parametrize("pattern,sectors,ideal", [
    (0, 4, 4),  # in[lane]: 128 contiguous bytes, 32-byte aligned
    (1, 8, 4),  # in[2 * lane]: 128 bytes spread over 256
    (2, 5, 4),  # in[lane + 1]: bytes 4..131 touch sectors 0..4
    (3, 1, 1),  # in[0] for every lane
])
def test_global_sectors_per_request(mc, pattern, sectors, ideal):
    data = np.arange(128, dtype=np.float32)
    (out,) = mc.launch("global_patterns", 1, 32, 0, [data, np.zeros(32, np.float32), np.int32(pattern)], [1],
                       counters=True)
    np.testing.assert_array_equal(out, data[[np.arange(32), 2 * np.arange(32), np.arange(32) + 1,
                                             np.zeros(32, int)][pattern]])
    ld = mc.last_counters.total("ld.global")
    assert (ld.requests, ld.lanes, ld.bytes, ld.sectors, ld.ideal_sectors) == (1, 32, 128, sectors, ideal)


@pytest.mark.parametrize("stride,swizzle,wavefronts", [
    # Rows of 64 bytes: row r's 16 bytes are words 16r..16r+3, banks 0-3 for
    # even r and 16-19 for odd r, so each 8-row matrix puts 4 words in each
    # of those banks: 4 wavefronts per matrix.
    (64, 0, 16),
    # Rows padded to 80 bytes: words 20r..20r+3, r = 0..7 start at banks 0,
    # 20, 8, 28, 16, 4, 24, 12: all 32 banks once, 1 wavefront per matrix.
    (80, 0, 4),
    # 64-byte rows, chunk (r / 2) % 4: banks 16 (r % 2) + 4 ((r / 2) % 4):
    # eight distinct 4-bank groups, 1 wavefront per matrix.
    (64, 1, 4),
])
def test_ldmatrix_bank_conflicts(mc, stride, swizzle, wavefronts):
    src = np.arange(256, dtype=np.uint16) * 7
    (out,) = mc.launch("ldmatrix_layout", 1, 32, 32 * 80 + 64,
                       [src, np.zeros(128, np.uint32), np.int32(stride), np.int32(swizzle)], [1], counters=True)
    expected = ldmatrix_expected(src.reshape(4, 8, 8), np.tile(np.arange(8), 4))[2]  # .x4
    np.testing.assert_array_equal(out.reshape(32, 4), expected)
    ld = mc.last_counters.total("ldmatrix")
    assert (ld.requests, ld.wavefronts, ld.ideal_wavefronts) == (1, wavefronts, 4)


def test_instruction_counts(mc):
    src = np.arange(1024, dtype=np.uint8)
    (out,) = mc.launch("instruction_mix", 1, 64, 1024, [src, np.zeros(64, np.float32)], [1], counters=True)
    # A has 1.0 in register 0 of every lane: rows 0-7, columns 0-7 (the m16n8k16
    # A fragment); B likewise in rows (k) 0-7 of every column. c[0] of lane l
    # is row l / 4 < 8: 8 per round, three rounds; plus the byte copied.
    np.testing.assert_array_equal(out, 24.0 + src[16 * np.arange(64)])
    c = mc.last_counters
    assert c.total("mma").requests == 2 * 3  # 2 warps x 3 rounds
    assert c.total("bar.sync").requests == 2 * 4  # 2 warps x (1 + 3) barriers
    g, s = c.total("cp.async.global"), c.total("cp.async.shared")
    # One 16-byte cp.async per lane: per warp 512 contiguous bytes = 16
    # sectors; the destination is four 8-lane phases of 128 contiguous bytes.
    assert (g.requests, g.sectors, g.ideal_sectors) == (2, 32, 32)
    assert (s.requests, s.wavefronts, s.ideal_wavefronts) == (2, 8, 8)
    # dyn_smem[16 t]: lanes l, l + 8, l + 16, l + 24 read different words of
    # bank 4 (l % 8): 4 wavefronts per warp.
    ld = c.total("ld.shared")
    assert (ld.requests, ld.wavefronts, ld.ideal_wavefronts) == (2, 8, 2)


def test_counters_need_the_memory_checker():
    plain = EmuModule.from_file(CUDA_SRC / "memcheck.cu", memcheck=False)
    with pytest.raises(ValueError, match="counters need a memory-checked module"):
        plain.launch("global_patterns", 1, 32, 0, [np.zeros(128, np.float32), np.zeros(32, np.float32),
                                                   np.int32(0)], [1], counters=True)
    # Without the checker a race between blocks goes unnoticed.
    (out,) = plain.launch("race_write_write", 2, 32, 0, [np.zeros(32, np.float32)], inouts=[0], workers=1)
    np.testing.assert_array_equal(out, np.ones(32))
