// Prints, for a few problem shapes, the byte offset CUTLASS's
// Sm1xxBlockScaledConfig (cutlass/detail/sm100_blockscaled_layout.hpp, the
// scale-factor layout of the sm_100 and sm_12x block-scaled kernels) gives
// the scale of every (row, K element, batch) coordinate, and the layout's
// cosize (the bytes one batch spans). Read by tests/reference/test_mx_scale_layout.py.
//
// Record: "sf VEC ROWS K L  row k l  offset" per coordinate, "cosize VEC ROWS K L  n".
#include <cstdio>

#include "cutlass/detail/sm100_blockscaled_layout.hpp"

template <int Vec>
void dump(int rows, int k, int l) {
  using Config = cutlass::detail::Sm1xxBlockScaledConfig<Vec>;
  // The SFA layout of an (rows, n = 1, k, l) problem; SFB is the same
  // function of (n, k, l) (the header's two tile_atom_to_shape_* are alike).
  auto layout = Config::tile_atom_to_shape_SFA(cute::make_shape(rows, 1, k, l));
  for (int b = 0; b < l; ++b) {
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < k; c += Vec) {
        std::printf("sf %d %d %d %d  %d %d %d  %d\n", Vec, rows, k, l, r, c, b,
                    static_cast<int>(layout(r, c, b)));
      }
    }
  }
  std::printf("cosize %d %d %d %d  %d\n", Vec, rows, k, l, static_cast<int>(cute::cosize(layout)));
}

int main() {
  dump<32>(128, 128, 1);
  dump<32>(256, 512, 2);
  dump<32>(384, 256, 1);
  dump<16>(128, 64, 1);
  dump<16>(256, 256, 2);
  dump<32>(200, 96, 2);  // rows and K blocks not multiples of the atom
  dump<16>(130, 80, 1);
  return 0;
}
