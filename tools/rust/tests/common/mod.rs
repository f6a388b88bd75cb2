//! What the model tests share: the model named by PI_TEST_MODEL. Without it they fail,
//! on purpose: a binding test that silently passes tests nothing.

use powerinfer::Model;

pub fn model_path() -> String {
    match std::env::var("PI_TEST_MODEL") {
        Ok(p) if !p.is_empty() => p,
        _ => panic!(
            "PI_TEST_MODEL is not set: point it at a small GGUF model, e.g.\n  \
             PI_TEST_MODEL=$(python3 tools/smollm2_path.py) cargo test --offline"
        ),
    }
}

pub fn open() -> Model {
    let path = model_path();
    Model::open(&path).unwrap_or_else(|e| panic!("cannot open {path}: {e}"))
}
