// gg_emu_sm100_decoders.cc: the sm_100a model's decoders exported for the
// tests that compare them with CuTe and the PTX ISA (gg_emu_sm100.h
// documents the signatures). Part of the emulator's model of tensor memory
// and tcgen05 (gg_emu_sm100.h), compiled once per build mode into the core
// objects.
#include "gg_emu_sm100_state.h"

// ---------------------------------------------------------------------------
// The emulator's decoding, for tests that compare it with CuTe and the PTX
// ISA (the signatures are documented in gg_emu_sm100.h).

namespace {
void copy_why(const std::string& s, char* why, int why_bytes) {
  if (why != nullptr && why_bytes > 0) {
    const std::size_t n = std::min(s.size(), static_cast<std::size_t>(why_bytes - 1));
    std::memcpy(why, s.data(), n);
    why[n] = '\0';
  }
}
}  // namespace

GG_EMU_API long long gg_emu_sm100_smem_desc_offset(unsigned long long desc, int major_mn,
                                                   int elem_bits, int row, int k) {
  if (!gg::emu::sm100::check_desc(desc, major_mn != 0).empty() ||
      (elem_bits != 8 && elem_bits != 16 && elem_bits != 32) || row < 0 || k < 0)
    return -1;
  return gg::emu::sm100::operand_address(gg::emu::sm100::decode_desc(desc), major_mn != 0,
                                         static_cast<unsigned>(elem_bits / 8),
                                         static_cast<unsigned>(row), static_cast<unsigned>(k));
}

GG_EMU_API int gg_emu_sm100_smem_desc_check(unsigned long long desc, int major_mn, char* why,
                                            int why_bytes) {
  const std::string s = gg::emu::sm100::check_desc(desc, major_mn != 0);
  copy_why(s, why, why_bytes);
  return s.empty() ? 0 : 1;
}

GG_EMU_API void gg_emu_sm100_idesc_decode(unsigned idesc, int* fields) {
  const gg::emu::sm100::Idesc d = gg::emu::sm100::decode_idesc(idesc);
  const unsigned v[14] = {d.d_format,   d.a_format, d.b_format,  d.negate_a, d.negate_b,
                          d.a_mn,       d.b_mn,     d.n,         d.m,        d.sparse,
                          d.sparse_sel, d.saturate, d.max_shift, d.reserved};
  for (int i = 0; i < 14; ++i)
    fields[i] = static_cast<int>(v[i]);
}

GG_EMU_API int gg_emu_sm100_idesc_check(unsigned idesc, int kind, char* why, int why_bytes) {
  const std::string s = gg::emu::sm100::check_idesc(idesc, kind);
  copy_why(s, why, why_bytes);
  return s.empty() ? 0 : 1;
}

GG_EMU_API int gg_emu_sm100_d_cell(int m_total, int n, int row, int col, int* lane, int* column) {
  if ((m_total != 64 && m_total != 128) || n < 8 || n > 256 || n % 8 != 0 || row < 0 ||
      row >= m_total || col < 0 || col >= n)
    return -1;
  *lane = static_cast<int>(
      gg::emu::sm100::d_lane(static_cast<unsigned>(m_total), static_cast<unsigned>(row)));
  *column = col;
  return 0;
}

GG_EMU_API int gg_emu_sm100_pair_d_cell(int m_total, int n, int row, int col, int* lane, int* column) {
  if ((m_total != 128 && m_total != 256) || n < 16 || n > 256 || n % 16 != 0 || row < 0 ||
      row >= m_total / 2 || col < 0 || col >= n)
    return -1;
  unsigned l, c;
  gg::emu::sm100::pair_d_cell(static_cast<unsigned>(m_total), static_cast<unsigned>(n),
                              static_cast<unsigned>(row), static_cast<unsigned>(col), &l, &c);
  *lane = static_cast<int>(l);
  *column = static_cast<int>(c);
  return 0;
}

GG_EMU_API int gg_emu_sm100_pair_idesc_check(unsigned idesc, int kind, char* why, int why_bytes) {
  const std::string s = gg::emu::sm100::check_idesc(idesc, kind, 2);
  copy_why(s, why, why_bytes);
  return s.empty() ? 0 : 1;
}

GG_EMU_API void gg_emu_sm100_bs_idesc_decode(unsigned idesc, int kind, int* fields) {
  const gg::emu::sm100::BsIdesc d = gg::emu::sm100::decode_bs_idesc(idesc, kind);
  const unsigned v[14] = {d.sfb_id, d.a_format, d.b_format, d.negate_a,     d.negate_b,
                          d.a_mn,   d.b_mn,     d.n,        d.scale_format, d.m,
                          d.sfa_id, d.sparse,   d.reserved, d.k96};
  for (int i = 0; i < 14; ++i)
    fields[i] = static_cast<int>(v[i]);
}

GG_EMU_API int gg_emu_sm100_bs_idesc_check(unsigned idesc, int kind, char* why, int why_bytes) {
  const std::string s = gg::emu::sm100::check_bs_idesc(idesc, kind);
  copy_why(s, why, why_bytes);
  return s.empty() ? 0 : 1;
}

GG_EMU_API int gg_emu_sm100_sf_cell(int row, int block, int sf_id, int vec, int quarter, int* lane,
                                    int* column, int* byte) {
  if (row < 0 || row >= 256 || quarter < 0 || quarter > 3 || block < 0 || block >= vec ||
      !(vec == 1 || vec == 2 || vec == 4) || sf_id < 0 || sf_id + vec > 4 || sf_id % vec != 0)
    return -1;
  unsigned l, c, b;
  gg::emu::sm100::sf_cell(static_cast<unsigned>(row), static_cast<unsigned>(block),
                          static_cast<unsigned>(sf_id), static_cast<unsigned>(quarter), &l, &c, &b);
  *lane = static_cast<int>(l);
  *column = static_cast<int>(c);
  *byte = static_cast<int>(b);
  return 0;
}

GG_EMU_API int gg_emu_sm100_cp_cell(int row, int byte, int quarter, int* lane, int* column,
                                    int* byte_in_word) {
  if (row < 0 || row >= 32 || byte < 0 || byte >= 16 || quarter < 0 || quarter > 3)
    return -1;
  unsigned l, c, b;
  gg::emu::sm100::cp_cell(static_cast<unsigned>(row), static_cast<unsigned>(byte),
                          static_cast<unsigned>(quarter), &l, &c, &b);
  *lane = static_cast<int>(l);
  *column = static_cast<int>(c);
  *byte_in_word = static_cast<int>(b);
  return 0;
}

GG_EMU_API int gg_emu_sm100_pair_bs_idesc_check(unsigned idesc, int kind, char* why,
                                                int why_bytes) {
  const std::string s = gg::emu::sm100::check_bs_idesc(idesc, kind, 2);
  copy_why(s, why, why_bytes);
  return s.empty() ? 0 : 1;
}

GG_EMU_API int gg_emu_sm100_pair_sf_cell(int which, int m_total, int n, int row, int block,
                                         int sf_id, int vec, int quarter, int* cta, int* lane,
                                         int* column, int* byte) {
  // which 0: A (row < m_total, held by CTA row / 128), 1: B (row < n, held
  // by both CTAs: cta = -1).
  if (m_total != 256 || n < 16 || n > 256 || n % 16 != 0 || row < 0 ||
      row >= (which == 0 ? m_total : n) || quarter < 0 || quarter > 3 || block < 0 ||
      block >= vec || !(vec == 1 || vec == 2 || vec == 4) || sf_id < 0 || sf_id + vec > 4 ||
      sf_id % vec != 0)
    return -1;
  const unsigned r = which == 0 ? static_cast<unsigned>(row % (m_total / 2))
                                : static_cast<unsigned>(row);
  unsigned l, c, b;
  gg::emu::sm100::sf_cell(r, static_cast<unsigned>(block), static_cast<unsigned>(sf_id),
                          static_cast<unsigned>(quarter), &l, &c, &b);
  *cta = which == 0 ? row / (m_total / 2) : -1;
  *lane = static_cast<int>(l);
  *column = static_cast<int>(c);
  *byte = static_cast<int>(b);
  return 0;
}
