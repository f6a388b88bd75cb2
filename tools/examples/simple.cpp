// simple.cpp -- libpowerinfer from C++11, with RAII handles.
//
//   c++ -std=c++11 simple.cpp $(pkg-config --cflags --libs powerinfer) -o simple_cpp
//   ./simple_cpp MODEL.gguf "The capital of France is" [N_TOKENS]
//
// Each handle type gets a std::unique_ptr with a deleter that calls the library's
// destructor, so every exit path (including exceptions) releases everything, in the
// reverse order of creation: the model is declared first and so outlives the
// context, sampler and detokenizer that borrow it. Failures become exceptions that
// carry the library's status and message.
//
// SPDX-License-Identifier: MIT
#include <powerinfer.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace pi {

struct ModelDeleter {
    void operator()(pi_model *m) const { pi_model_close(m); }
};
struct CtxDeleter {
    void operator()(pi_ctx *c) const { pi_ctx_destroy(c); }
};
struct SamplerDeleter {
    void operator()(pi_sampler *s) const { pi_sampler_destroy(s); }
};
struct DetokDeleter {
    void operator()(pi_detok *d) const { pi_detok_destroy(d); }
};
typedef std::unique_ptr<pi_model, ModelDeleter> Model;
typedef std::unique_ptr<pi_ctx, CtxDeleter> Context;
typedef std::unique_ptr<pi_sampler, SamplerDeleter> Sampler;
typedef std::unique_ptr<pi_detok, DetokDeleter> Detok;

class Error : public std::runtime_error {
public:
    Error(int status, const std::string &what)
        : std::runtime_error(what + ": " + pi_status_str(status)), status_(status) {}
    int status() const { return status_; }

private:
    int status_;
};

Model open_model(const char *path)
{
    char err[256] = "";
    pi_model_params p;
    pi_model_default_params(&p);
    p.errbuf = err;
    p.errbuf_cap = sizeof err;
    pi_model *m = nullptr;
    int st = pi_model_open(path, &p, &m);
    if (st != PI_OK)
        throw Error(st, std::string("open ") + path + ": " + err);
    return Model(m);
}

Context new_context(const pi_model *model, uint32_t n_ctx)
{
    char err[256] = "";
    pi_ctx_params p;
    pi_ctx_default_params(&p);
    p.n_ctx = n_ctx;
    p.errbuf = err;
    p.errbuf_cap = sizeof err;
    pi_ctx *c = nullptr;
    int st = pi_ctx_create(model, &p, &c);
    if (st != PI_OK)
        throw Error(st, std::string("context: ") + err);
    return Context(c);
}

Sampler new_sampler(const pi_model *model, float temperature)
{
    pi_sampler_params p;
    pi_sampler_default_params(&p);
    p.temperature = temperature;
    pi_sampler *s = nullptr;
    int st = pi_sampler_create(model, &p, &s);
    if (st != PI_OK)
        throw Error(st, "sampler");
    return Sampler(s);
}

Detok new_detok(const pi_model *model)
{
    pi_detok *d = nullptr;
    int st = pi_detok_create(model, 0, &d);
    if (st != PI_OK)
        throw Error(st, "detokenizer");
    return Detok(d);
}

std::vector<int32_t> tokenize(const pi_model *model, const std::string &text)
{
    int64_t n = pi_tokenize(model, text.data(), text.size(), nullptr, 0,
                            PI_TOKENIZE_ADD_SPECIAL);
    if (n < 0)
        throw Error(static_cast<int>(n), "tokenize");
    std::vector<int32_t> toks(static_cast<size_t>(n));
    if (n > 0)
        pi_tokenize(model, text.data(), text.size(), toks.data(), toks.size(),
                    PI_TOKENIZE_ADD_SPECIAL);
    return toks;
}

void decode(pi_ctx *ctx, const int32_t *toks, size_t n)
{
    int st = pi_ctx_decode(ctx, toks, n);
    if (st != PI_OK)
        throw Error(st, std::string("decode: ") + pi_ctx_errmsg(ctx));
}

} // namespace pi

extern "C" int append_to_string(void *user, const char *text, size_t len)
{
    static_cast<std::string *>(user)->append(text, len);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s MODEL PROMPT [N_TOKENS]\n", argv[0]);
        return 2;
    }
    try {
        const int n_predict = argc > 3 ? std::stoi(argv[3]) : 32;
        pi::Model model = pi::open_model(argv[1]);
        std::vector<int32_t> prompt = pi::tokenize(model.get(), argv[2]);
        if (prompt.empty())
            throw pi::Error(PI_ERR_INVALID_ARG, "the prompt gave no tokens");
        pi::Context ctx = pi::new_context(
            model.get(), static_cast<uint32_t>(prompt.size() + n_predict + 1));
        pi::Sampler sampler = pi::new_sampler(model.get(), 0.0f); // greedy
        pi::Detok detok = pi::new_detok(model.get());

        pi::decode(ctx.get(), prompt.data(), prompt.size());
        std::string out;
        for (int i = 0; i < n_predict; i++) {
            int32_t tok;
            int st = pi_sample(sampler.get(), ctx.get(), &tok);
            if (st != PI_OK)
                throw pi::Error(st, "sample");
            if (pi_model_token_is_eog(model.get(), tok))
                break;
            pi_detok_push(detok.get(), tok, append_to_string, &out);
            pi::decode(ctx.get(), &tok, 1);
        }
        pi_detok_flush(detok.get(), append_to_string, &out);
        std::printf("%s%s\n", argv[2], out.c_str());
    } catch (const std::exception &e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
