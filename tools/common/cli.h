/* cli.h -- what the command-line tools (pi-run, pi-bench, pi-perplexity, pi-batched,
 * pi-server) share: the common options, option values, messages to stderr, a clock,
 * reading a file, opening a model and creating a context. Public API only.
 *
 * Every message starts with the tool's name, which each tool defines once:
 *     const char cli_prog[] = "pi-run";
 * (a constant, so there is nothing to initialise and nothing to forget). */
#ifndef PI_TOOLS_CLI_H
#define PI_TOOLS_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "powerinfer.h"

extern const char cli_prog[];

/* What cli_common_option answers when the tool is not to exit. */
enum {
    CLI_OPT_OTHER = -1, /* not a common option: the tool's own (with its value v, if an option) */
    CLI_OPT_TAKEN = -2  /* a common option without a value, done: go on with the next argument */
};

/* The options every tool shares, for the argument a followed by v (NULL when a is the
 * last one): -h and --help print usage(stdout), --version cli_print_version(), and
 * return 0; -v and --verbose set *verbose to 1 and return CLI_OPT_TAKEN; the model
 * loading options (cli_load_option) return CLI_OPT_TAKEN; any other
 * option (-X, not "-") without a value prints "PROG: -X needs a value (or is unknown; see
 * --help)" and returns 2. Otherwise CLI_OPT_OTHER. A result >= 0 is the exit status.
 * Match the tool's own options that take no value before calling this. */
int cli_common_option(const char *a, const char *v, void (*usage)(FILE *out), int *verbose);

/* How the tool loads its model, from --no-mmap (read the file into memory:
 * PI_LOAD_READ, so that changing the file on disk cannot affect the running tool) and
 * --mlock (keep the model in RAM; a warning, not a failure, when the system refuses).
 * A tool parses one command line, so these are recorded for the process: returns 1
 * after recording argument a when it is one of them, else 0. cli_model_params applies
 * them. */
int cli_load_option(const char *a);

/* The PI_CHAT_* format named `name` (auto, chatml, llama2, llama3, gemma, phi3,
 * mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7, falcon), or -1 after printing
 * "PROG: OPT wants ..." with every name. */
int cli_chat_format(const char *opt, const char *name);

/* --sparse-mode NAME (opt names the option in the message): auto, sparse (or
 * predictor), dense, oracle, threshold as PI_SPARSE_*, or -1 after printing
 * "PROG: OPT wants ...". */
int cli_sparse_mode(const char *opt, const char *name);

/* Those names, for --help. */
#define CLI_SPARSE_MODE_NAMES "sparse, dense, oracle, threshold"

/* --pooling NAME: PI_POOL_MEAN, _LAST or _CLS; -2 after printing what it wants. */
int cli_pooling(const char *name);
/* The pooling to use: `pooling` when set (>= 0), else the file's when the library pools
 * that way, else the last token (decoder models have none). */
int cli_pooling_of(const pi_model *m, int pooling);

/* Those names, for --help. */
#define CLI_CHAT_FORMAT_NAMES                                                              \
    "auto (the model's template), chatml, llama2, llama3,\n"                               \
    "                          gemma, phi3, mistral-v1, mistral-v3, mistral-v3-tekken,\n"  \
    "                          mistral-v7, falcon"

/* The lines of --help for cli_load_option's options, in the tools' column layout. */
#define CLI_LOAD_USAGE                                                                     \
    "  --no-mmap               read the model into memory instead of mapping it: the\n"   \
    "                          file may then change on disk without affecting the run\n"  \
    "  --mlock                 lock the model in RAM (never paged out); warns and goes\n" \
    "                          on when the system refuses (see ulimit -l)\n"

/* The value v of option opt as an integer in [lo, hi], in `base` (strtol's: 10, or 0
 * for C's 0x and 0 prefixes). Returns 0 and *out, or -1 after printing
 * "PROG: OPT wants an integer in [LO, HI], not 'V'". */
int cli_parse_long(const char *opt, const char *v, int base, long lo, long hi, long *out);

/* The value v of option opt as a float in [lo, hi] (NaN never is). Returns 0 and
 * *out, or -1 after printing "PROG: OPT wants a number in [LO, HI], not 'V'" (without
 * the range when it is [-inf, inf]). */
int cli_parse_float(const char *opt, const char *v, float lo, float hi, float *out);

/* Prints "PROG (libpowerinfer VERSION, ABI N)" to stdout: --version. */
void cli_print_version(void);

/* Prints "PROG: WHAT: STATUS: MSG" (no ": MSG" when msg is NULL or empty) to stderr;
 * returns 1, the tools' exit status for a failure. */
int cli_fail(const char *what, int st, const char *msg);

/* A pi_log_fn printing "PROG: [LEVEL] MSG" to stderr (user unused). */
void cli_log_stderr(void *user, int level, const char *msg);

/* Call first in main. Windows: replace *argv with the command line in UTF-8 (from
 * GetCommandLineW), so that paths and prompts outside the ANSI code page survive (the
 * strings live until exit), and put stdout and stderr in binary mode, so that the
 * model's text and the tools' output are the same bytes as on POSIX (no CR added to
 * each LF). Elsewhere a no-op. */
void cli_init(int *argc, char ***argv);

/* fopen with a UTF-8 path (Windows: _wfopen); NULL with errno set. */
FILE *cli_fopen(const char *path, const char *mode);

/* Seconds on a monotonic clock (where the system has one), for intervals. */
double cli_now_s(void);

/* The most cli_read_file reads: 64 MiB, a quarter of what pi_tokenize accepts. */
#define CLI_READ_MAX ((size_t)64 << 20)

/* The whole file, NUL-terminated, malloc'd (*len excludes the NUL): a regular file, or
 * a pipe or FIFO (such as /dev/stdin) read to its end. NULL with errno set when it
 * cannot be opened or read (EISDIR for a directory), on ENOMEM, and with EFBIG when it
 * holds more than CLI_READ_MAX bytes (/dev/zero never ends). */
char *cli_read_file(const char *path, size_t *len);

/* Default model params writing their message to errbuf[cap], with the loading options
 * of cli_load_option; when verbose, every message of the library (PI_LOG_DEBUG and up)
 * goes to cli_log_stderr; otherwise, with --mlock, its warnings do (the one saying the
 * model could not be locked). */
void cli_model_params(pi_model_params *mp, char *errbuf, size_t cap, int verbose);

/* pi_model_open with cli_model_params. Returns 0 and *out, or 1 (*out NULL) after
 * printing "PROG: cannot open the model: STATUS: MSG". */
int cli_model_open(const char *path, int verbose, pi_model **out);

/* pi_ctx_create with *cp (borrowed for the call) and an error buffer of its own.
 * Returns 0 and *out, or 1 (*out NULL) after printing
 * "PROG: cannot create a context: STATUS: MSG". */
int cli_ctx_create(const pi_model *m, const pi_ctx_params *cp, pi_ctx **out);

#endif
