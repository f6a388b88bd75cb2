/* cli.c -- see cli.h. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _WIN32
#  define WIN32_LEAN_AND_MEAN
#  include <windows.h>
#  include <shellapi.h>
#  include <fcntl.h>
#  include <io.h>
#endif

/* The loading options of this process's command line (cli_load_option). */
static struct {
    int32_t load_mode;
    int32_t lock_memory;
} load_opts = {PI_LOAD_MMAP, 0};

int cli_chat_format(const char *opt, const char *name) {
    static const char *const names[] = {"auto",       "chatml",     "llama2",
                                        "llama3",     "gemma",      "phi3",
                                        "mistral-v1", "mistral-v3", "mistral-v3-tekken",
                                        "mistral-v7", "falcon"}; /* PI_CHAT_* order */
    for (int k = 0; k < (int)(sizeof names / sizeof *names); k++)
        if (name && !strcmp(name, names[k]))
            return k;
    fprintf(stderr, "%s: %s wants auto, chatml, llama2, llama3, gemma, phi3, mistral-v1, "
            "mistral-v3, mistral-v3-tekken, mistral-v7 or falcon, not '%s'\n",
            cli_prog, opt, name ? name : "");
    return -1;
}

int cli_load_option(const char *a) {
    if (!strcmp(a, "--no-mmap"))
        load_opts.load_mode = PI_LOAD_READ;
    else if (!strcmp(a, "--mlock"))
        load_opts.lock_memory = 1;
    else
        return 0;
    return 1;
}

int cli_common_option(const char *a, const char *v, void (*usage)(FILE *out), int *verbose) {
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(a, "--version")) {
        cli_print_version();
        return 0;
    }
    if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
        *verbose = 1;
        return CLI_OPT_TAKEN;
    }
    if (cli_load_option(a))
        return CLI_OPT_TAKEN;
    if (a[0] == '-' && a[1] != '\0' && !v) {
        fprintf(stderr, "%s: %s needs a value (or is unknown; see --help)\n", cli_prog, a);
        return 2;
    }
    return CLI_OPT_OTHER;
}

int cli_parse_long(const char *opt, const char *v, int base, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, base);
    if (*v == '\0' || *end != '\0' || errno || x < lo || x > hi) {
        fprintf(stderr, "%s: %s wants an integer in [%ld, %ld], not '%s'\n", cli_prog, opt, lo, hi,
                v);
        return -1;
    }
    *out = x;
    return 0;
}

int cli_parse_float(const char *opt, const char *v, float lo, float hi, float *out) {
    char *end;
    float x = strtof(v, &end);
    if (*v == '\0' || *end != '\0' || !(x >= lo && x <= hi)) {
        if (lo == -INFINITY && hi == INFINITY)
            fprintf(stderr, "%s: %s wants a number, not '%s'\n", cli_prog, opt, v);
        else
            fprintf(stderr, "%s: %s wants a number in [%g, %g], not '%s'\n", cli_prog, opt,
                    (double)lo, (double)hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

void cli_print_version(void) {
    printf("%s (libpowerinfer %s, ABI %u)\n", cli_prog, pi_version_string(), pi_abi_version());
}

int cli_fail(const char *what, int st, const char *msg) {
    fprintf(stderr, "%s: %s: %s%s%s\n", cli_prog, what, pi_status_str(st), msg && *msg ? ": " : "",
            msg ? msg : "");
    return 1;
}

void cli_log_stderr(void *user, int level, const char *msg) {
    (void)user;
    static const char *const names[] = {"debug", "info", "warn", "error"};
    fprintf(stderr, "%s: [%s] %s\n", cli_prog, level >= 0 && level <= 3 ? names[level] : "?", msg);
}

/* cli_log_stderr for warnings only: errors reach the user through errbuf. */
static void cli_log_warnings(void *user, int level, const char *msg) {
    if (level == PI_LOG_WARN)
        cli_log_stderr(user, level, msg);
}

void cli_init(int *argc, char ***argv) {
#ifdef _WIN32
    _setmode(_fileno(stdout), _O_BINARY);
    _setmode(_fileno(stderr), _O_BINARY);
    int n = 0;
    wchar_t **w = CommandLineToArgvW(GetCommandLineW(), &n);
    if (!w)
        return;
    char **out = calloc((size_t)n + 1, sizeof *out);
    for (int i = 0; out && i < n; i++) {
        int len = WideCharToMultiByte(CP_UTF8, 0, w[i], -1, NULL, 0, NULL, NULL);
        out[i] = len > 0 ? malloc((size_t)len) : NULL;
        if (!out[i] || WideCharToMultiByte(CP_UTF8, 0, w[i], -1, out[i], len, NULL, NULL) != len) {
            LocalFree(w);
            return; /* out of memory: keep the ANSI arguments */
        }
    }
    LocalFree(w);
    if (out) {
        *argc = n;
        *argv = out;
    }
#else
    (void)argc;
    (void)argv;
#endif
}

FILE *cli_fopen(const char *path, const char *mode) {
#ifdef _WIN32
    wchar_t wp[4096], wm[16];
    if (!MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path, -1, wp, 4096) ||
        !MultiByteToWideChar(CP_UTF8, 0, mode, -1, wm, 16)) {
        errno = ENOENT;
        return NULL;
    }
    FILE *fp = _wfopen(wp, wm);
    if (!fp && errno == EACCES) { /* a directory: say so, as POSIX does */
        DWORD attr = GetFileAttributesW(wp);
        if (attr != INVALID_FILE_ATTRIBUTES && (attr & FILE_ATTRIBUTE_DIRECTORY))
            errno = EISDIR;
    }
    return fp;
#else
    return fopen(path, mode);
#endif
}

double cli_now_s(void) {
    struct timespec ts;
#ifdef CLOCK_MONOTONIC
    clock_gettime(CLOCK_MONOTONIC, &ts);
#else
    timespec_get(&ts, TIME_UTC);
#endif
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *fp = cli_fopen(path, "rb");
    if (!fp)
        return NULL;
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(fp);
        errno = ENOMEM;
        return NULL;
    }
    errno = 0;
    while ((got = fread(buf + n, 1, cap - n - 1, fp)) > 0) {
        n += got;
        if (n > CLI_READ_MAX) {
            free(buf);
            buf = NULL;
            errno = EFBIG;
            break;
        }
        if (n + 1 == cap) {
            /* grow to at most one byte past the cap (and the NUL) */
            size_t ncap = cap * 2 < CLI_READ_MAX + 2 ? cap * 2 : CLI_READ_MAX + 2;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                buf = NULL;
                errno = ENOMEM;
                break;
            }
            buf = nb;
            cap = ncap;
        }
    }
    if (buf && ferror(fp)) { /* errno from the failed read (EISDIR for a directory) */
        free(buf);
        buf = NULL;
        errno = errno ? errno : EIO;
    }
    int err = errno;
    fclose(fp);
    errno = err;
    if (buf) {
        buf[n] = '\0';
        *len = n;
    }
    return buf;
}

void cli_model_params(pi_model_params *mp, char *errbuf, size_t cap, int verbose) {
    pi_model_default_params(mp);
    mp->errbuf = errbuf;
    mp->errbuf_cap = cap;
    mp->load_mode = load_opts.load_mode;
    mp->lock_memory = load_opts.lock_memory;
    if (verbose) {
        mp->log_fn = cli_log_stderr;
        mp->log_level = PI_LOG_DEBUG;
    } else if (load_opts.lock_memory) {
        mp->log_fn = cli_log_warnings;
        mp->log_level = PI_LOG_WARN;
    }
}

int cli_model_open(const char *path, int verbose, pi_model **out) {
    char errbuf[512] = "";
    pi_model_params mp;
    cli_model_params(&mp, errbuf, sizeof errbuf, verbose);
    int st = pi_model_open(path, &mp, out);
    return st == PI_OK ? 0 : cli_fail("cannot open the model", st, errbuf);
}

int cli_ctx_create(const pi_model *m, const pi_ctx_params *cp, pi_ctx **out) {
    pi_ctx_params p = *cp;
    char errbuf[512] = "";
    p.errbuf = errbuf;
    p.errbuf_cap = sizeof errbuf;
    int st = pi_ctx_create(m, &p, out);
    return st == PI_OK ? 0 : cli_fail("cannot create a context", st, errbuf);
}

int cli_pooling(const char *name) {
    const int p = !name                   ? -2
                  : !strcmp(name, "mean") ? PI_POOL_MEAN
                  : !strcmp(name, "last") ? PI_POOL_LAST
                  : !strcmp(name, "cls")  ? PI_POOL_CLS
                                          : -2;
    if (p == -2)
        fprintf(stderr, "%s: --pooling wants mean, last or cls\n", cli_prog);
    return p;
}

int cli_pooling_of(const pi_model *m, int pooling) {
    if (pooling >= 0)
        return pooling;
    const int p = pi_model_pooling(m);
    return p == PI_POOL_MEAN || p == PI_POOL_CLS ? p : PI_POOL_LAST;
}

int cli_sparse_mode(const char *opt, const char *name) {
    static const struct {
        const char *name;
        int mode;
    } modes[] = {
        {"auto", PI_SPARSE_AUTO},   {"sparse", PI_SPARSE_PREDICTOR}, {"predictor", PI_SPARSE_PREDICTOR},
        {"dense", PI_SPARSE_DENSE}, {"oracle", PI_SPARSE_ORACLE},    {"threshold", PI_SPARSE_THRESHOLD},
    };
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
        if (!strcmp(name, modes[i].name))
            return modes[i].mode;
    fprintf(stderr, "%s: %s wants auto, " CLI_SPARSE_MODE_NAMES ", not '%s'\n", cli_prog, opt,
            name);
    return -1;
}
