// The GPU model's numeric precision (enum Precision and its names): defined CUDA-free in
// model/precision.h, which option parsing shares.
#pragma once
#include "model/precision.h"
