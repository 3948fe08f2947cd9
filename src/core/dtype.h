// Element types: the DType enum and its helpers live in the public
// include/hodu/dtype.h (the eager API exposes them).
#pragma once
#include "hodu/dtype.h"
