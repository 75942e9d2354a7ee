# The CUDA kernels' source as C++ for the CPU emulation (emu_device.h):
# every launch `K<<<grid, block, shared, stream>>>(args)` becomes
# `actc_emu::launch(K, grid, block, shared, stream, __func__, __LINE__)(args)`;
# nothing else changes.  One launch per line, as codec_cuda.cu writes them.
#   cmake -DIN=codec_cuda.cu -DOUT=codec_cuda_emu.cpp -P unchevron.cmake
file(READ "${IN}" src)
string(REGEX REPLACE "([A-Za-z_][A-Za-z0-9_]*(<[0-9A-Za-z_]+>)?)<<<([^;\n]*)>>>\\("
       "actc_emu::launch(\\1, \\3, __func__, __LINE__)(" out "${src}")
if(out MATCHES "<<<|>>>")
  message(FATAL_ERROR "unchevron.cmake: a launch in ${IN} it cannot rewrite (one launch per line, K or K<n>)")
endif()
# #line: compiler messages and the emulator's name the original file's lines.
file(WRITE "${OUT}.tmp" "// Generated from ${IN} by tests/gpu/emu/unchevron.cmake: do not edit.\n#line 1 \"${IN}\"\n${out}")
file(RENAME "${OUT}.tmp" "${OUT}")
