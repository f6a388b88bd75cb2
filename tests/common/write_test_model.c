/* write_test_model OUT.gguf [llama|bamboo|falcon|...] [dense|sparse] [f32|f16|q8_0|q4_0]
 * Writes a small random model for the tool tests. */
#include <stdio.h>
#include <string.h>

#include "powerinfer.h"
#include "testmodel.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s OUT.gguf [arch] [dense|sparse] [f32|f16|q8_0|q4_0]\n", argv[0]);
        return 2;
    }
    struct tm_spec s;
    tm_default(&s);
    if (argc > 2)
        s.arch = argv[2];
    if (argc > 3)
        s.sparse = !strcmp(argv[3], "sparse");
    if (argc > 4) {
        const char *t = argv[4];
        s.wtype = !strcmp(t, "f16")    ? PI_TYPE_F16
                  : !strcmp(t, "q8_0") ? PI_TYPE_Q8_0
                  : !strcmp(t, "q4_0") ? PI_TYPE_Q4_0
                                       : PI_TYPE_F32;
    }
    int st = tm_write(&s, argv[1]);
    if (st != PI_OK) {
        fprintf(stderr, "%s: cannot write %s: %s\n", argv[0], argv[1], pi_status_str(st));
        return 1;
    }
    return 0;
}
