#!/usr/bin/env python3
"""Do two greedy continuations of one prompt agree up to a near-tie?

    greedy_agree.py MODEL PROMPT N_TOKENS TEXT_HOST TEXT_OTHER [--tol NATS] [--min-common N]

Two builds whose kernels round differently (8-bit activations in NEON's dot-product
blocks against AVX-512's VNNI groups) may pick different tokens where the model's two
best logits lie within their rounding noise, and from then on the texts are unrelated.
This script decides whether a difference is that and nothing worse, using the host
library (PI_LIBRARY, through the Python bindings):

  1. it decodes the prompt greedily on the host, N_TOKENS tokens, and requires the text
     to be TEXT_HOST (the host pi-run's output, so that the walk below is the one the
     host tool made);
  2. at the first step where TEXT_OTHER leaves the host's text, the other build's token
     is the best-scoring token whose piece TEXT_OTHER continues with; the host's logit
     of its own choice may exceed that token's by at most --tol (default 0.1 nats);
  3. the texts share at least --min-common tokens (default 8) before they part.

Exit 0 when they agree (identical or a near-tie), 1 otherwise, with the reason."""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import powerinfer as pi  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("prompt")
    ap.add_argument("n_tokens", type=int)
    ap.add_argument("host")
    ap.add_argument("other")
    ap.add_argument("--tol", type=float, default=0.1)
    ap.add_argument("--min-common", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    prompt = a.prompt.encode()
    host = a.host.encode()
    other = a.other.encode()
    # pi-run prints the prompt, then the continuation (the shell strips trailing newlines)
    for name, t in (("host", host), ("other", other)):
        if not t.startswith(prompt):
            print(f"greedy_agree: the {name} text does not start with the prompt")
            return 1
    host, other = host[len(prompt):], other[len(prompt):]
    if host == other:
        print("greedy_agree: the texts are the same")
        return 0

    with pi.Model(a.model) as m, pi.Context(m, n_threads=a.threads) as ctx:
        ctx.decode(m.tokenize(a.prompt, add_special=True))
        done = b""  # the host's text so far
        for step in range(a.n_tokens):
            logits = ctx.logits()
            best = max(range(len(logits)), key=logits.__getitem__)
            if m.is_eog(best):
                break
            piece = m.token_to_piece(best)
            rest = other[len(done):] if other.startswith(done) else None
            if rest is not None and not (rest.startswith(piece) and
                                         (piece or not rest)):
                # the other build parted here: its token's piece begins its rest
                cands = [t for t in range(len(logits))
                         if (p := m.token_to_piece(t)) and rest.startswith(p)]
                if not cands:
                    print(f"greedy_agree: at step {step} no token begins the other text's "
                          f"rest {rest[:20]!r}")
                    return 1
                alt = max(cands, key=logits.__getitem__)
                gap = float(logits[best]) - float(logits[alt])
                print(f"greedy_agree: step {step}: host {piece!r}, other "
                      f"{m.token_to_piece(alt)!r}, host logit gap {gap:.4f} (tol {a.tol})")
                if step < a.min_common:
                    print(f"greedy_agree: they part after {step} tokens, fewer than "
                          f"{a.min_common}")
                    return 1
                if gap > a.tol:
                    print("greedy_agree: not a near-tie")
                    return 1
                # the host's own walk must still be what the host tool printed
                rest_host = host[len(done):]
                if not rest_host.startswith(piece):
                    print("greedy_agree: the host bindings' greedy text is not the "
                          "host pi-run's")
                    return 1
                print("greedy_agree: the texts part at a near-tie")
                return 0
            done += piece
            if not host.startswith(done):
                print(f"greedy_agree: the host bindings' greedy text {done!r} is not "
                      f"the host pi-run's {host!r}")
                return 1
            ctx.decode([best])
    print("greedy_agree: the host's greedy text never parts from the other one, yet "
          "they differ (one is longer)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
