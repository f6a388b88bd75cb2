//! cargo run --example generate -- MODEL PROMPT [N_PREDICT]
//!
//! Greedy generation, streamed to stdout as the tokens come.
use std::io::Write;

use powerinfer::{Context, Detokenizer, Model, Sampler, SamplerParams, TokenizeFlags};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: {} MODEL PROMPT [N_PREDICT]", args[0]);
        std::process::exit(2);
    }
    let n_predict: usize =
        args.get(3).map_or(64, |n| n.parse().expect("N_PREDICT must be a number"));
    if let Err(e) = run(&args[1], &args[2], n_predict) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(path: &str, prompt: &str, n_predict: usize) -> powerinfer::Result<()> {
    let model = Model::open(path)?;
    let mut ctx = Context::new(&model)?;
    let mut sampler = Sampler::new(&model, SamplerParams::greedy())?;
    let mut detok = Detokenizer::new(&model, false)?;

    let tokens = model.tokenize(prompt, TokenizeFlags::ADD_SPECIAL)?;
    for &t in &tokens {
        sampler.accept(t)?;
    }
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{prompt}");
    ctx.decode(&tokens)?;
    for _ in 0..n_predict {
        let t = sampler.sample(&ctx)?;
        if model.token_is_eog(t) {
            break;
        }
        let _ = write!(out, "{}", detok.push(t)?);
        let _ = out.flush();
        ctx.decode(&[t])?;
    }
    let _ = writeln!(out, "{}", detok.flush()?);
    Ok(())
}
