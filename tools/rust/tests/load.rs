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
