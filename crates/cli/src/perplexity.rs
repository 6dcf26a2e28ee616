//! `strata perplexity`: how well a model predicts a text. The text (or a list of token ids) is cut into
//! windows of `--ctx` tokens, each read from an empty context; every token after a window's first is
//! predicted from those before it. Prints the perplexity exp(mean negative log-likelihood) and bits per
//! token.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use strata_engine::tokenizer::Tokenizer;
use strata_model::{KvMode, Model};

use strata_engine::generate::Drafts;
use strata_engine::session::Device;

use crate::load::EngineArgs;

#[derive(clap::Args)]
pub struct PerplexityArgs {
    #[command(flatten)]
    engine: EngineArgs,
    /// The text to score (UTF-8).
    #[arg(short, long, conflicts_with = "tokens", required_unless_present = "tokens")]
    file: Option<PathBuf>,
    /// Token ids instead of text: comma or white-space separated, inline or `@FILE`.
    #[arg(long, value_name = "IDS|@FILE")]
    tokens: Option<String>,
    /// Tokens per window.
    #[arg(long, default_value_t = 512)]
    ctx: usize,
    /// Also run the MTP draft layer at every position (on the CPU) and report how often its draft for the
    /// token after next is the model's own greedy choice there (what greedy speculation accepts) and the
    /// text's token.
    #[arg(long)]
    drafts: bool,
}

pub fn run(a: PerplexityArgs) -> Result<()> {
    if !matches!(a.engine.spec, Drafts::Auto | Drafts::Fixed(0)) {
        bail!("--spec: perplexity scores every position of the text, it generates nothing (--drafts scores the MTP layer's drafts)");
    }
    if a.ctx < 2 {
        bail!("--ctx must be at least 2 (a window predicts its tokens after the first)");
    }
    // The drafts are scored on the CPU (Model::forward_hidden and mtp_draft): no card is opened for them.
    let session = a.engine.open_on(if a.drafts { Device::Cpu } else { a.engine.device })?;
    let (model, max_context) = (&session.model, session.context);
    let ids = match (&a.file, &a.tokens) {
        (_, Some(t)) => crate::run::prompt_ids(t)?,
        (Some(f), None) => {
            let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            Tokenizer::from_gguf(&model.gguf).context("loading the tokenizer")?.encode(&text)?
        }
        (None, None) => unreachable!("clap requires one of them"),
    };
    if let Some(bad) = ids.iter().find(|&&t| t as usize >= model.config.vocab) {
        bail!("token id {bad} is outside the vocabulary of {}", model.config.vocab);
    }
    let ctx = a.ctx.min(max_context);
    if ids.len() < 2 {
        bail!("the text has {} token(s): nothing to predict", ids.len());
    }
    let bar = ProgressBar::new(ids.len() as u64);
    bar.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} tokens, eta {eta}").expect("valid template"));
    let windows: Vec<&[u32]> = ids.chunks(ctx).filter(|w| w.len() >= 2).collect();
    let mut score = Score::default();
    if a.drafts {
        if model.weights.mtp.is_none() {
            bail!("--drafts: this model has no MTP draft layer");
        }
        for w in &windows {
            score_with_drafts(model, a.engine.kv, w, &mut score)?;
            bar.inc(w.len() as u64);
        }
    } else {
        let (mut dec, _) = session.decoder(ctx, None)?;
        let fresh = dec.snapshot().map_err(|e| anyhow!("{e}"))?;
        for w in &windows {
            dec.restore(&fresh).map_err(|e| anyhow!("{e}"))?;
            for pair in w.windows(2) {
                let logits = dec.forward_last(&pair[..1]).map_err(|e| anyhow!("the forward pass: {e}"))?;
                score.nll += neg_log_likelihood(&logits, pair[1] as usize);
                score.count += 1;
            }
            bar.inc(w.len() as u64);
        }
    }
    bar.finish_and_clear();
    let (nll, count) = (score.nll, score.count);
    let windows = windows.len();
    let mean = nll / count as f64;
    println!(
        "perplexity {:.4} over {count} predicted tokens ({} windows of up to {ctx}); {:.4} bits per token",
        mean.exp(),
        windows,
        mean / std::f64::consts::LN_2
    );
    if a.drafts {
        let share = |n: usize| 100.0 * n as f64 / score.drafted.max(1) as f64;
        println!(
            "MTP drafts: {} made; {:.2}% the model's own greedy choice (accepted by greedy speculation), {:.2}% \
             the text's token",
            score.drafted,
            share(score.agree),
            share(score.right)
        );
    }
    Ok(())
}

/// What a pass over the windows found.
#[derive(Default)]
struct Score {
    nll: f64,
    count: usize,
    drafted: usize,
    agree: usize,
    right: usize,
}

/// One window on the CPU with a draft at every position i from the trunk's streams R_i and the text's
/// token i + 1 (rope position i, the MTP layer's cache holding every position before): the draft for
/// i + 2 is compared with the trunk's argmax there, seen one step later.
fn score_with_drafts(model: &Model, kv: KvMode, w: &[u32], s: &mut Score) -> Result<()> {
    let (mut state, mut cache) = (model.new_state(kv)?, model.mtp_cache(kv));
    let mut draft: Option<usize> = None;
    for (i, pair) in w.windows(2).enumerate() {
        let (logits, r) = model.forward_hidden(&mut state, pair[0]);
        s.nll += neg_log_likelihood(&logits, pair[1] as usize);
        s.count += 1;
        if let Some(d) = draft.take() {
            s.drafted += 1;
            s.agree += usize::from(d == argmax(&logits));
            s.right += usize::from(d == pair[1] as usize);
        }
        let (dl, _) = model.mtp_draft(&mut cache, &r, pair[1], i).expect("the model has an MTP layer");
        draft = Some(argmax(&dl));
    }
    Ok(())
}

/// The first index of the largest logit.
fn argmax(v: &[f32]) -> usize {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b })
}

/// −ln softmax(logits)[target], in f64 with the maximum subtracted first.
fn neg_log_likelihood(logits: &[f32], target: usize) -> f64 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    let sum: f64 = logits.iter().map(|&v| (v as f64 - max).exp()).sum();
    max + sum.ln() - logits[target] as f64
}

#[cfg(test)]
mod tests {
    use super::neg_log_likelihood;

    #[test]
    fn negative_log_likelihood_is_that_of_the_softmax() {
        // Uniform over four: ln 4 whatever the target.
        assert!((neg_log_likelihood(&[2.0; 4], 3) - 4f64.ln()).abs() < 1e-12);
        // Large logits do not overflow; the favourite costs almost nothing, the other ~1000 nats.
        let l = [1000.0, 0.0];
        assert!(neg_log_likelihood(&l, 0) < 1e-12);
        assert!((neg_log_likelihood(&l, 1) - 1000.0).abs() < 1e-9);
    }
}
