/* sample.h -- the sampler's candidate set, for tests. */
#ifndef PI_INFER_SAMPLE_H
#define PI_INFER_SAMPLE_H

#include <stdint.h>

#include "powerinfer.h"

/* The candidates a draw at temperature > 0 is among, after penalties, top-k, top-p and
 * min-p (in that order, each probability at temperature 1): returns their number k, and
 * leaves them in the sampler's buffer, best first (*sorted 1; equal logits by lower id),
 * or, when nothing is cut (top_k 0 or >= n_vocab, top_p >= 1, min_p 0), all of them in
 * id order (*sorted 0). *mx: the largest logit. The whole vocabulary is sorted only as
 * far as a cut reaches: a min-p cut is taken as a set first, a top-p cut grows a sorted
 * prefix until its probability reaches top_p. `ids` of the candidates: see
 * pi_sampler_candidate_ids. */
int64_t pi_sampler_candidates(pi_sampler *s, const float *logits, float *mx, int *sorted);

/* Copy the ids of the first k candidates of the last pi_sampler_candidates to ids[k]. */
void pi_sampler_candidate_ids(const pi_sampler *s, int64_t k, int32_t *ids);

#endif
