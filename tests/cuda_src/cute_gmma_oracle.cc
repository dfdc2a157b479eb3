// Host-only CuTe program (g++, no GPU): prints what CuTe says about the SM90
// GMMA layouts, for tests/cuda/sm90/test_cuda_sm90_cute_oracle.py to compare with the
// emulator's decoding (gg_emu_sm90.h). One record per line:
//   atom MAJOR SW BITS MN K OFFSET            byte offset of atom element (mn, k)
//   desc MAJOR SW BITS ROWS KB START LBO SBO LAYOUT OFFSETS...
//       a wgmma operand (ROWS x one k-block KB) of a tile_to_shape of the atom:
//       CuTe's descriptor fields (LBO, SBO in 16-byte units), its start offset,
//       and the byte offset of every element (mn, k), mn-major order
//   clayout N T V M NN                         accumulator (thread, value) -> (m, n)
//   clayout8 N T V M NN                        the same for m64nNk32 e4m3
//   alayout T V M K                            the A register fragment (RS)
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

#include <cstdint>
#include <cstdio>

using namespace cute;
using namespace cute::SM90::GMMA;

alignas(1024) static unsigned char buf[1 << 17];

template <class T, class Atom>
void atom(const char* major, const char* sw) {
  Tensor t = make_tensor(make_smem_ptr(reinterpret_cast<T*>(buf)), Atom{});
  for (int mn = 0; mn < size<0>(t); ++mn) {
    for (int k = 0; k < size<1>(t); ++k) {
      std::printf("atom %s %s %d %d %d %ld\n", major, sw, int(sizeof_bits_v<T>), mn, k,
                  long(reinterpret_cast<unsigned char*>(&t(mn, k)) - buf));
    }
  }
}

template <Major M, class T, class Atom, int Rows, int KT>
void desc(const char* major, const char* sw) {
  constexpr int kw = 256 / sizeof_bits_v<T>;  // the k of one wgmma: 16 (16-bit), 32 (8-bit)
  Tensor t = make_tensor(make_smem_ptr(reinterpret_cast<T*>(buf)),
                         tile_to_shape(Atom{}, Shape<Int<Rows>, Int<KT>>{}));
  for (int kb = 0; kb < KT / kw; ++kb) {
    Tensor s = local_tile(t, Shape<Int<Rows>, Int<kw>>{}, make_coord(0, kb));
    GmmaDescriptor d = make_gmma_desc<M>(s);
    const long start =
        long(reinterpret_cast<const unsigned char*>(raw_pointer_cast(s.data())) - buf);
    std::printf("desc %s %s %d %d %d %ld %u %u %u", major, sw, int(sizeof_bits_v<T>), Rows, kb,
                start, unsigned(d.bitfield.leading_byte_offset_),
                unsigned(d.bitfield.stride_byte_offset_), unsigned(d.bitfield.layout_type_));
    for (int mn = 0; mn < Rows; ++mn) {
      for (int k = 0; k < kw; ++k)
        std::printf(" %ld", long(reinterpret_cast<unsigned char*>(&s(mn, k)) - buf));
    }
    std::printf("\n");
  }
}

template <class T>
void all(int kt_k) {
  (void)kt_k;
  atom<T, Layout_K_INTER_Atom<T>>("K", "0");
  atom<T, Layout_K_SW32_Atom<T>>("K", "32");
  atom<T, Layout_K_SW64_Atom<T>>("K", "64");
  atom<T, Layout_K_SW128_Atom<T>>("K", "128");
  atom<T, Layout_MN_INTER_Atom<T>>("MN", "0");
  atom<T, Layout_MN_SW32_Atom<T>>("MN", "32");
  atom<T, Layout_MN_SW64_Atom<T>>("MN", "64");
  atom<T, Layout_MN_SW128_Atom<T>>("MN", "128");
  constexpr int kw = 256 / sizeof_bits_v<T>;
  constexpr int k128 = 1024 / sizeof_bits_v<T>;  // the K of a 128-byte row
  desc<Major::K, T, Layout_K_INTER_Atom<T>, 64, 2 * kw>("K", "0");
  desc<Major::K, T, Layout_K_SW32_Atom<T>, 64, 2 * kw>("K", "32");
  desc<Major::K, T, Layout_K_SW64_Atom<T>, 128, 2 * kw>("K", "64");
  desc<Major::K, T, Layout_K_SW128_Atom<T>, 64, k128>("K", "128");
  desc<Major::K, T, Layout_K_SW128_Atom<T>, 256, k128>("K", "128");
  desc<Major::MN, T, Layout_MN_INTER_Atom<T>, 64, 2 * kw>("MN", "0");
  desc<Major::MN, T, Layout_MN_SW32_Atom<T>, 64, 2 * kw>("MN", "32");
  desc<Major::MN, T, Layout_MN_SW64_Atom<T>, 128, 2 * kw>("MN", "64");
  desc<Major::MN, T, Layout_MN_SW128_Atom<T>, 128, 2 * kw>("MN", "128");
  desc<Major::MN, T, Layout_MN_SW128_Atom<T>, 256, kw>("MN", "128");
}

template <int N, class Traits>
void clayout(const char* tag) {
  using C = typename Traits::CLayout;  // (thread, value) -> m + 64 n
  for (int t = 0; t < 128; ++t) {
    for (int v = 0; v < N / 2; ++v) {
      const int idx = C{}(t, v);
      std::printf("%s %d %d %d %d %d\n", tag, N, t, v, idx % 64, idx / 64);
    }
  }
}

#define GG_CLAYOUT(N)                                                                    \
  clayout<N, MMA_Traits<MMA_64x##N##x16_F32BF16BF16_SS<Major::K, Major::K>>>("clayout"); \
  clayout<N, MMA_Traits<MMA_64x##N##x32_F32E4M3E4M3_SS_TN<>>>("clayout8");

int main() {
  all<half_t>(16);
  all<uint8_t>(32);
  GG_CLAYOUT(8)
  GG_CLAYOUT(16)
  GG_CLAYOUT(32)
  GG_CLAYOUT(64)
  GG_CLAYOUT(96)
  GG_CLAYOUT(128)
  GG_CLAYOUT(192)
  GG_CLAYOUT(256)
  using A =
      MMA_Traits<MMA_64x64x16_F32BF16BF16_RS<Major::K, Major::K>>::ALayout;  // (t, v) -> m + 64 k
  for (int t = 0; t < 128; ++t) {
    for (int v = 0; v < 8; ++v) {
      const int idx = A{}(t, v);
      std::printf("alayout %d %d %d %d\n", t, v, idx % 64, idx / 64);
    }
  }
  return 0;
}
