/* pi-quantize -- quantize a GGUF or PowerInfer (PWRI) model file. Uses only the
 * public header: a thin command line over pi_model_quantize. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__MINGW32__) && !defined(TIME_UTC)
#  include <pthread_time.h> /* clock_gettime: the old msvcrt has no timespec_get */
#endif

#include "cli.h"
#include "powerinfer.h"

const char cli_prog[] = "pi-quantize";

static void usage(FILE *out) {
    fprintf(out,
            "usage: pi-quantize [options] IN.gguf OUT.gguf TYPE\n"
            "\n"
            "Rewrites IN (GGUF, or PowerInfer GGUF with magic PWRI) as OUT with its 2-D F32,\n"
            "F16 and BF16 weights quantized to TYPE; everything else is kept as it is. A\n"
            "weight already quantized to another type is refused unless --allow-requantize.\n"
            "\n"
            "  TYPE                    q4_0, q4_1, q5_0, q5_1, q8_0 or mxfp4 (any case)\n"
            "  --predictor-type T      type of the PowerInfer predictors (fc1, fc2):\n"
            "                          one of the above, f16 or bf16 (default: TYPE)\n"
            "  --keep-output           leave output.weight as it is\n"
            "  --allow-requantize      dequantize and quantize again weights that are\n"
            "                          already quantized (both roundings compound)\n"
            "  -t, --threads N         threads (default: all processors; the output\n"
            "                          does not depend on it)\n"
            "  -q, --quiet             no progress on stderr\n"
            "  -h, --help              this text\n");
}

static int parse_type(const char *s, int allow_float) {
    static const struct {
        const char *name;
        int type, is_float;
    } types[] = {
        {"q4_0", PI_TYPE_Q4_0, 0}, {"q4_1", PI_TYPE_Q4_1, 0}, {"q5_0", PI_TYPE_Q5_0, 0},
        {"q5_1", PI_TYPE_Q5_1, 0}, {"q8_0", PI_TYPE_Q8_0, 0}, {"mxfp4", PI_TYPE_MXFP4, 0},
        {"f16", PI_TYPE_F16, 1},   {"bf16", PI_TYPE_BF16, 1},
    };
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        const char *a = s, *b = types[i].name;
        while (*a && *b && tolower((unsigned char)*a) == *b)
            a++, b++;
        if (!*a && !*b && (allow_float || !types[i].is_float))
            return types[i].type;
    }
    return -1;
}

struct progress {
    int quiet;
    int last; /* percent last printed */
    struct timespec t0;
};

static void now_ts(struct timespec *t) {
#ifdef TIME_UTC
    timespec_get(t, TIME_UTC);
#else
    clock_gettime(CLOCK_REALTIME, t);
#endif
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t;
    now_ts(&t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

static int on_progress(void *user, float fraction) {
    struct progress *p = user;
    int pct = (int)(fraction * 100.0f);
    if (!p->quiet && pct != p->last) {
        p->last = pct;
        fprintf(stderr, "\rpi-quantize: %3d%%  %.1f s", pct, seconds_since(&p->t0));
        fflush(stderr);
    }
    return 0;
}

int main(int argc, char **argv) {
    cli_init(&argc, &argv);
    pi_quantize_params qp;
    pi_quantize_default_params(&qp);
    struct progress prog = {0, -1, {0, 0}};
    const char *pos[3];
    int n_pos = 0;
    const char *pred = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--keep-output")) {
            qp.keep_output = 1;
        } else if (!strcmp(a, "--allow-requantize")) {
            qp.allow_requantize = 1;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            prog.quiet = 1;
        } else if ((!strcmp(a, "--predictor-type") || !strcmp(a, "-t") ||
                    !strcmp(a, "--threads")) && i + 1 < argc) {
            const char *v = argv[++i];
            if (a[1] == '-' && a[2] == 'p') {
                pred = v;
            } else {
                char *end;
                long n = strtol(v, &end, 10);
                if (*end || end == v || n < 0 || n > 1024) {
                    fprintf(stderr, "pi-quantize: bad thread count '%s'\n", v);
                    return 2;
                }
                qp.n_threads = (uint32_t)n;
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "pi-quantize: unknown option or missing value: %s (see --help)\n", a);
            return 2;
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            fprintf(stderr, "pi-quantize: too many arguments (see --help)\n");
            return 2;
        }
    }
    if (n_pos != 3) {
        usage(stderr);
        return 2;
    }
    int type = parse_type(pos[2], 0);
    if (type < 0) {
        fprintf(stderr, "pi-quantize: unknown type '%s'; use q4_0, q4_1, q5_0, q5_1, q8_0 or "
                "mxfp4\n",
                pos[2]);
        return 2;
    }
    qp.type = (uint32_t)type;
    if (pred) {
        int pt = parse_type(pred, 1);
        if (pt < 0) {
            fprintf(stderr, "pi-quantize: unknown predictor type '%s'; use q4_0, q4_1, q5_0, "
                    "q5_1, q8_0, mxfp4, f16 or bf16\n", pred);
            return 2;
        }
        qp.predictor_type = (uint32_t)pt;
    }
    char msg[1024] = "";
    qp.errbuf = msg;
    qp.errbuf_cap = sizeof msg;
    qp.progress_fn = on_progress;
    qp.progress_user = &prog;
    now_ts(&prog.t0);
    int st = pi_model_quantize(pos[0], pos[1], &qp);
    if (!prog.quiet && prog.last >= 0)
        fputc('\n', stderr);
    if (st != PI_OK) {
        fprintf(stderr, "pi-quantize: %s (%s)\n", msg[0] ? msg : "failed", pi_status_str(st));
        return 1;
    }
    if (!prog.quiet)
        fprintf(stderr, "pi-quantize: wrote %s (%s) in %.2f s\n", pos[1],
                pi_type_name(type), seconds_since(&prog.t0));
    return 0;
}
