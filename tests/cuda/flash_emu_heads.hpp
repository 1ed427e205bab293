// tests/cuda: the head sizes flash_mma.cu instantiates (16, 32, 64, 128), for the two halves
// of the emulated kernels (flash_emu.cc: forward; flash_emu_backward.cc: backward; two files so
// that their compiles, the release build's longest host ones, run side by side).
#ifndef TR_TESTS_CUDA_FLASH_EMU_HEADS_HPP
#define TR_TESTS_CUDA_FLASH_EMU_HEADS_HPP

#include <type_traits>

namespace {

// run(std::integral_constant<int, HS>()) for a head size of the four; 0 for any other
template <class F> int by_head_size(int HS, F run)
{
    switch (HS) {
    case 16: run(std::integral_constant<int, 16>()); return 1;
    case 32: run(std::integral_constant<int, 32>()); return 1;
    case 64: run(std::integral_constant<int, 64>()); return 1;
    case 128: run(std::integral_constant<int, 128>()); return 1;
    default: return 0;
    }
}

} // namespace

#endif
