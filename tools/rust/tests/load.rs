//! ModelBuilder::no_mmap and ::mlock on a committed fixture model (no tokenizer: fed
//! token ids): a model read into memory keeps computing the same logits after its file
//! is truncated and overwritten; a directory is refused with PI_ERR_IO.

use powerinfer::{sys, ContextBuilder, Model};
use std::path::PathBuf;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(rel)
}

fn logits(model: &Model) -> Vec<f32> {
    let mut ctx = ContextBuilder::new().n_ctx(16).build(model).expect("context");
    ctx.decode(&[1, 2, 3]).expect("decode");
    ctx.logits().to_vec()
}

#[test]
fn no_mmap_copy_survives_the_file() {
    let src = fixture("models/tiny-silu-gqa.f32.gguf");
    let dir = std::env::temp_dir().join(format!("pi-rust-load-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let live = dir.join("live.gguf");
    let bytes = std::fs::read(&src).expect("read the fixture");
    std::fs::write(&live, &bytes).expect("copy the fixture");

    let want = logits(&Model::open(&src).expect("mapped open"));
    let model = Model::builder().no_mmap(true).mlock(true).open(&live).expect("read open");
    std::fs::OpenOptions::new().write(true).open(&live).unwrap().set_len(0).unwrap();
    assert_eq!(logits(&model), want); // bit for bit
    std::fs::write(&live, vec![0u8; bytes.len()]).expect("overwrite");
    assert_eq!(logits(&model), want);
    drop(model);

    let err = Model::builder().no_mmap(true).open(&dir).err().expect("a directory");
    assert_eq!(err.status(), sys::PI_ERR_IO);
    assert!(err.to_string().contains("a directory"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The FFN probe (pi_ctx_set_ffn_probe) sees every layer of every step, with h, act and
/// inter of the step's shape; inter = act * up is zero wherever the ReLU gate did not
/// fire (the relu-llama fixture, run dense); a predictor-mode context refuses it.
#[test]
fn ffn_probe_sees_every_layer() {
    use std::sync::{Arc, Mutex};
    let model = Model::open(fixture("sparse/relu-llama.f16.gguf")).expect("open");
    let (e, f) = (model.n_embd() as usize, model.n_ff() as usize);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut ctx = ContextBuilder::new()
        .n_ctx(16)
        .sparse_mode(powerinfer::SparseMode::Dense)
        .build(&model)
        .expect("context");
    let s = Arc::clone(&seen);
    ctx.set_ffn_probe(Some(Box::new(move |layer, n, h: &[f32], act: &[f32], inter: &[f32]| {
        let consistent = h.len() == n * e
            && act.len() == n * f
            && inter.len() == n * f
            && act.iter().zip(inter).all(|(a, i)| (*a > 0.0) || *i == 0.0);
        s.lock().unwrap().push((layer, n, consistent));
    })))
    .expect("probe");
    ctx.decode(&[1, 2, 3]).expect("decode");
    ctx.decode(&[4]).expect("decode");
    ctx.set_ffn_probe(None).expect("remove");
    ctx.decode(&[5]).expect("decode");
    let got = seen.lock().unwrap().clone();
    let want: Vec<_> = (0..3).map(|l| (l, 3, true)).chain((0..3).map(|l| (l, 1, true))).collect();
    assert_eq!(got, want);
    let mut pred = ContextBuilder::new().n_ctx(16).build(&model).expect("context");
    let err = pred.set_ffn_probe(Some(Box::new(|_, _, _: &[f32], _: &[f32], _: &[f32]| {}))).err();
    assert_eq!(err.expect("refused").status(), sys::PI_ERR_UNSUPPORTED);
}
