// powerinfer.h compiles alone as strict C++11 (warnings are errors for this target).
#include "powerinfer.h"

static_assert(PI_OK == 0 && PI_ERR_INTERNAL == -10, "status values are pinned");

int main() {
    pi_model_params p = pi_model_params();
    return p.struct_size != 0;
}
