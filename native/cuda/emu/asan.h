// asan.h — whether the emulator is compiled with AddressSanitizer (EMBSHARD_EMU_ASAN), and the sanitizer
// interfaces it then uses: fiber switches announced to it (fiber.h) and the tails of device allocations
// poisoned, so a kernel's load or store one element past a cudaMalloc'ed array is reported (runtime.h).
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define EMBSHARD_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMBSHARD_EMU_ASAN 1
#endif
#endif

#if defined(EMBSHARD_EMU_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
