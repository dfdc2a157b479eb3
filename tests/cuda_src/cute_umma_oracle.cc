// Host-only CuTe program (g++, no GPU): prints what CuTe says about the sm_100
// tcgen05 (UMMA) layouts, for tests/cuda/sm100/test_cuda_sm100_cute_oracle.py to
// compare with the PTX ISA's tables (tests/sm100_ptx_tables.py) and with the
// emulator's decoding (gg_emu_sm100.h). Headers: cute/arch/mma_sm100_desc.hpp,
// cute/atom/mma_traits_sm100.hpp, cute/atom/copy_traits_sm100.hpp.
// One record per line:
//
//   idesc KIND A B M N AMAJ BMAJ RAW CF AF BF AMJ BMJ NDIM MDIM ANEG BNEG SAT SPARSE SHIFT
//       UMMA::make_instr_desc<A, B, float, M, N, AMAJ, BMAJ>(): the raw 32-bit
//       word and CuTe's own bit-field view of it (c/a/b format, majors, n_dim,
//       m_dim, negates, saturate, sparse flag, max shift); KIND f16 or f8f6f4.
// Built with -DGG_ORACLE_ALL_N, the mma and tmemc records cover every N from
// 8 to 256 in steps of 8 (else a sample), and tcopy six atoms more.
//
//   mma KIND A B M N AMAJ BMAJ K RAW THR A=<layout> B=<layout> C=<layout>
//       MMA_Traits<SM100_MMA_F16BF16_SS | SM100_MMA_F8F6F4_SS>: K of one MMA,
//       the traits' idesc_ (RAW), size of ThrID, the ALayout / BLayout /
//       CLayout (thread, value) -> column-major (m|n, k) / (m, n) index, as
//       CuTe prints them.
//   tmemc M N ADDR...
//       UMMA::tmem_frg_1sm<float>::make of one (M, N) accumulator: the TMEM
//       address (lane << 16 | column) of element (m, n), column-major order.
//   tmemc2 M N ADDR...
//       the same for the second of two accumulators tiled along M (CuTe's
//       default, interleaved allocation: for M = 64 it takes the other 16
//       lanes of each 32-lane subpartition).
//   desc MAJOR SW BITS ROWS KB RAW START OFFSETS...
//       an operand (ROWS x the k of one MMA) at k-block KB of tile_to_shape of
//       CuTe's UMMA smem layout atom: make_umma_desc<MAJOR>'s raw 64-bit
//       descriptor, the byte offset of element (0, 0) from the buffer, and the
//       byte offset of every element (mn, k), mn-major order. The buffer sits
//       at shared address kSmemBase (the descriptor's start address field sees
//       kSmemBase + offset).
//   tcopy ATOM M N THREADS | @LANE,COL M,N ... | ...
//       make_tmem_copy(ATOM, accumulator) over one (M, N) accumulator, the
//       epilogue's view: per thread (a "|" each), per copy instruction the
//       TMEM address the thread's warp issues it at (@lane,column) and the
//       (m, n) of each 32-bit register it receives.
//   tmem ATOM REGS LANE,COL[,BAD]...
//       a TMEM load atom (SM100_TMEM_LOAD_*): for thread 0..31, register
//       0..REGS-1, the TMEM (lane, column) its 32 bits come from, relative to
//       the warp's address; ",BAD" marks a register whose 32 bits are not one
//       32-bit column of one lane (none expected).
#include <cstddef>
#include <cstdint>

// CuTe reads a shared-memory address through __cvta_generic_to_shared; on the
// host there is none, so one is defined here: the buffer below sits at shared
// address kSmemBase (1024-aligned, so the swizzle patterns start on it).
static constexpr unsigned kSmemBase = 0x8000;
alignas(1024) static unsigned char buf[1 << 17];
static inline size_t __cvta_generic_to_shared(const void* p) {
  return size_t(static_cast<const unsigned char*>(p) - buf) + kSmemBase;
}
#define CUTE_CVTA_GENERIC_TO_SHARED_ACTIVATED 1

#include <cute/atom/copy_traits_sm100.hpp>
#include <cute/atom/mma_traits_sm100.hpp>
#include <cute/tensor.hpp>

#include <cstdio>

using namespace cute;

template <class T>
const char* tname();
template <>
const char* tname<bfloat16_t>() {
  return "bf16";
}
template <>
const char* tname<half_t>() {
  return "f16";
}
template <>
const char* tname<float_e4m3_t>() {
  return "e4m3";
}
template <>
const char* tname<float_e5m2_t>() {
  return "e5m2";
}
template <>
const char* tname<tfloat32_t>() {
  return "tf32";
}

const char* mname(UMMA::Major m) {
  return m == UMMA::Major::K ? "K" : "MN";
}

// ---------------------------------------------------------------------------
// Instruction descriptors.

template <class A, class B, int M, int N, UMMA::Major AM, UMMA::Major BM>
void idesc(const char* kind) {
  constexpr UMMA::InstrDescriptor d = UMMA::make_instr_desc<A, B, float, M, N, AM, BM>();
  std::printf("idesc %s %s %s %d %d %s %s %u %u %u %u %u %u %u %u %u %u %u %u %u\n", kind,
              tname<A>(), tname<B>(), M, N, mname(AM), mname(BM), unsigned(d.desc_),
              unsigned(d.c_format_), unsigned(d.a_format_), unsigned(d.b_format_),
              unsigned(d.a_major_), unsigned(d.b_major_), unsigned(d.n_dim_), unsigned(d.m_dim_),
              unsigned(d.a_negate_), unsigned(d.b_negate_), unsigned(d.saturate_),
              unsigned(d.sparse_flag_), unsigned(d.max_shift_));
}

template <class A, class B, int M, int N>
void idesc_majors(const char* kind) {
  idesc<A, B, M, N, UMMA::Major::K, UMMA::Major::K>(kind);
  idesc<A, B, M, N, UMMA::Major::K, UMMA::Major::MN>(kind);
  idesc<A, B, M, N, UMMA::Major::MN, UMMA::Major::K>(kind);
  idesc<A, B, M, N, UMMA::Major::MN, UMMA::Major::MN>(kind);
}

template <int M, int N>
void idesc_all() {
  idesc_majors<bfloat16_t, bfloat16_t, M, N>("f16");
  idesc_majors<half_t, half_t, M, N>("f16");
  idesc_majors<float_e4m3_t, float_e4m3_t, M, N>("f8f6f4");
  idesc_majors<float_e5m2_t, float_e5m2_t, M, N>("f8f6f4");
  idesc_majors<float_e4m3_t, float_e5m2_t, M, N>("f8f6f4");
  idesc_majors<float_e5m2_t, float_e4m3_t, M, N>("f8f6f4");
}

// ---------------------------------------------------------------------------
// MMA traits: (thread, value) layouts of A, B, C.

template <class Traits>
void mma(const char* kind, const char* a, const char* b, int m, int n, UMMA::Major am,
         UMMA::Major bm) {
  Traits traits{};
  std::printf("mma %s %s %s %d %d %s %s %d %u %d A=", kind, a, b, m, n, mname(am), mname(bm),
              int(Traits::K), unsigned(traits.idesc_.desc_), int(size(typename Traits::ThrID{})));
  print(typename Traits::ALayout{});
  std::printf(" B=");
  print(typename Traits::BLayout{});
  std::printf(" C=");
  print(typename Traits::CLayout{});
  std::printf("\n");
}

template <int M, int N, UMMA::Major AM, UMMA::Major BM>
void mma_one() {
  mma<MMA_Traits<SM100_MMA_F16BF16_SS<bfloat16_t, bfloat16_t, float, M, N, AM, BM>>>(
      "f16", "bf16", "bf16", M, N, AM, BM);
  if constexpr (BM == UMMA::Major::K || N % 16 == 0) {  // 8-bit N-major B: N a multiple of 16
    mma<MMA_Traits<SM100_MMA_F8F6F4_SS, float_e4m3_t, float_e4m3_t, float, C<M>, C<N>,
                   integral_constant<UMMA::Major, AM>, integral_constant<UMMA::Major, BM>,
                   integral_constant<UMMA::ScaleIn, UMMA::ScaleIn::One>,
                   integral_constant<UMMA::ScaleIn, UMMA::ScaleIn::One>>>("f8f6f4", "e4m3", "e4m3",
                                                                          M, N, AM, BM);
  }
}

template <int M, int N>
void mma_all() {
  mma_one<M, N, UMMA::Major::K, UMMA::Major::K>();
  mma_one<M, N, UMMA::Major::K, UMMA::Major::MN>();
  mma_one<M, N, UMMA::Major::MN, UMMA::Major::K>();
  mma_one<M, N, UMMA::Major::MN, UMMA::Major::MN>();
}

template <int M, int N>
void tmemc() {
  Tensor t = UMMA::tmem_frg_1sm<float>::make(Shape<Shape<Int<M>, Int<N>>, _1, _1>{});
  std::printf("tmemc %d %d", M, N);
  for (int n = 0; n < N; ++n) {
    for (int m = 0; m < M; ++m)
      std::printf(" %u", unsigned(raw_pointer_cast(t.data() + t.layout()(make_coord(m, n), 0, 0))));
  }
  std::printf("\n");
}

template <int M, int N>
void tmemc2() {
  Tensor t = UMMA::tmem_frg_1sm<float>::make(Shape<Shape<Int<M>, Int<N>>, _2, _1>{});
  std::printf("tmemc2 %d %d", M, N);
  for (int n = 0; n < N; ++n) {
    for (int m = 0; m < M; ++m)
      std::printf(" %u", unsigned(raw_pointer_cast(t.data() + t.layout()(make_coord(m, n), 1, 0))));
  }
  std::printf("\n");
}

#if defined(GG_ORACLE_ALL_N)
// Every N from 8 to 256 in steps of 8 (the slow sweep of the oracle test).
template <int M, int N = 8>
void per_n() {
  mma_all<M, N>();
  tmemc<M, N>();
  if constexpr (N < 256)
    per_n<M, N + 8>();
}
#else
// The N a kernel may pick: 8 .. 64 in steps of 8 and the larger tile widths,
// odd multiples of 8 among them.
template <int M>
void per_n() {
  mma_all<M, 8>();
  mma_all<M, 16>();
  mma_all<M, 24>();
  mma_all<M, 32>();
  mma_all<M, 40>();
  mma_all<M, 48>();
  mma_all<M, 56>();
  mma_all<M, 64>();
  mma_all<M, 96>();
  mma_all<M, 128>();
  mma_all<M, 136>();
  mma_all<M, 192>();
  mma_all<M, 248>();
  mma_all<M, 256>();
  tmemc<M, 8>();
  tmemc<M, 16>();
  tmemc<M, 64>();
  tmemc<M, 256>();
  if constexpr (M == 128)
    tmemc<M, 128>();
}
#endif

// ---------------------------------------------------------------------------
// Shared-memory descriptors.

template <UMMA::Major Mj, class T, class Atom, int Rows, int KT>
void desc(const char* major, const char* sw) {
  constexpr int kw = 256 / sizeof_bits_v<T>;  // the k of one MMA: 8 (32-bit), 16, 32 (8-bit)
  Tensor t = make_tensor(make_smem_ptr(reinterpret_cast<T*>(buf)),
                         tile_to_shape(Atom{}, Shape<Int<Rows>, Int<KT>>{}));
  for (int kb = 0; kb < KT / kw; ++kb) {
    Tensor s = local_tile(t, Shape<Int<Rows>, Int<kw>>{}, make_coord(0, kb));
    const uint64_t d = UMMA::make_umma_desc<Mj>(s);
    const long start =
        long(reinterpret_cast<const unsigned char*>(raw_pointer_cast(s.data())) - buf);
    std::printf("desc %s %s %d %d %d %llu %ld", major, sw, int(sizeof_bits_v<T>), Rows, kb,
                static_cast<unsigned long long>(d), start);
    for (int mn = 0; mn < Rows; ++mn) {
      for (int k = 0; k < kw; ++k)
        std::printf(" %ld", long(reinterpret_cast<unsigned char*>(&s(mn, k)) - buf));
    }
    std::printf("\n");
  }
}

template <class T>
void desc_all() {
  using namespace UMMA;
  constexpr int kw = 256 / sizeof_bits_v<T>;
  constexpr int k128 = 1024 / sizeof_bits_v<T>;  // the K of a 128-byte row
  desc<Major::K, T, Layout_K_INTER_Atom<T>, 8, 2 * kw>("K", "0");
  desc<Major::K, T, Layout_K_INTER_Atom<T>, 128, 2 * kw>("K", "0");
  desc<Major::K, T, Layout_K_SW32_Atom<T>, 64, 2 * kw>("K", "32");
  desc<Major::K, T, Layout_K_SW64_Atom<T>, 128, 2 * kw>("K", "64");
  desc<Major::K, T, Layout_K_SW128_Atom<T>, 8, k128>("K", "128");
  desc<Major::K, T, Layout_K_SW128_Atom<T>, 128, k128>("K", "128");
  desc<Major::K, T, Layout_K_SW128_Atom<T>, 256, k128>("K", "128");
  desc<Major::MN, T, Layout_MN_INTER_Atom<T>, 64, 2 * kw>("MN", "0");
  desc<Major::MN, T, Layout_MN_SW32_Atom<T>, 64, 2 * kw>("MN", "32");
  desc<Major::MN, T, Layout_MN_SW64_Atom<T>, 128, 2 * kw>("MN", "64");
  desc<Major::MN, T, Layout_MN_SW128_Atom<T>, 128, 2 * kw>("MN", "128");
  desc<Major::MN, T, Layout_MN_SW128_Atom<T>, 256, kw>("MN", "128");
}

// ---------------------------------------------------------------------------
// TMEM load atoms.

template <class Op>
void tmem(const char* name) {
  using Tr = Copy_Traits<Op>;
  constexpr int bits = int(size<1>(typename Tr::DstLayout{}));
  constexpr int regs = bits / 32;
  constexpr int dp = TMEM::DP_b::value;  // lane stride of TMEM bit addresses
  std::printf("tmem %s %d", name, regs);
  for (int t = 0; t < 32; ++t) {
    for (int r = 0; r < regs; ++r) {
      const int addr = int(typename Tr::ValID{}(typename Tr::DstLayout{}(t, 32 * r)));
      bool ok = addr % 32 == 0;
      for (int b = 1; b < 32; ++b)
        ok = ok && int(typename Tr::ValID{}(typename Tr::DstLayout{}(t, 32 * r + b))) == addr + b;
      std::printf(" %d,%d%s", addr / dp, (addr % dp) / 32, ok ? "" : ",BAD");
    }
  }
  std::printf("\n");
}

template <class Op, int M, int N>
void tcopy(const char* name) {
  Tensor acc = UMMA::tmem_frg_1sm<float>::make(Shape<Shape<Int<M>, Int<N>>, _1, _1>{});
  Tensor t = acc(make_coord(_, _), 0, 0);
  auto tiled = make_tmem_copy(Op{}, t);
  Tensor id = make_identity_tensor(shape(t));
  std::printf("tcopy %s %d %d %d", name, M, N, int(size(tiled)));
  for (int th = 0; th < int(size(tiled)); ++th) {
    auto thr = tiled.get_slice(th);
    Tensor s = group_modes<1, decltype(rank(thr.partition_S(t)))::value>(thr.partition_S(t));
    Tensor c = group_modes<1, decltype(rank(thr.partition_D(id)))::value>(thr.partition_D(id));
    std::printf(" |");
    for (int i = 0; i < int(size<1>(c)); ++i) {
      const unsigned a = unsigned(raw_pointer_cast(s.data() + s.layout()(0, i)));
      std::printf(" @%u,%u", a >> 16, a & 0xFFFFu);
      for (int v = 0; v < int(size<0>(c)); ++v) {
        const int idx = int(make_layout(shape(t))(c(v, i)));  // column-major (m, n)
        std::printf(" %d,%d", idx % M, idx / M);
      }
    }
  }
  std::printf("\n");
}

#define GG_TMEM(OP) tmem<SM100_TMEM_LOAD_##OP>(#OP);
#define GG_TMEM_FAMILY(P) \
  GG_TMEM(P##1x) GG_TMEM(P##2x) GG_TMEM(P##4x) GG_TMEM(P##8x) GG_TMEM(P##16x) GG_TMEM(P##32x)

int main() {
  idesc_all<64, 8>();
  idesc_all<64, 16>();
  idesc_all<64, 40>();
  idesc_all<64, 256>();
  idesc_all<128, 8>();
  idesc_all<128, 16>();
  idesc_all<128, 64>();
  idesc_all<128, 120>();
  idesc_all<128, 128>();
  idesc_all<128, 200>();
  idesc_all<128, 256>();

  per_n<64>();
  per_n<128>();
  tmemc2<64, 64>();
  tmemc2<128, 64>();

  desc_all<half_t>();
  desc_all<uint8_t>();
  // 128B swizzle with 32B atomicity: CuTe's MN-major atom (tf32, the only kind
  // the PTX ISA allows it for); K-major has none.
  desc<UMMA::Major::MN, tfloat32_t, UMMA::Layout_MN_SW128_32B_Atom<tfloat32_t>, 64, 16>("MN",
                                                                                        "128B32");
  desc<UMMA::Major::MN, tfloat32_t, UMMA::Layout_MN_SW128_32B_Atom<tfloat32_t>, 128, 8>("MN",
                                                                                        "128B32");

  GG_TMEM_FAMILY(32dp32b)
  GG_TMEM(32dp32b64x)
  GG_TMEM(32dp32b128x)
  GG_TMEM_FAMILY(16dp256b)
  GG_TMEM_FAMILY(16dp128b)
  GG_TMEM(16dp128b64x)
  GG_TMEM_FAMILY(16dp64b)
  GG_TMEM(16dp64b64x)
  GG_TMEM(16dp64b128x)
  GG_TMEM_FAMILY(16dp32b)
  GG_TMEM(16dp32b64x)
  GG_TMEM(16dp32b128x)

  tcopy<SM100_TMEM_LOAD_32dp32b8x, 128, 64>("32dp32b8x");
#if defined(GG_ORACLE_ALL_N)
  tcopy<SM100_TMEM_LOAD_16dp256b1x, 64, 64>("16dp256b1x");
  tcopy<SM100_TMEM_LOAD_32dp32b32x, 128, 256>("32dp32b32x");
  tcopy<SM100_TMEM_LOAD_16dp256b4x, 64, 256>("16dp256b4x");
  tcopy<SM100_TMEM_LOAD_16dp128b2x, 64, 32>("16dp128b2x");
  tcopy<SM100_TMEM_LOAD_16dp64b8x, 64, 64>("16dp64b8x");
  tcopy<SM100_TMEM_LOAD_16dp32b8x, 64, 64>("16dp32b8x");
#endif
  return 0;
}
