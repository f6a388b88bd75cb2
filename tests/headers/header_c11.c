/* powerinfer.h compiles alone as strict C11 (warnings are errors for this target). */
#include "powerinfer.h"

_Static_assert(PI_OK == 0 && PI_ERR_INTERNAL == -10 && PI_ERR_NUMERIC == -11,
               "status values are pinned");

int main(void) {
    pi_model_params p;
    p.struct_size = (uint32_t)sizeof p;
    return p.struct_size == 0;
}
