//! Several sequences in one context (decode_batch, batch_logits, the seq_* calls),
//! state save and restore, and sampling from a batch entry's logits, against a real
//! model: PI_TEST_MODEL names a small GGUF model (SmolLM2-135M-Instruct:
//! `python3 tools/smollm2_path.py` prints its path). Without it these tests fail, on
//! purpose, as tests/generate.rs does.

use powerinfer::{sys, BatchEntry, Context, Error, Model, Sampler, SamplerParams, TokenizeFlags};
use std::ops::Bound;
use std::path::PathBuf;

mod common;
use common::open;

/// A context of `n_seq` sequences of 128 positions on two threads.
fn context(model: &Model, n_seq: u32) -> Context<'_> {
    Context::builder().n_ctx(128).n_threads(2).n_seq_max(n_seq).build(model).expect("context")
}

fn tokens(model: &Model, text: &str) -> Vec<i32> {
    model.tokenize(text, TokenizeFlags::ADD_SPECIAL).expect("tokenize")
}

const PROMPTS: [&str; 2] = ["The capital of France is", "Once upon a time, there was a"];

fn argmax(logits: &[f32]) -> i32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as i32
}

/// max |a - b| / max |a|, as the C tests measure it.
fn rel(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let mut mx = 1e-6f64;
    let mut d = 0f64;
    for (&x, &y) in a.iter().zip(b) {
        mx = mx.max(f64::from(x).abs());
        d = d.max((f64::from(x) - f64::from(y)).abs());
    }
    d / mx
}

/// Logits after every token of `prompt`, decoded one token at a time in a context of its
/// own, then `n_gen` greedy tokens and the logits after each.
fn alone(model: &Model, prompt: &[i32], n_gen: usize) -> (Vec<Vec<f32>>, Vec<i32>) {
    let mut ctx = context(model, 1);
    let mut logits = Vec::new();
    for &t in prompt {
        ctx.decode(&[t]).expect("decode");
        logits.push(ctx.logits().to_vec());
    }
    let mut generated = Vec::new();
    for _ in 0..n_gen {
        let t = argmax(ctx.logits());
        generated.push(t);
        ctx.decode(&[t]).expect("decode");
        logits.push(ctx.logits().to_vec());
    }
    (logits, generated)
}

fn tmp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pi-rust-batch-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temporary directory");
    dir
}

/// Two prompts interleaved in one batch (every entry asking for logits), then greedy
/// steps that decode both sequences in one batch each: every entry's logits are within
/// 1e-3 of max |logit| of the same token decoded alone in a context of its own, and
/// each sequence generates the same greedy tokens as alone.
#[test]
fn batch_of_two_sequences_matches_each_alone() {
    let model = open();
    let prompts: Vec<Vec<i32>> = PROMPTS.iter().map(|p| tokens(&model, p)).collect();
    const N_GEN: usize = 6;
    let reference: Vec<_> = prompts.iter().map(|p| alone(&model, p, N_GEN)).collect();

    let mut ctx = context(&model, 2);
    assert_eq!(ctx.n_seq_max(), 2);
    // Round robin, with the sequence-0 entries at explicit positions.
    let mut entries = Vec::new();
    let mut at = Vec::new(); // (seq, index in its sequence) of each entry
    for i in 0..prompts[0].len().max(prompts[1].len()) {
        for (s, p) in prompts.iter().enumerate() {
            if let Some(&t) = p.get(i) {
                let mut e = BatchEntry::new(t, s as i32).logits(true);
                if s == 0 {
                    e = e.at(i as i32);
                }
                entries.push(e);
                at.push((s, i));
            }
        }
    }
    ctx.decode_batch(&entries).expect("decode_batch");
    let mut worst = 0f64;
    for (i, &(s, k)) in at.iter().enumerate() {
        let got = ctx.batch_logits(i).expect("entry asked for logits");
        assert_eq!(got.len(), model.n_vocab() as usize);
        worst = worst.max(rel(&reference[s].0[k], got));
    }
    assert!(ctx.batch_logits(entries.len()).is_none(), "out of range");
    assert_eq!(ctx.logits(), ctx.batch_logits(entries.len() - 1).unwrap(), "last entry's");
    for (s, p) in prompts.iter().enumerate() {
        assert_eq!(ctx.seq_len(s as i32).unwrap(), p.len() as i64);
    }
    assert_eq!(ctx.pos(), prompts[0].len() as i64, "pos() is sequence 0's length");

    // Greedy steps, both sequences in one batch each; the rows are read back by entry.
    let last = |s: usize| at.iter().rposition(|&(q, _)| q == s).unwrap();
    let mut next: Vec<i32> = (0..2).map(|s| argmax(ctx.batch_logits(last(s)).unwrap())).collect();
    let mut generated = [Vec::new(), Vec::new()];
    for step in 0..N_GEN {
        for s in 0..2 {
            generated[s].push(next[s]);
        }
        let batch =
            [BatchEntry::new(next[0], 0).logits(true), BatchEntry::new(next[1], 1).logits(true)];
        ctx.decode_batch(&batch).expect("decode_batch step");
        for (s, p) in prompts.iter().enumerate() {
            let got = ctx.batch_logits(s).unwrap();
            worst = worst.max(rel(&reference[s].0[p.len() + step], got));
            next[s] = argmax(got);
        }
    }
    eprintln!("batch vs alone: worst {worst:.2e} of max |logit|");
    assert!(worst < 1e-3, "batch logits differ from each sequence alone: {worst:.2e}");
    for s in 0..2 {
        assert_eq!(generated[s], reference[s].1, "greedy tokens of sequence {s}");
    }
    let text = model.detokenize(&generated[0]).unwrap();
    assert!(text.starts_with(" Paris"), "sequence 0 continued with {text:?}");
}

/// An entry that did not ask for logits has none; the context's logits are those of the
/// last entry that did; decode() appends to sequence 0.
#[test]
fn batch_logits_only_for_entries_that_ask() {
    let model = open();
    let p = tokens(&model, PROMPTS[0]);
    let mut ctx = context(&model, 2);
    let entries: Vec<_> = p
        .iter()
        .enumerate()
        .map(|(i, &t)| BatchEntry::new(t, 1).logits(i == 1))
        .chain(std::iter::once(BatchEntry::new(p[0], 0)))
        .collect();
    ctx.decode_batch(&entries).unwrap();
    for i in 0..entries.len() {
        assert_eq!(ctx.batch_logits(i).is_some(), i == 1, "entry {i}");
    }
    assert_eq!(ctx.logits(), ctx.batch_logits(1).unwrap());
    // A plain decode appends to sequence 0 only.
    ctx.decode(&[p[1]]).unwrap();
    assert_eq!(ctx.seq_len(0).unwrap(), 2);
    assert_eq!(ctx.seq_len(1).unwrap(), p.len() as i64);
}

/// Decode one token into `seq` and return its logits.
fn step(ctx: &mut Context<'_>, seq: i32, token: i32) -> Vec<f32> {
    ctx.decode_batch(&[BatchEntry::new(token, seq).logits(true)]).expect("step");
    ctx.batch_logits(0).unwrap().to_vec()
}

/// seq_copy: the copy continues bit for bit like its source. seq_remove of a suffix
/// continues bit for bit like before the suffix; of a middle range, like a context that
/// never saw it as far as the next token goes (see below). seq_keep and seq_clear empty
/// the others / one.
#[test]
fn seq_copy_remove_keep_clear() {
    let model = open();
    let p = tokens(&model, PROMPTS[1]);
    let (a, b) = (model.tokenize(" king", TokenizeFlags::NONE).unwrap()[0], p[2]);
    let mut ctx = context(&model, 3);
    let entries: Vec<_> = p
        .iter()
        .enumerate()
        .map(|(i, &t)| BatchEntry::new(t, 0).logits(i + 1 == p.len()))
        .collect();
    ctx.decode_batch(&entries).unwrap();
    ctx.seq_copy(0, 2).unwrap();
    assert_eq!(ctx.seq_len(2).unwrap(), p.len() as i64);
    assert_eq!(ctx.seq_len(1).unwrap(), 0);
    let from_src = step(&mut ctx, 0, a);
    let from_copy = step(&mut ctx, 2, a);
    assert_eq!(from_src, from_copy, "the copy continues bit for bit like its source");
    // The two diverge: a different token into the copy.
    let other = step(&mut ctx, 2, b);
    assert_ne!(other, from_src);

    // Suffix: sequence 2 is p + [a, b]; removing [a, b] then decoding a again gives
    // sequence 0's logits after p + [a] bit for bit (no key moves).
    ctx.seq_remove(2, p.len() as i64..).unwrap();
    assert_eq!(ctx.seq_len(2).unwrap(), p.len() as i64);
    assert_eq!(step(&mut ctx, 2, a), from_src, "suffix removed");

    // Middle: "The capital of <junk> France", copied; the junk removed from one copy,
    // then " is" into both. The keys after the junk move down (rotated back), so the
    // trimmed copy is a sentence about France again: it predicts " Paris" like a fresh
    // context that never saw the junk, and is closer to it than the untrimmed copy. (Not
    // equal: the cache after the junk was computed attending to it.)
    let head = model.tokenize("The capital of", TokenizeFlags::ADD_SPECIAL).unwrap();
    let junk = model.tokenize(" banana umbrella seventeen", TokenizeFlags::NONE).unwrap();
    let tail = model.tokenize(" France", TokenizeFlags::NONE).unwrap();
    let is = model.tokenize(" is", TokenizeFlags::NONE).unwrap()[0];
    let mut fresh = context(&model, 1);
    fresh.decode(&[&head[..], &tail[..], &[is]].concat()).unwrap();
    let paris = argmax(fresh.logits());
    assert_eq!(model.detokenize(&[paris]).unwrap(), " Paris");
    ctx.reset().unwrap(); // clears every sequence
    assert_eq!((0..3).map(|s| ctx.seq_len(s).unwrap()).sum::<i64>(), 0);
    let full = [&head[..], &junk[..], &tail[..]].concat();
    ctx.decode_batch(&full.iter().map(|&t| BatchEntry::new(t, 0)).collect::<Vec<_>>()).unwrap();
    ctx.seq_copy(0, 1).unwrap();
    let (j0, j1) = (head.len() as i64, (head.len() + junk.len()) as i64);
    ctx.seq_remove(0, j0..j1).unwrap();
    assert_eq!(ctx.seq_len(0).unwrap(), (head.len() + tail.len()) as i64);
    let trimmed = step(&mut ctx, 0, is);
    let untrimmed = step(&mut ctx, 1, is);
    let (d_trim, d_junk) = (rel(fresh.logits(), &trimmed), rel(fresh.logits(), &untrimmed));
    eprintln!(
        "seq_remove of a middle range: {d_trim:.2e} of max |logit| from a fresh context \
         ({d_junk:.2e} without the removal)"
    );
    assert_eq!(argmax(&trimmed), paris);
    assert!(d_trim < d_junk, "removal brought it closer: {d_trim:.2e} vs {d_junk:.2e}");
    assert_eq!(ctx.seq_len(1).unwrap(), full.len() as i64 + 1, "the copy kept the junk");
    ctx.seq_remove(0, 1..=1).unwrap();
    assert_eq!(ctx.seq_len(0).unwrap(), (head.len() + tail.len()) as i64);

    ctx.seq_copy(0, 2).unwrap();
    ctx.seq_keep(2).unwrap();
    assert_eq!(ctx.seq_len(0).unwrap(), 0);
    assert_eq!(ctx.seq_len(1).unwrap(), 0);
    assert_eq!(ctx.seq_len(2).unwrap(), (head.len() + tail.len()) as i64);
    ctx.seq_clear(2).unwrap();
    assert_eq!(ctx.seq_len(2).unwrap(), 0);
    ctx.seq_copy(2, 0).unwrap(); // copying an empty sequence empties the target
    assert_eq!(ctx.seq_len(0).unwrap(), 0);
}

/// The context's next logits after decoding `token` into each of `seqs`, in one batch.
fn next_logits(ctx: &mut Context<'_>, seqs: &[i32], token: i32) -> Vec<Vec<f32>> {
    let entries: Vec<_> = seqs.iter().map(|&s| BatchEntry::new(token, s).logits(true)).collect();
    ctx.decode_batch(&entries).expect("decode_batch");
    (0..seqs.len()).map(|i| ctx.batch_logits(i).unwrap().to_vec()).collect()
}

/// A context with both prompts decoded, sequence 0 and 1.
fn two_prompts(model: &Model, n_seq: u32) -> Context<'_> {
    let mut ctx = context(model, n_seq);
    let mut entries = Vec::new();
    for (s, text) in PROMPTS.iter().enumerate() {
        let p = tokens(model, text);
        let n = p.len();
        entries.extend(
            p.into_iter().enumerate().map(|(i, t)| BatchEntry::new(t, s as i32).logits(i + 1 == n)),
        );
    }
    ctx.decode_batch(&entries).expect("decode the prompts");
    ctx
}

/// A whole-context state loaded into a fresh context (from memory and from a file)
/// restores the lengths and last logits, and the next logits are bit for bit those of
/// the saved context; a one-sequence state loaded into another sequence continues that
/// sequence bit for bit.
#[test]
fn state_round_trip_is_bit_exact() {
    let model = open();
    let token = model.tokenize(" and", TokenizeFlags::NONE).unwrap()[0];
    let mut ctx = two_prompts(&model, 3);
    let whole = ctx.state_save().expect("state_save");
    let one = ctx.seq_state_save(1).expect("seq_state_save");
    assert!(one.len() < whole.len());
    let dir = tmp_dir("round-trip");
    let file = dir.join("ctx.state");
    let one_file = dir.join("seq1.state");
    ctx.state_save_file(&file).expect("state_save_file");
    ctx.seq_state_save_file(1, &one_file).expect("seq_state_save_file");
    assert_eq!(std::fs::read(&file).unwrap(), whole, "the file holds the same bytes");
    let lens: Vec<i64> = (0..3).map(|s| ctx.seq_len(s).unwrap()).collect();
    let last = ctx.logits().to_vec();
    assert!(!last.is_empty());
    let want = next_logits(&mut ctx, &[0, 1], token);

    for from_file in [false, true] {
        let mut r = context(&model, 3);
        if from_file {
            r.state_load_file(&file).expect("state_load_file");
        } else {
            r.state_load(&whole).expect("state_load");
        }
        assert_eq!((0..3).map(|s| r.seq_len(s).unwrap()).collect::<Vec<_>>(), lens);
        assert_eq!(r.logits(), &last[..], "the last logits are restored");
        assert!(r.batch_logits(0).is_none(), "a load drops the batch rows");
        assert_eq!(next_logits(&mut r, &[0, 1], token), want, "from_file {from_file}");
    }
    for from_file in [false, true] {
        let mut r = context(&model, 3);
        if from_file {
            r.seq_state_load_file(2, &one_file).expect("seq_state_load_file");
        } else {
            r.seq_state_load(2, &one).expect("seq_state_load");
        }
        assert_eq!(r.seq_len(2).unwrap(), lens[1]);
        assert_eq!(r.seq_len(0).unwrap(), 0);
        assert_eq!(next_logits(&mut r, &[2], token)[0], want[1], "from_file {from_file}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn assert_status(r: Result<(), Error>, status: i32, what: &str) -> Error {
    let e = r.expect_err(what);
    assert_eq!(e.status(), status, "{what}: {e}");
    assert!(!e.message().is_empty(), "{what}: the error carries a message");
    e
}

/// Corrupted, truncated, misplaced and foreign-sized states are refused with an error
/// and a message, and the context continues exactly as before the refusals.
#[test]
fn bad_states_are_refused_and_the_context_still_works() {
    let model = open();
    let token = model.tokenize(" and", TokenizeFlags::NONE).unwrap()[0];
    let mut src = two_prompts(&model, 2);
    let whole = src.state_save().unwrap();
    let one = src.seq_state_save(0).unwrap();
    let want = next_logits(&mut src, &[0, 1], token);

    let mut r = context(&model, 2);
    r.state_load(&whole).unwrap();
    let lens: Vec<i64> = (0..2).map(|s| r.seq_len(s).unwrap()).collect();
    let logits = r.logits().to_vec();

    let mut bad = whole.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 1;
    let e = assert_status(r.state_load(&bad), sys::PI_ERR_FORMAT, "one bit flipped");
    assert!(e.message().contains("checksum"), "{e}");
    assert_status(r.state_load(&whole[..whole.len() - 1]), sys::PI_ERR_FORMAT, "truncated");
    assert_status(r.state_load(&whole[..10]), sys::PI_ERR_FORMAT, "10 bytes");
    assert_status(r.state_load(&[]), sys::PI_ERR_FORMAT, "empty");
    let mut longer = whole.clone();
    longer.push(0);
    assert_status(r.state_load(&longer), sys::PI_ERR_FORMAT, "a byte appended");
    assert_status(r.state_load(&one), sys::PI_ERR_INVALID_ARG, "a one-sequence state as whole");
    assert_status(r.seq_state_load(1, &whole), sys::PI_ERR_INVALID_ARG, "a whole state into a seq");
    assert_status(r.seq_state_load(2, &one), sys::PI_ERR_INVALID_ARG, "sequence 2 of 2");
    assert_status(r.seq_state_load(-1, &one), sys::PI_ERR_INVALID_ARG, "sequence -1");
    let e = assert_status(
        r.state_load_file("/nonexistent/powerinfer-rust.state"),
        sys::PI_ERR_IO,
        "missing file",
    );
    assert!(e.message().contains("/nonexistent/powerinfer-rust.state"), "{e}");
    assert_status(r.state_load_file("a\0b"), sys::PI_ERR_INVALID_ARG, "NUL in the path");
    assert_status(r.state_save_file("/nonexistent/dir/x.state"), sys::PI_ERR_IO, "unwritable file");
    let mut small = context(&model, 1);
    assert_status(small.state_load(&whole), sys::PI_ERR_RANGE, "2 sequences into 1");
    let mut short =
        Context::builder().n_ctx(4).n_threads(2).n_seq_max(2).build(&model).expect("context");
    assert_status(short.state_load(&whole), sys::PI_ERR_RANGE, "longer than n_ctx");
    assert_eq!(short.seq_len(0).unwrap(), 0);

    // r is as it was: lengths, logits, and the next logits bit for bit.
    assert_eq!((0..2).map(|s| r.seq_len(s).unwrap()).collect::<Vec<_>>(), lens);
    assert_eq!(r.logits(), &logits[..]);
    assert_eq!(next_logits(&mut r, &[0, 1], token), want);
}

/// Bad arguments are errors (never panics) and change nothing; each error carries the
/// message of its own call, not an earlier one's.
#[test]
fn bad_arguments_are_errors() {
    let model = open();
    let p = tokens(&model, PROMPTS[0]);
    let mut ctx = context(&model, 2);
    ctx.decode_batch(&[
        BatchEntry::new(p[0], 0).logits(true),
        BatchEntry::new(p[1], 1).logits(true),
    ])
    .unwrap();
    let before: Vec<Vec<f32>> = (0..2).map(|i| ctx.batch_logits(i).unwrap().to_vec()).collect();
    let n_vocab = model.n_vocab() as i32;
    let ok = BatchEntry::new(p[1], 0);

    assert_status(ctx.decode_batch(&[]), sys::PI_ERR_INVALID_ARG, "empty batch");
    let e = assert_status(
        ctx.decode_batch(&[ok, BatchEntry::new(n_vocab, 1)]),
        sys::PI_ERR_INVALID_ARG,
        "token outside the vocabulary",
    );
    assert!(e.message().contains("vocabulary"), "{e}");
    assert_status(ctx.decode_batch(&[BatchEntry::new(-1, 1)]), sys::PI_ERR_INVALID_ARG, "token -1");
    let e = assert_status(
        ctx.decode_batch(&[ok, BatchEntry::new(p[1], 2)]),
        sys::PI_ERR_INVALID_ARG,
        "sequence 2 of 2",
    );
    assert!(e.message().contains("sequence 2"), "{e}");
    assert_status(
        ctx.decode_batch(&[BatchEntry::new(p[1], -1)]),
        sys::PI_ERR_INVALID_ARG,
        "seq -1",
    );
    assert_status(ctx.decode_batch(&[ok.at(5)]), sys::PI_ERR_INVALID_ARG, "not the next position");
    assert_status(
        ctx.decode_batch(&[ok.at(1), ok.at(1)]),
        sys::PI_ERR_INVALID_ARG,
        "position twice",
    );
    let many = vec![ok; ctx.n_ctx() as usize];
    assert_status(ctx.decode_batch(&many), sys::PI_ERR_RANGE, "past n_ctx");

    // The library refuses these ids without a message: the crate checks them first, so
    // the message is about this call, not the last failing decode ("past n_ctx").
    for (r, what) in [
        (ctx.seq_copy(0, 2), "seq_copy to 2"),
        (ctx.seq_copy(-1, 0), "seq_copy from -1"),
        (ctx.seq_keep(2), "seq_keep 2"),
        (ctx.seq_clear(2), "seq_clear 2"),
        (ctx.seq_clear(-1), "seq_clear -1 (reset clears all)"),
        (ctx.seq_remove(7, 0..1), "seq_remove of sequence 7"),
        (ctx.seq_len(2).map(drop), "seq_len 2"),
        (ctx.seq_len(-1).map(drop), "seq_len -1"),
        (ctx.seq_state_save(2).map(drop), "seq_state_save 2"),
        (ctx.seq_state_save(-1).map(drop), "seq_state_save -1"),
        (ctx.seq_state_save_file(2, "/tmp/never-written.state"), "seq_state_save_file 2"),
        (ctx.seq_state_load_file(-1, "/tmp/never-read.state"), "seq_state_load_file -1"),
    ] {
        let e = assert_status(r, sys::PI_ERR_INVALID_ARG, what);
        assert!(e.message().contains("sequence"), "{what}: {e}");
        assert!(!e.message().contains("context of"), "{what}: a stale message: {e}");
    }
    // Ranges outside 0..=len (len 1), including negative bounds and overflow.
    for (r, what) in [
        (ctx.seq_remove(0, 0..2), "past the end"),
        (ctx.seq_remove(0, (Bound::Included(1), Bound::Excluded(0))), "reversed"),
        (ctx.seq_remove(0, -1..), "negative start"),
        (ctx.seq_remove(0, ..-1), "negative end (not 'to the end')"),
        (ctx.seq_remove(0, 0..=i64::MAX), "end overflows"),
        (ctx.seq_remove(0, (Bound::Excluded(i64::MAX), Bound::Unbounded)), "start overflows"),
    ] {
        assert_status(r, sys::PI_ERR_RANGE, what);
    }
    assert!(ctx.batch_logits(usize::MAX).is_none());
    let e = Context::builder().n_seq_max(257).build(&model).unwrap_err();
    assert_eq!(e.status(), sys::PI_ERR_INVALID_ARG, "{e}");
    assert!(e.message().contains("n_seq_max"), "{e}");

    // Nothing changed: lengths, the rows of the last good batch, and what comes next.
    assert_eq!(ctx.seq_len(0).unwrap(), 1);
    assert_eq!(ctx.seq_len(1).unwrap(), 1);
    for (i, b) in before.iter().enumerate() {
        assert_eq!(ctx.batch_logits(i).unwrap(), &b[..]);
    }
    let next = next_logits(&mut ctx, &[0, 1], p[1]);
    let mut twin = context(&model, 2);
    twin.decode_batch(&[BatchEntry::new(p[0], 0), BatchEntry::new(p[1], 1)]).unwrap();
    assert_eq!(next_logits(&mut twin, &[0, 1], p[1]), next);
}

/// Greedy sample_logits on each entry's logits picks its arg max; on the last entry's it
/// agrees with sample(ctx); a slice of another length is refused.
#[test]
fn sample_logits_from_batch_entries() {
    let model = open();
    let a = tokens(&model, PROMPTS[0]);
    let b = tokens(&model, PROMPTS[1]);
    let mut ctx = context(&model, 2);
    let mut entries: Vec<_> = a.iter().map(|&t| BatchEntry::new(t, 0)).collect();
    entries.extend(b.iter().map(|&t| BatchEntry::new(t, 1)));
    let (ia, ib) = (a.len() - 1, entries.len() - 1);
    entries[ia].logits = true;
    entries[ib].logits = true;
    ctx.decode_batch(&entries).unwrap();
    let mut samplers: Vec<Sampler<'_>> =
        (0..2).map(|_| Sampler::new(&model, SamplerParams::greedy()).unwrap()).collect();
    let mut picked = Vec::new();
    for (s, i) in [ia, ib].into_iter().enumerate() {
        let logits = ctx.batch_logits(i).unwrap();
        let t = samplers[s].sample_logits(logits).expect("sample_logits");
        assert_eq!(t, argmax(logits), "sequence {s}");
        picked.push(t);
    }
    assert_ne!(picked[0], picked[1]);
    assert_eq!(model.detokenize(&picked[..1]).unwrap(), " Paris");
    let mut one = Sampler::new(&model, SamplerParams::greedy()).unwrap();
    assert_eq!(one.sample(&ctx).unwrap(), picked[1], "pi_sample reads the last entry's");

    let row = ctx.batch_logits(ia).unwrap();
    for bad in [&row[..row.len() - 1], &[][..]] {
        let e = one.sample_logits(bad).unwrap_err();
        assert_eq!(e.status(), sys::PI_ERR_INVALID_ARG, "{} logits: {e}", bad.len());
    }
    let longer: Vec<f32> = row.iter().copied().chain([0.0]).collect();
    let e = one.sample_logits(&longer).unwrap_err();
    assert_eq!(e.status(), sys::PI_ERR_INVALID_ARG, "{e}");
}

/// Embeddings through the bindings: every entry's final hidden state, the pooled
/// sequence (last = the last entry's state, normalised; mean = the mean of the entries'
/// states), the same in a batch of two sequences as alone, `Only` computes no logits,
/// and the errors (embeddings off, a bad sequence).
#[test]
fn embeddings_per_token_and_pooled() {
    use powerinfer::{Embeddings, Pooling};
    let model = open();
    assert_eq!(model.pooling().expect("pooling"), None); // SmolLM2: a chat model
    let e = model.n_embd() as usize;
    let a = tokens(&model, PROMPTS[0]);
    let b = tokens(&model, PROMPTS[1]);
    let build = |mode, n_seq| {
        Context::builder()
            .n_ctx(128)
            .n_threads(2)
            .n_seq_max(n_seq)
            .embeddings(mode)
            .build(&model)
            .expect("context")
    };
    let mut ctx = build(Embeddings::On, 1);
    ctx.decode(&a).expect("decode");
    let states: Vec<Vec<f32>> =
        (0..a.len()).map(|i| ctx.embedding(i).expect("state").to_vec()).collect();
    assert!(states.iter().all(|s| s.len() == e));
    assert!(ctx.embedding(a.len()).is_none());
    let last = ctx.embedding_pooled(0, Pooling::Last, true).expect("last");
    let n: f64 =
        states[a.len() - 1].iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
    for (x, y) in last.iter().zip(&states[a.len() - 1]) {
        assert!((f64::from(*x) - f64::from(*y) / n).abs() < 1e-6);
    }
    let mean = ctx.embedding_pooled(0, Pooling::Mean, false).expect("mean");
    for j in 0..e {
        let m: f64 = states.iter().map(|s| f64::from(s[j])).sum::<f64>() / a.len() as f64;
        assert!((f64::from(mean[j]) - m).abs() < 1e-5);
    }
    let cls = ctx.embedding_pooled(0, Pooling::Cls, false).expect("cls");
    assert_eq!(cls, states[0]);
    let err = ctx.embedding_pooled(1, Pooling::Mean, true).unwrap_err();
    assert_eq!(err.status(), sys::PI_ERR_INVALID_ARG);
    assert_eq!(
        ctx.embedding_pooled(0, Pooling::Rank, true).unwrap_err().status(),
        sys::PI_ERR_INVALID_ARG
    );

    // a batch of both prompts, interleaved, in a context that computes no logits
    let mut two = build(Embeddings::Only, 2);
    let mut entries = Vec::new();
    for i in 0..a.len().max(b.len()) {
        for (seq, p) in [(0, &a), (1, &b)] {
            if i < p.len() {
                entries.push(BatchEntry::new(p[i], seq).logits(true));
            }
        }
    }
    two.decode_batch(&entries).expect("decode a batch");
    assert!(two.batch_logits(0).is_none());
    let got = two.embedding_pooled(0, Pooling::Last, true).expect("last");
    assert!(rel(&last, &got) < 1e-4, "{}", rel(&last, &got));
    let mut alone_b = build(Embeddings::On, 1);
    alone_b.decode(&b).expect("decode");
    let want_b = alone_b.embedding_pooled(0, Pooling::Mean, true).expect("mean");
    let got_b = two.embedding_pooled(1, Pooling::Mean, true).expect("mean");
    assert!(rel(&want_b, &got_b) < 1e-4, "{}", rel(&want_b, &got_b));

    let mut off = context(&model, 1);
    off.decode(&a).expect("decode");
    assert!(off.embedding(0).is_none());
    assert_eq!(
        off.embedding_pooled(0, Pooling::Last, true).unwrap_err().status(),
        sys::PI_ERR_INVALID_ARG
    );
}
