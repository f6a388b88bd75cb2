//! cargo run --example batch -- MODEL PROMPT [PROMPT...]
//!
//! Several prompts continued together in one context: one sequence per prompt, every
//! step one batch with a token of each unfinished sequence, each sequence sampled
//! (greedily) from its own entry's logits with its own sampler.
use powerinfer::{BatchEntry, Context, Model, Sampler, SamplerParams, TokenizeFlags};

const N_PREDICT: usize = 32;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: {} MODEL PROMPT [PROMPT...]", args[0]);
        std::process::exit(2);
    }
    if let Err(e) = run(&args[1], &args[2..]) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(path: &str, prompts: &[String]) -> powerinfer::Result<()> {
    let model = Model::open(path)?;
    let n_seq = u32::try_from(prompts.len())
        .map_err(|_| powerinfer::Error::new(powerinfer::sys::PI_ERR_RANGE, "too many prompts"))?;
    let mut ctx = Context::builder().n_ctx(512).n_seq_max(n_seq).build(&model)?;

    // All prompts in one batch; the last token of each asks for logits. `rows[s]` is the
    // entry whose logits sequence s samples from next.
    let mut entries = Vec::new();
    let mut rows = Vec::new();
    for (s, prompt) in prompts.iter().enumerate() {
        let tokens = model.tokenize(prompt, TokenizeFlags::ADD_SPECIAL)?;
        let n = tokens.len();
        entries.extend(
            tokens
                .into_iter()
                .enumerate()
                .map(|(i, t)| BatchEntry::new(t, s as i32).logits(i + 1 == n)),
        );
        rows.push(Some(entries.len() - 1));
    }
    ctx.decode_batch(&entries)?;

    let mut samplers = prompts
        .iter()
        .map(|_| Sampler::new(&model, SamplerParams::greedy()))
        .collect::<powerinfer::Result<Vec<_>>>()?;
    let mut generated = vec![Vec::new(); prompts.len()];
    for _ in 0..N_PREDICT {
        let mut step = Vec::new();
        for (s, row) in rows.iter_mut().enumerate() {
            let Some(i) = *row else { continue };
            let logits = ctx.batch_logits(i).expect("the entry asked for logits");
            let t = samplers[s].sample_logits(logits)?;
            if model.token_is_eog(t) {
                *row = None; // finished
                continue;
            }
            generated[s].push(t);
            *row = Some(step.len());
            step.push(BatchEntry::new(t, s as i32).logits(true));
        }
        if step.is_empty() {
            break;
        }
        ctx.decode_batch(&step)?;
    }
    for (prompt, tokens) in prompts.iter().zip(&generated) {
        println!("{prompt}{}\n", model.detokenize(tokens)?);
    }
    Ok(())
}
