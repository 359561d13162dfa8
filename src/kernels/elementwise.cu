#include "kernels/elementwise.h"
