"""generate(): stream the text a model continues a prompt with."""

from .context import Context
from .model import Detokenizer
from .sampler import Sampler


def generate(model, prompt, max_tokens=256, *, chat=False, system=None, ctx=None,
             sampler=None, n_ctx=0, n_threads=0, special=False, **sampler_params):
    """Yield the text pieces the model generates after prompt (well-formed UTF-8,
    never a split code point), stopping at an end-of-generation token, after
    max_tokens tokens, or when the context is full.

    prompt:   the text (str or bytes). With chat=True it is the user's message,
              rendered with the model's chat template (and `system`, if given) and
              tokenized with special-token parsing; the answer excludes the prompt.
    ctx:      a Context to continue (the prompt is appended at its position; BOS is
              added only at position 0); None: a new one (n_ctx, n_threads), closed
              when the iterator finishes or is closed.
    sampler:  a Sampler to use; None: a new one from **sampler_params (temperature,
              top_k, top_p, min_p, repeat_penalty, frequency_penalty, presence_penalty,
              penalty_last_n, seed; temperature=0 is greedy).
    special:  render control tokens as text.

        for piece in generate(model, "The capital of France is", 16, temperature=0):
            print(piece, end="", flush=True)

    The iterator uses its context from the thread that advances it."""
    if chat:
        msgs = ([("system", system)] if system is not None else []) + [("user", prompt)]
        text = model.chat_apply(msgs, add_assistant=True)
        parse_special = True
    else:
        text, parse_special = prompt, False
    if sampler is not None and sampler_params:
        raise TypeError("give either sampler or sampler parameters, not both")
    own_ctx = ctx is None
    if own_ctx:
        ctx = Context(model, n_ctx=n_ctx, n_threads=n_threads)
    elif ctx.model is not model:
        raise ValueError("ctx belongs to another model")
    own_sampler = sampler is None
    detok = None
    try:
        if own_sampler:
            sampler = Sampler(model, **sampler_params)
        detok = Detokenizer(model, special=special)
        tokens = model.tokenize(text, add_special=ctx.pos == 0,
                                parse_special=parse_special)
        if tokens:
            ctx.decode(tokens)
            sampler.accept(tokens)
        produced = 0
        while produced < max_tokens:
            tok = sampler.sample(ctx)
            if model.is_eog(tok):
                break
            piece = detok.push(tok)
            produced += 1
            if piece:
                yield piece
            if produced >= max_tokens or ctx.pos >= ctx.n_ctx:
                break
            ctx.decode([tok])
        tail = detok.flush()
        if tail:
            yield tail
    finally:
        if detok is not None:
            detok.close()
        if own_sampler and sampler is not None:
            sampler.close()
        if own_ctx:
            ctx.close()
