//! `strata run`: generate text (or ids) with a model, on the GPU or the CPU.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use strata_engine::chat::{ChatTemplate, Message};
use strata_engine::detok::Detokenizer;
use strata_engine::generate::{
    complete_state, generate_guided, Drafts, Event, GenerateConfig, GenerateError, Generated, Stop,
};
use strata_engine::grammar::{Grammars, Guide};
use strata_engine::sampler::SamplerConfig;
use strata_engine::tokenizer::Tokenizer;
use strata_model::decoder::Decoder;
use strata_model::{KvMode, Model, State};

use crate::load::EngineArgs;

#[derive(clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    engine: EngineArgs,
    /// Prompt text.
    #[arg(short, long, conflicts_with = "prompt_tokens", required_unless_present = "prompt_tokens")]
    prompt: Option<String>,
    /// Prompt as token ids, comma separated, or `@FILE` for a file of them (commas or white space: a long
    /// prompt does not fit a command line); bypasses the tokenizer and prints the generated ids.
    #[arg(long, value_name = "IDS|@FILE")]
    prompt_tokens: Option<String>,
    /// Tokens to generate.
    #[arg(short = 'n', long, default_value_t = 64)]
    n_predict: usize,
    /// Wrap the prompt in the model's chat template as a user turn.
    #[arg(long)]
    chat: bool,
    /// Sampling temperature; 0 is greedy. The draw is made on the device that holds the logits.
    #[arg(long, default_value_t = 0.0)]
    temp: f32,
    /// Keep the most likely tokens up to this much probability (1 keeps every candidate).
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Candidates: the k most likely tokens; 0 (or above 4,096) takes the 4,096 most likely.
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// The sampling seed: the same seed gives the same tokens on the CPU and the GPU.
    #[arg(long, default_value_t = 0)]
    seed: u64,
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
    /// Hold the reply to a JSON schema (`{"type": "object"}` for any object), given as JSON or `@FILE`:
    /// each token is drawn from those the schema allows next (constrained decoding).
    #[arg(long, value_name = "JSON|@FILE", conflicts_with = "grammar")]
    json_schema: Option<String>,
    /// Hold the reply to a Lark grammar (llguidance's dialect), given as text or `@FILE`.
    #[arg(long, value_name = "LARK|@FILE")]
    grammar: Option<String>,
}

/// A flag's value, or the file it names with `@FILE`.
fn text_or_file(flag: &str, v: &str) -> Result<String> {
    match v.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("{flag} {path}")),
        None => Ok(v.to_string()),
    }
}

/// The grammar the flags ask for, if any (`stops` end the reply once the grammar has ended).
fn guide(a: &RunArgs, tok: &Option<Arc<Tokenizer>>, stops: &[u32]) -> Result<Option<Guide>> {
    if a.json_schema.is_none() && a.grammar.is_none() {
        return Ok(None);
    }
    let tok = tok.clone().context("--json-schema and --grammar need the model's tokenizer")?;
    let grammars = Grammars::new(tok, stops).map_err(|e| anyhow!("{e}"))?;
    let g = match (&a.json_schema, &a.grammar) {
        (Some(s), _) => {
            let schema: serde_json::Value =
                serde_json::from_str(&text_or_file("--json-schema", s)?).context("--json-schema: not JSON")?;
            grammars.json_schema(&schema)
        }
        (None, Some(g)) => grammars.lark(&text_or_file("--grammar", g)?),
        (None, None) => unreachable!("checked above"),
    };
    g.map(Some).map_err(|e| anyhow!("{e}"))
}

pub fn run(a: RunArgs) -> Result<()> {
    let session = a.engine.open()?;
    let (model, max_context) = (&session.model, session.context);
    let grammar_asked = a.json_schema.is_some() || a.grammar.is_some();
    let tok = match a.prompt_tokens {
        Some(_) if !grammar_asked => None,
        _ => Some(Arc::new(Tokenizer::from_gguf(&model.gguf).context("loading the tokenizer")?)),
    };
    let prompt: Vec<u32> = match (&a.prompt_tokens, &tok) {
        (Some(ids), _) => prompt_ids(ids)?,
        (None, Some(tok)) => {
            let tok: &Tokenizer = tok;
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
    let stops: Vec<u32> = tok.as_ref().map(|t| [t.eos, t.im_end].into_iter().flatten().collect()).unwrap_or_default();
    let mut dump = match &a.dump_logits {
        Some(p) => Some(BufWriter::new(File::create(p).with_context(|| format!("{}", p.display()))?)),
        None => None,
    };
    let cfg = GenerateConfig {
        n_predict: a.n_predict,
        stops,
        ignore_eos: a.ignore_eos,
        max_context,
        sampler: SamplerConfig {
            temperature: a.temp,
            top_k: a.top_k,
            top_p: a.top_p,
            seed: a.seed,
            ..Default::default()
        },
        logits: dump.is_some(),
        mark: None,
        spec: a.engine.spec,
        draft_vocab: session.draft_vocab(),
    };
    let mut guide = guide(&a, &tok, &cfg.stops)?;
    // The stop token that ends a reply is not part of its text; ids are printed for a prompt of ids.
    let hidden = if a.ignore_eos { Vec::new() } else { cfg.stops.clone() };
    let text = tok.as_deref().filter(|_| a.prompt_tokens.is_none());
    let mut printer = Printer { detok: text.map(Detokenizer::new), count: 0, hidden };
    // A saved conversation continues on either device.
    let saved = match &a.load_state {
        Some(p) => Some(load_state(model, p, a.engine.kv)?),
        None => None,
    };
    let (mut dec, _) = session.decoder(max_context, saved)?;
    let dec = &mut *dec;
    let generated = decode(dec, &prompt, &cfg, guide.as_mut(), &mut dump, &mut printer)?;
    if let Some(report) = dec.report() {
        eprintln!("{report}");
    }
    if let Some(p) = &a.save_state {
        // The saved conversation includes the last generated token.
        complete_state(dec, &generated, max_context)?;
        let state = dec.snapshot().map_err(|e| anyhow!("reading the state back from the device: {e}"))?;
        save_state(model, &state, p)?;
    }
    let st = &generated.spec;
    if matches!(a.engine.spec, Drafts::Fixed(n) if n > 0) && st.passes == 0 && generated.tokens.len() > 1 {
        eprintln!(
            "note: --spec: this model or device does not draft (an MTP layer on the CPU so far): decoded plainly"
        );
    }
    if st.passes > 0 {
        let per: Vec<String> = st.at.iter().filter(|a| a.0 > 0).map(|&(n, k)| format!("{k}/{n}")).collect();
        eprintln!(
            "speculation: {} passes, {} drafts, {} accepted ({:.1}%; accepted/drafted by position {}); {:.2} tokens a pass",
            st.passes,
            st.drafted,
            st.accepted,
            100.0 * st.accepted as f64 / st.drafted.max(1) as f64,
            per.join(", "),
            (generated.tokens.len() - 1) as f64 / st.passes as f64
        );
        if let Some(v) = &cfg.draft_vocab {
            eprintln!("draft vocabulary: {}", v.lock().unwrap_or_else(|e| e.into_inner()).describe());
        }
    }
    if generated.stop == Stop::ContextFull {
        eprintln!("stopped: the context is full (--max-context {max_context})");
    }
    let rate = |n: usize, t: std::time::Duration| n as f64 / t.as_secs_f64().max(1e-9);
    eprintln!(
        "prompt: {} tokens in {:.2} s ({:.1} tok/s); decode: {} tokens in {:.2} s ({:.1} tok/s)",
        generated.prompt_tokens,
        generated.prompt_time.as_secs_f64(),
        rate(generated.prompt_tokens, generated.prompt_time),
        generated.tokens.len(),
        generated.decode_time.as_secs_f64(),
        rate(generated.tokens.len().saturating_sub(1), generated.decode_time)
    );
    Ok(())
}

/// Runs the generation loop, printing tokens and writing logits rows as they come.
fn decode(
    dec: &mut dyn Decoder,
    prompt: &[u32],
    cfg: &GenerateConfig,
    guide: Option<&mut Guide>,
    dump: &mut Option<BufWriter<File>>,
    printer: &mut Printer,
) -> Result<Generated> {
    let mut out = std::io::stdout().lock();
    // A long prompt shows its progress (on a terminal only: indicatif draws nothing to a pipe).
    let bar = (prompt.len() >= 256).then(|| {
        let bar = indicatif::ProgressBar::new(prompt.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("prompt {bar:40} {pos}/{len} tokens, eta {eta}")
                .expect("valid template"),
        );
        bar
    });
    let mut log = PromptLog::new();
    let generated = generate_guided(dec, prompt, cfg, guide, |event| match event {
        Event::Prompt { done, total } => {
            if let Some(b) = &bar {
                b.set_position(done as u64);
                if done == total {
                    b.finish_and_clear();
                }
            }
            log.prompt(done, total);
            Ok(())
        }
        Event::Logits(l) => match dump.as_mut() {
            Some(d) => d.write_all(&l.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()),
            None => Ok(()),
        },
        Event::Token(t) => printer.token(&mut out, t),
        Event::Mark(_) => Ok(()),
    })
    .map_err(|e| match e {
        // Said in terms of the flag the user can change.
        GenerateError::PromptTooLong { held: 0, prompt, max } => {
            anyhow!("the prompt has {prompt} tokens, more than --max-context {max}")
        }
        GenerateError::PromptTooLong { held, prompt, max } => {
            anyhow!("the saved context and the prompt ({} tokens) exceed --max-context {max}", held + prompt)
        }
        e => e.into(),
    })?;
    printer.finish(&mut out)?;
    if let Some(d) = dump.as_mut() {
        d.flush()?;
    }
    Ok(generated)
}

fn load_state(model: &Model, p: &std::path::Path, kv: KvMode) -> Result<State> {
    let f = File::open(p).with_context(|| format!("{}", p.display()))?;
    let st = State::load(&model.config, std::io::BufReader::new(f)).with_context(|| format!("{}", p.display()))?;
    if st.kv_mode != kv {
        bail!("{}: saved with --kv {:?}, not {:?}", p.display(), st.kv_mode, kv);
    }
    Ok(st)
}

/// Written beside the target and renamed, so an interrupted save never leaves a half checkpoint.
fn save_state(model: &Model, state: &State, p: &std::path::Path) -> Result<()> {
    let tmp = p.with_extension("partial");
    let f = File::create(&tmp).with_context(|| format!("{}", tmp.display()))?;
    state.save(&model.config, BufWriter::new(f)).with_context(|| format!("{}", tmp.display()))?;
    std::fs::rename(&tmp, p).with_context(|| format!("{}", p.display()))?;
    Ok(())
}

/// A long prompt's progress as plain lines when standard error is not a terminal (a log, a pipe), where
/// the bar draws nothing: one line each time another `EVERY` tokens are read.
struct PromptLog {
    start: std::time::Instant,
    next: usize,
    on: bool,
}

impl PromptLog {
    const EVERY: usize = 16384;

    fn new() -> Self {
        use std::io::IsTerminal;
        Self { start: std::time::Instant::now(), next: Self::EVERY, on: !std::io::stderr().is_terminal() }
    }

    fn prompt(&mut self, done: usize, total: usize) {
        if !self.on || done < self.next || done == total {
            return;
        }
        let s = self.start.elapsed().as_secs_f64();
        eprintln!("prompt: {done} of {total} tokens in {s:.1} s ({:.1} tok/s)", done as f64 / s);
        self.next = (done / Self::EVERY + 1) * Self::EVERY;
    }
}

/// Writes generated tokens as text (or as ids without a tokenizer). A multi-byte character can span
/// tokens, so text is printed once it decodes whole; only the tokens not yet printed are decoded each
/// step, not the whole generation (which would be quadratic).
/// Prints the generated tokens: as text through the detokenizer, or (`--prompt-tokens`) as ids.
struct Printer<'a> {
    detok: Option<Detokenizer<'a>>,
    count: usize,
    /// Tokens not printed (the stop tokens).
    hidden: Vec<u32>,
}

impl Printer<'_> {
    fn token(&mut self, out: &mut impl Write, t: u32) -> std::io::Result<()> {
        self.count += 1;
        match &mut self.detok {
            Some(_) if self.hidden.contains(&t) => {}
            Some(d) => write!(out, "{}", d.push(t).map_err(std::io::Error::other)?)?,
            None => write!(out, "{}{t}", if self.count > 1 { "," } else { "" })?,
        }
        out.flush()
    }

    /// An unfinished character at the end is printed as it is; then the line ends.
    fn finish(&mut self, out: &mut impl Write) -> Result<()> {
        if let Some(d) = &mut self.detok {
            write!(out, "{}", d.finish()?)?;
        }
        writeln!(out)?;
        Ok(())
    }
}

/// `--prompt-tokens`: ids separated by commas or white space, given inline or in the file named after `@`.
pub(crate) fn prompt_ids(arg: &str) -> Result<Vec<u32>> {
    let text = match arg.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("--prompt-tokens: reading {path}"))?,
        None => arg.to_string(),
    };
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u32>().map_err(|_| anyhow!("--prompt-tokens: {s:?} is not a token id")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::prompt_ids;

    #[test]
    fn prompt_ids_read_inline_and_from_a_file_and_refuse_the_rest() {
        assert_eq!(prompt_ids("1,2,3").unwrap(), vec![1, 2, 3]);
        let dir = strata_scratch::Scratch::new("ids");
        let path = dir.join("ids.txt");
        std::fs::write(&path, "4, 5\n6 7\n").unwrap();
        assert_eq!(prompt_ids(&format!("@{}", path.display())).unwrap(), vec![4, 5, 6, 7]);
        std::fs::remove_file(&path).unwrap();
        let err = prompt_ids("1,x,3").unwrap_err().to_string();
        assert!(err.contains("\"x\" is not a token id"), "{err}");
        assert!(prompt_ids("@/nonexistent/ids").unwrap_err().to_string().contains("reading /nonexistent/ids"));
    }
}
