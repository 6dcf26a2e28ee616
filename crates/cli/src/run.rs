//! `strata run`: generate text (or ids) with a model on the CPU.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use strata_engine::chat::{ChatTemplate, Message};
use strata_engine::sampler::{Sampler, SamplerConfig};
use strata_engine::tokenizer::Tokenizer;
use strata_model::{KvMode, Model, RopeScaling};

#[derive(clap::Args)]
pub struct RunArgs {
    /// Model file (or any shard of a set). Without it, the built-in tiny model.
    #[arg(short, long)]
    model: Option<PathBuf>,
    /// Prompt text.
    #[arg(short, long, conflicts_with = "prompt_tokens", required_unless_present = "prompt_tokens")]
    prompt: Option<String>,
    /// Prompt as token ids (comma separated); bypasses the tokenizer and prints the generated ids.
    #[arg(long, value_delimiter = ',')]
    prompt_tokens: Option<Vec<u32>>,
    /// Tokens to generate.
    #[arg(short = 'n', long, default_value_t = 64)]
    n_predict: usize,
    /// Wrap the prompt in the model's chat template as a user turn.
    #[arg(long)]
    chat: bool,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temp: f32,
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// 0 keeps every token.
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Context cells (default: the model's trained context).
    #[arg(long)]
    max_context: Option<usize>,
    /// Position scaling: none, linear or yarn. Default: yarn when --max-context exceeds the trained
    /// context, else none.
    #[arg(long)]
    rope_scaling: Option<String>,
    /// Scaling factor for linear or yarn (default: max-context / trained context).
    #[arg(long)]
    rope_scale: Option<f64>,
    /// Where the forward pass runs: cpu (the reference engine). The GPU forward pass is not built yet;
    /// the CUDA kernels are exercised by `strata parity` and `strata bench`.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// KV cache storage: fp16, int8, or f32 (unrounded: for checks against float references).
    #[arg(long, default_value = "fp16")]
    kv: KvMode,
    /// The MTP draft layer from a separate MTP-only GGUF (the converter's `--mtp` output), in place of
    /// the model file's own; loaded and checked against the model (speculative decoding uses it).
    #[arg(long)]
    mtp: Option<PathBuf>,
    /// CPU threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Write the logits rows (little-endian f32, vocab each): the last prompt position's, then one per
    /// generated token but the last.
    #[arg(long)]
    dump_logits: Option<PathBuf>,
    /// Continue from a context state saved by --save-state (the same model); the prompt follows it.
    #[arg(long)]
    load_state: Option<PathBuf>,
    /// Save the context state at the end (a checkpoint of the conversation).
    #[arg(long)]
    save_state: Option<PathBuf>,
    /// Keep generating past an end-of-text token.
    #[arg(long)]
    ignore_eos: bool,
}

pub fn run(a: RunArgs) -> Result<()> {
    match a.device.as_str() {
        "cpu" => {}
        "cuda" | "gpu" => bail!("--device {}: the GPU forward pass is not built yet; use --device cpu", a.device),
        other => bail!("--device {other:?}: use cpu"),
    }
    if let Some(t) = a.threads {
        if t == 0 {
            bail!("--threads must be at least 1");
        }
        rayon::ThreadPoolBuilder::new().num_threads(t).build_global().context("setting up threads")?;
    }
    let path = match &a.model {
        Some(p) => p.clone(),
        None => crate::synth::default_model()?,
    };
    let mut model = Model::open(&path, RopeScaling::None).with_context(|| format!("loading {}", path.display()))?;
    let trained = model.config.context_length;
    let max_context = a.max_context.unwrap_or(trained);
    if a.rope_scaling.is_some() || a.rope_scale.is_some() || max_context > trained {
        model.rope.scaling = rope_scaling(a.rope_scaling.as_deref(), a.rope_scale, max_context, trained)?;
    }
    if let Some(p) = &a.mtp {
        model.attach_mtp(p).with_context(|| format!("loading the MTP layer from {}", p.display()))?;
    }
    for note in &model.config.notes {
        eprintln!("note: {note}");
    }
    let tok = match a.prompt_tokens {
        Some(_) => None,
        None => Some(Tokenizer::from_gguf(&model.gguf).context("loading the tokenizer")?),
    };
    let prompt: Vec<u32> = match (&a.prompt_tokens, &tok) {
        (Some(ids), _) => ids.clone(),
        (None, Some(tok)) => {
            let text = a.prompt.as_deref().unwrap_or_default();
            let text = if a.chat {
                ChatTemplate::from_gguf(&model.gguf)?.render(&[Message { role: "user", content: text }], true)?
            } else {
                text.to_string()
            };
            tok.encode(&text)?
        }
        (None, None) => unreachable!("a tokenizer is loaded without --prompt-tokens"),
    };
    if prompt.is_empty() {
        bail!("the prompt is empty");
    }
    if prompt.len() > max_context {
        bail!("the prompt has {} tokens, more than --max-context {max_context}", prompt.len());
    }
    if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= model.config.vocab) {
        bail!("token id {bad} is outside the vocabulary ({} tokens)", model.config.vocab);
    }
    let stops: Vec<u32> = tok.as_ref().map(|t| [t.eos, t.im_end].into_iter().flatten().collect()).unwrap_or_default();
    let mut dump = match &a.dump_logits {
        Some(p) => Some(BufWriter::new(File::create(p).with_context(|| format!("{}", p.display()))?)),
        None => None,
    };
    let mut state = match &a.load_state {
        Some(p) => {
            let f = File::open(p).with_context(|| format!("{}", p.display()))?;
            let st = strata_model::State::load(&model.config, std::io::BufReader::new(f))
                .with_context(|| format!("{}", p.display()))?;
            if st.kv_mode != a.kv {
                bail!("{}: saved with --kv {:?}, not {:?}", p.display(), st.kv_mode, a.kv);
            }
            st
        }
        None => model.new_state(a.kv)?,
    };
    if state.pos + prompt.len() > max_context {
        bail!(
            "the saved context and the prompt ({} tokens) exceed --max-context {max_context}",
            state.pos + prompt.len()
        );
    }
    let mut sampler = Sampler::new(SamplerConfig { temperature: a.temp, top_k: a.top_k, top_p: a.top_p, seed: a.seed });

    let t0 = Instant::now();
    let mut logits = Vec::new();
    for &t in &prompt {
        logits = model.forward(&mut state, t);
    }
    let prompt_time = t0.elapsed();

    let t1 = Instant::now();
    let mut out = std::io::stdout().lock();
    let mut generated: Vec<u32> = Vec::new();
    // Tokens not yet printed: a multi-byte character can span tokens, so text is printed once it decodes
    // whole. Only these are decoded each step, not the whole generation (which would be quadratic).
    let mut pending: Vec<u32> = Vec::new();
    while generated.len() < a.n_predict {
        if let Some(d) = dump.as_mut() {
            d.write_all(&logits.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>())?;
        }
        let next = sampler.sample(&logits);
        generated.push(next);
        match &tok {
            Some(tok) => {
                pending.push(next);
                let text = tok.decode(&pending)?;
                if !text.ends_with('\u{FFFD}') {
                    write!(out, "{text}")?;
                    out.flush()?;
                    pending.clear();
                }
            }
            None => {
                write!(out, "{}{next}", if generated.len() > 1 { "," } else { "" })?;
                out.flush()?;
            }
        }
        if (!a.ignore_eos && stops.contains(&next)) || generated.len() == a.n_predict {
            break;
        }
        if state.pos >= max_context {
            eprintln!("\nstopped: the context is full (--max-context {max_context})");
            break;
        }
        logits = model.forward(&mut state, next);
    }
    if let (Some(tok), false) = (&tok, pending.is_empty()) {
        write!(out, "{}", tok.decode(&pending)?)?; // an unfinished character at the end: printed as it is
    }
    writeln!(out)?;
    if let Some(mut d) = dump {
        d.flush()?;
    }
    if let Some(p) = &a.save_state {
        // The last generated token has not been through the model yet: the saved conversation includes it.
        if let Some(&last) = generated.last() {
            if state.pos < max_context {
                model.forward(&mut state, last);
            }
        }
        // Written beside the target and renamed, so an interrupted save never leaves a half checkpoint.
        let tmp = p.with_extension("partial");
        let f = File::create(&tmp).with_context(|| format!("{}", tmp.display()))?;
        state.save(&model.config, BufWriter::new(f)).with_context(|| format!("{}", tmp.display()))?;
        std::fs::rename(&tmp, p).with_context(|| format!("{}", p.display()))?;
    }
    let decode_time = t1.elapsed();
    let rate = |n: usize, t: std::time::Duration| n as f64 / t.as_secs_f64().max(1e-9);
    eprintln!(
        "prompt: {} tokens in {:.2} s ({:.1} tok/s); decode: {} tokens in {:.2} s ({:.1} tok/s)",
        prompt.len(),
        prompt_time.as_secs_f64(),
        rate(prompt.len(), prompt_time),
        generated.len(),
        decode_time.as_secs_f64(),
        rate(generated.len().saturating_sub(1), decode_time)
    );
    Ok(())
}

/// Spec §8: YaRN by default past the trained context, with F = max_context / trained.
fn rope_scaling(kind: Option<&str>, scale: Option<f64>, max_context: usize, trained: usize) -> Result<RopeScaling> {
    let factor = scale.unwrap_or(max_context as f64 / trained as f64).max(1.0);
    if !(factor.is_finite() && factor > 0.0) {
        bail!("--rope-scale must be a positive number");
    }
    Ok(match kind {
        None if max_context > trained => RopeScaling::Yarn { factor, orig_ctx: trained as u64 },
        None | Some("none") => RopeScaling::None,
        Some("linear") => RopeScaling::Linear(factor),
        Some("yarn") => RopeScaling::Yarn { factor, orig_ctx: trained as u64 },
        Some(other) => bail!("--rope-scaling {other:?}: use none, linear or yarn"),
    })
}
