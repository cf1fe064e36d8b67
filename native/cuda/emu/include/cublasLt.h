// cublasLt.h — the CUDA emulator's stand-in for the cuBLASLt header (see cuda/emu/cublas.h).
#pragma once
#include "cuda/emu/cublas.h"
