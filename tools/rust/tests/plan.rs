//! Hybrid placement plans and hybrid contexts on the committed fixture models
//! (tests/fixtures: a PowerInfer ReLU-Llama with predictors and a dense Llama, no
//! tokenizer, so they are fed token ids). Device::Cpu is a second CPU backend acting as
//! the device: these tests need no GPU and no PI_TEST_MODEL.

use powerinfer::{
    sys, Context, ContextBuilder, Device, Model, PlanFile, PlanPart, PlanSource, StatsLevel,
};
use std::path::PathBuf;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(rel)
}

fn models() -> Vec<(Model, bool)> {
    [("sparse/relu-llama.q4_0.gguf", true), ("models/tiny-silu-gqa.f32.gguf", false)]
        .iter()
        .map(|(rel, sparse)| {
            let path = fixture(rel);
            let m = Model::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(m.is_sparse(), *sparse);
            (m, *sparse)
        })
        .collect()
}

/// Both vocabularies hold 128 tokens.
const PROMPT: [i32; 10] = [1, 100, 40, 23, 23, 47, 62, 124, 58, 111];

fn greedy(ctx: &mut Context<'_>, n: usize) -> Vec<i32> {
    ctx.decode(&PROMPT).expect("decode the prompt");
    let mut out = Vec::new();
    for _ in 0..n {
        let logits = ctx.logits();
        let mut best = 0;
        for (i, &v) in logits.iter().enumerate() {
            if v > logits[best] {
                best = i;
            }
        }
        out.push(best as i32);
        ctx.decode(&[best as i32]).expect("decode");
    }
    out
}

fn tmp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pi-rust-plan-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temporary directory");
    dir
}

#[test]
fn dry_run_budgets() {
    for (model, sparse) in models() {
        let none = ContextBuilder::new().n_ctx(64).device(Device::Cpu).device_budget(0);
        let plan = model.plan(&none).expect("plan with budget 0");
        let v = plan.view();
        assert_eq!(v.budget(), 0);
        assert_eq!(v.total_bytes(), 0);
        assert_eq!(v.n_layer(), model.n_layer());
        assert_eq!(v.n_ff(), model.n_ff());
        for l in 0..v.n_layer() {
            assert_eq!(v.layer_parts(l).0, 0);
            assert_eq!(v.layer_neurons(l).unwrap(), 0);
        }
        assert!(!v.output_on_device() && !v.kv_on_device());
        assert_eq!(v.source(), PlanSource::Computed);
        assert!(v.describe().unwrap().contains("budget"));

        let all = ContextBuilder::new().n_ctx(64).device(Device::Cpu).device_budget(1 << 40);
        let plan = all.plan(&model).expect("plan with a large budget");
        let v = plan.view();
        assert!(v.total_bytes() > 0 && v.total_bytes() <= v.budget());
        let sum: u64 = PlanPart::ALL.iter().map(|&p| v.bytes(p)).sum();
        assert_eq!(sum, v.total_bytes());
        for l in 0..v.n_layer() {
            let parts = v.layer_parts(l);
            assert!(parts.attention() && parts.ffn_norm(), "layer {l}: {parts:?}");
            assert!(parts.predictor() || !sparse);
            assert_eq!(v.layer_neurons(l).unwrap(), model.n_ff());
            assert!(v.layer_mask(l).unwrap().iter().all(|&b| b));
        }
        assert!(v.output_on_device() && v.kv_on_device());
        assert_eq!(v.bytes(PlanPart::Predictor) > 0, sparse);
        assert!(v.layer_neurons(v.n_layer()).is_err());
        assert!(v.describe().unwrap().contains("budget"));
    }
}

#[test]
fn plan_errors() {
    let (model, _) = models().swap_remove(0);
    let e = model.plan(&ContextBuilder::new().device(Device::None)).unwrap_err();
    assert_eq!(e.status(), sys::PI_ERR_INVALID_ARG, "{e}");
    let dir = tmp_dir("errors");
    let missing = dir.join("missing.gpuidx");
    let e = model
        .plan(&ContextBuilder::new().device(Device::Cpu).plan_file(&missing, PlanFile::Read))
        .unwrap_err();
    assert_eq!(e.status(), sys::PI_ERR_IO, "{e}");
    assert!(!e.message().is_empty());
    let garbage = dir.join("garbage.gpuidx");
    std::fs::write(&garbage, b"not a gpu index file, not at all").unwrap();
    let e = Context::builder()
        .device(Device::Cpu)
        .plan_file(&garbage, PlanFile::Read)
        .build(&model)
        .unwrap_err();
    assert_eq!(e.status(), sys::PI_ERR_FORMAT, "{e}");
    assert!(!e.message().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn save_read_and_cache() {
    let (model, _) = models().swap_remove(0);
    let dir = tmp_dir("cache");
    let budget = model.size_bytes() / 2;
    let opts =
        || Context::builder().n_ctx(64).n_threads(2).device(Device::Cpu).device_budget(budget);
    let plan = model.plan(&opts()).expect("plan");
    let counts: Vec<i64> =
        (0..plan.view().n_layer()).map(|l| plan.view().layer_neurons(l).unwrap()).collect();
    plan.view().save(dir.join("saved.gpuidx")).expect("save");
    drop(plan);
    let read = model.plan(&opts().plan_file(dir.join("saved.gpuidx"), PlanFile::Read)).unwrap();
    assert_eq!(read.view().source(), PlanSource::FromFile);
    let again: Vec<i64> =
        (0..read.view().n_layer()).map(|l| read.view().layer_neurons(l).unwrap()).collect();
    assert_eq!(again, counts);

    let cache = dir.join("m.generated.gpuidx");
    {
        let ctx = opts().plan_file(&cache, PlanFile::Cache).build(&model).expect("context");
        assert_eq!(ctx.plan().expect("hybrid").source(), PlanSource::CacheWritten);
    }
    assert!(cache.exists());
    let ctx = opts().plan_file(&cache, PlanFile::Cache).build(&model).expect("context");
    assert_eq!(ctx.plan().expect("hybrid").source(), PlanSource::FromFile);
    drop(ctx);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn plan_with_statistics() {
    let (model, _) = models().swap_remove(0);
    let mut prof =
        Context::builder().n_ctx(64).n_threads(2).stats(StatsLevel::On).build(&model).unwrap();
    prof.decode(&PROMPT).unwrap();
    let stats = prof.stats().expect("statistics");
    let budget = model.size_bytes() / 3;
    let plan = Context::builder()
        .n_ctx(64)
        .device(Device::Cpu)
        .device_budget(budget)
        .plan_stats(stats)
        .plan(&model)
        .expect("plan with statistics");
    assert!(plan.view().total_bytes() <= budget);
}

#[test]
fn hybrid_context_decodes_as_cpu() {
    for (model, _) in models() {
        let mut cpu = Context::builder().n_ctx(64).n_threads(2).build(&model).unwrap();
        assert!(cpu.plan().is_none());
        let want = greedy(&mut cpu, 12);
        drop(cpu);
        for budget in [0, model.size_bytes() / 3, sys::PI_DEVICE_BUDGET_AUTO, 1 << 40] {
            let mut ctx = Context::builder()
                .n_ctx(64)
                .n_threads(2)
                .device(Device::Cpu)
                .device_budget(budget)
                .build(&model)
                .unwrap_or_else(|e| panic!("budget {budget}: {e}"));
            {
                let plan = ctx.plan().expect("a hybrid context has a plan");
                assert_eq!(plan.source(), PlanSource::Computed);
                if budget != sys::PI_DEVICE_BUDGET_AUTO {
                    assert!(plan.total_bytes() <= budget);
                }
            }
            assert_eq!(greedy(&mut ctx, 12), want, "budget {budget}");
        }
    }
}
