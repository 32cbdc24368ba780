/* placeholder until the optimizer lands */
#include "optimizer.h"
