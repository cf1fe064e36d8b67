// device_radix_sort.cuh — the CUDA emulator's stand-in for CUB's header of the same name (see cuda/emu/cub.h).
#pragma once
#include "cuda/emu/cub.h"
