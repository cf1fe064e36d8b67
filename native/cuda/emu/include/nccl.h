// nccl.h — the CUDA emulator's stand-in for the NCCL header (see cuda/emu/nccl.h).
#pragma once
#include "cuda/emu/nccl.h"
