// cuda_runtime.h — the CUDA emulator's stand-in for the CUDA runtime header: device-code qualifiers and
// intrinsics (cuda/emu/device_api.h), the runtime API (cuda/emu/runtime.h) and kernel launches
// (cuda/emu/launch.h). Found first on the include path of the emulated build only.
#pragma once
#include "cuda/emu/device_api.h"
#include "cuda/emu/launch.h"
#include "cuda/emu/runtime.h"
