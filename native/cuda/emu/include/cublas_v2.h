// cublas_v2.h — the CUDA emulator's stand-in for the cuBLAS header (see cuda/emu/cublas.h).
#pragma once
#include "cuda/emu/cublas.h"
