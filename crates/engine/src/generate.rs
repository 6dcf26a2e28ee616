//! The generation loop: a prompt through the model, then tokens sampled one at a time until a stop rule
//! holds. `strata run` (and later the server) call this; what to do with each token (print it, stream it)
//! is the caller's, through [`Event`]s.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strata_model::decoder::Decoder;

use crate::draft_vocab::DraftVocab;
use crate::grammar::Guide;
use crate::sampler::{Sampler, SamplerConfig, Seen};
use crate::tuner::Tuner;
pub use crate::tuner::MAX_DRAFTS;
use strata_model::ops::sample::sample;

#[derive(Clone, Debug)]
pub struct GenerateConfig {
    /// Tokens to generate at most.
    pub n_predict: usize,
    /// Tokens that end the generation (EOS, end of turn); ignored with `ignore_eos`.
    pub stops: Vec<u32>,
    pub ignore_eos: bool,
    /// Context cells: the prompt must fit, and generation stops when the context is full.
    pub max_context: usize,
    pub sampler: SamplerConfig,
    /// The caller wants each generated token's logits ([`Event::Logits`]). Without them a greedy
    /// generation takes its tokens from the device's argmax and copies no logits to the host.
    pub logits: bool,
    /// A point in the prompt (0 < mark < its length) where the loop says [`Event::Mark`] with the
    /// decoder holding the prompt's tokens before it: the server saves the state there, where the
    /// assistant's turn begins. The prompt's windows end at the mark.
    pub mark: Option<usize>,
    /// Drafts per verify window: docs/SPECULATION.md. Used when the decoder drafts and no logits are
    /// asked for; the tokens are the plain run's either way.
    pub spec: Drafts,
    /// The tokens drafts choose among (`--draft-vocab K`), kept across generations: None for the whole
    /// vocabulary.
    pub draft_vocab: Option<Arc<Mutex<DraftVocab>>>,
}

/// How many drafts a verify window takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drafts {
    /// This many (0..=7; 0 is plain decoding).
    Fixed(usize),
    /// As many as pay, from the acceptance and pass times measured as the run goes (tuner.rs), where
    /// the decoder says a window costs less than its tokens' steps; plain decoding elsewhere.
    Auto,
}

impl std::str::FromStr for Drafts {
    type Err = String;
    fn from_str(s: &str) -> Result<Drafts, String> {
        match s {
            "auto" => Ok(Drafts::Auto),
            n => match n.parse::<usize>() {
                Ok(n) if n <= MAX_DRAFTS => Ok(Drafts::Fixed(n)),
                _ => Err(format!("{s:?}: use auto or a number of drafts from 0 to {MAX_DRAFTS}")),
            },
        }
    }
}

/// Why the generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// `n_predict` tokens were generated.
    Length,
    /// A stop token was generated (it is the last of the tokens).
    StopToken(u32),
    /// The context is full.
    ContextFull,
}

/// What the caller sees, in order: the prompt's progress after each window (and the mark, when the
/// config sets one, where it falls), then for each generated token the logits that chose it (when
/// [`GenerateConfig::logits`] asks for them or sampling has them), then the token.
pub enum Event<'a> {
    Prompt {
        done: usize,
        total: usize,
    },
    /// The decoder holds the prompt up to [`GenerateConfig::mark`].
    Mark(&'a dyn Decoder),
    Logits(&'a [f32]),
    Token(u32),
}

#[derive(Clone, Debug)]
pub struct Generated {
    pub tokens: Vec<u32>,
    pub stop: Stop,
    pub prompt_tokens: usize,
    pub prompt_time: Duration,
    pub decode_time: Duration,
    /// Speculation's figures (all zero without it).
    pub spec: SpecStats,
}

/// What speculation did: verify passes, drafts made, and drafts accepted at each window position.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecStats {
    pub passes: usize,
    pub drafted: usize,
    pub accepted: usize,
    /// Per draft position i: drafts made there, and accepted.
    pub at: [(usize, usize); MAX_DRAFTS],
}

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("token id {id} is outside the vocabulary ({vocab} tokens)")]
    TokenOutOfVocab { id: u32, vocab: usize },
    #[error("the context ({held} tokens held) and the prompt ({prompt} tokens) exceed the context of {max} cells")]
    PromptTooLong { held: usize, prompt: usize, max: usize },
    #[error("the device: {0}")]
    Device(String),
    #[error("{0}")]
    Grammar(String),
    /// The caller's event handler failed (a closed pipe, say).
    #[error(transparent)]
    Caller(#[from] std::io::Error),
}

/// Runs `prompt` through the decoder (in windows of its size), then generates. The decoder ends holding
/// the prompt and every generated token but the last (which has not been through the model);
/// [`complete_state`] adds it.
pub fn generate(
    dec: &mut dyn Decoder,
    prompt: &[u32],
    cfg: &GenerateConfig,
    on_event: impl FnMut(Event) -> std::io::Result<()>,
) -> Result<Generated, GenerateError> {
    generate_guided(dec, prompt, cfg, None, on_event)
}

/// [`generate`] with each token drawn from those `guide`'s grammar allows (grammar.rs): the logits
/// come to the host, the grammar masks them, and the draw is made there, by the same contract.
pub fn generate_guided(
    dec: &mut dyn Decoder,
    prompt: &[u32],
    cfg: &GenerateConfig,
    mut guide: Option<&mut Guide>,
    mut on_event: impl FnMut(Event) -> std::io::Result<()>,
) -> Result<Generated, GenerateError> {
    check_prompt(&*dec, prompt, cfg.max_context)?;
    let logits = cfg.logits || guide.is_some() || !cfg.sampler.penalties.is_none();
    // Drafting starts before the prompt, so the MTP layer's cache has its positions' cells.
    let drafting = match cfg.spec {
        Drafts::Fixed(n) => n > 0,
        Drafts::Auto => dec.windows_pay(),
    } && (!logits || dec.gives_window_logits())
        && dec.start_drafting();
    if drafting {
        note_drafts(dec, cfg, prompt, false)?;
    }
    let mut sampler = Sampler::new(cfg.sampler.clone());
    let greedy = cfg.sampler.greedy();
    // A device draw's settings are taken from the sampler a step ahead (the same numbers in the same
    // order), so the decoder knows the next step's too.
    let mut next_draw = None;
    // A window's head: the token chosen where the logits are (the device's argmax or draw), or, when the
    // caller wants them, the last token's logits (then the draw is made here, the same way).
    let mut step = |dec: &mut dyn Decoder, tokens: &[u32], sampler: &mut Sampler| -> Result<Head, GenerateError> {
        let head = if logits {
            dec.forward_last(tokens).map(Head::Logits)
        } else if greedy {
            dec.forward_greedy(tokens).map(Head::Token)
        } else {
            let p = next_draw.take().unwrap_or_else(|| sampler.next_params());
            let next = sampler.next_params();
            next_draw = Some(next);
            dec.forward_sample(tokens, &p, &next).map(Head::Token)
        };
        head.map_err(GenerateError::Device)
    };
    let t0 = Instant::now();
    let window = dec.window().max(1);
    let mark = cfg.mark.filter(|&m| m > 0 && m < prompt.len());
    let (before_mark, after_mark) = prompt.split_at(mark.unwrap_or(0));
    let windows: Vec<&[u32]> = before_mark.chunks(window).chain(after_mark.chunks(window)).collect();
    let (last, before) = windows.split_last().expect("check_prompt refuses an empty prompt");
    let mut done = 0;
    // Only the last window's head is used.
    for window in before {
        dec.advance(window).map_err(GenerateError::Device)?;
        done += window.len();
        on_event(Event::Prompt { done, total: prompt.len() })?;
        if Some(done) == mark {
            on_event(Event::Mark(&*dec))?;
        }
    }
    let mut head = step(dec, last, &mut sampler)?;
    dec.prompt_read();
    on_event(Event::Prompt { done: prompt.len(), total: prompt.len() })?;
    let prompt_time = t0.elapsed();
    let t1 = Instant::now();
    let mut tokens = Vec::new();
    let mut seen = Seen::default();
    let mut spec = SpecStats::default();
    let stop = loop {
        if tokens.len() == cfg.n_predict {
            break Stop::Length;
        }
        let next = match &mut head {
            Head::Logits(logits) => {
                on_event(Event::Logits(logits))?;
                cfg.sampler.penalties.apply(logits, &seen);
                if let Some(g) = guide.as_deref_mut() {
                    g.mask(logits).map_err(GenerateError::Grammar)?;
                }
                sampler.sample(logits)
            }
            Head::Token(t) => *t,
        };
        if let Some(g) = guide.as_deref_mut() {
            g.commit(next).map_err(GenerateError::Grammar)?;
        }
        tokens.push(next);
        seen.add(next);
        on_event(Event::Token(next))?;
        if !cfg.ignore_eos && cfg.stops.contains(&next) {
            break Stop::StopToken(next);
        }
        if tokens.len() == cfg.n_predict {
            break Stop::Length;
        }
        if dec.position() >= cfg.max_context {
            break Stop::ContextFull;
        }
        if drafting {
            let how = if logits { Verify::Logits(guide.as_deref_mut()) } else { Verify::Chosen };
            break speculate(dec, cfg, how, (&mut tokens, &mut seen), &mut on_event, &mut spec)?;
        }
        head = step(dec, &[next], &mut sampler)?;
    };
    Ok(Generated { tokens, stop, prompt_tokens: prompt.len(), prompt_time, decode_time: t1.elapsed(), spec })
}

/// How a verify window's tokens are chosen.
enum Verify<'g> {
    /// Where the logits are (the device's argmax or draw).
    Chosen,
    /// Here, from each position's logits, which the caller sees first; masked by the grammar when there
    /// is one, position by position in the state the tokens chosen before it reach (the grammar takes
    /// only the tokens kept, so nothing of it is taken back when a draft is refused).
    Logits(Option<&'g mut Guide>),
}

/// The rest of the generation in verify windows (docs/SPECULATION.md): `tokens` ends with the last
/// generated token, not yet through the model, whose stop checks have passed. Each pass drafts after it,
/// verifies the window, writes the accepted drafts and the model's token after them, and keeps just
/// those in the decoder; a stop among them ends the generation there, as the plain loop would.
fn speculate(
    dec: &mut dyn Decoder,
    cfg: &GenerateConfig,
    mut how: Verify,
    (tokens, seen): (&mut Vec<u32>, &mut Seen),
    on_event: &mut impl FnMut(Event) -> std::io::Result<()>,
    spec: &mut SpecStats,
) -> Result<Stop, GenerateError> {
    let device = GenerateError::Device;
    let mut tuner = Tuner::new(MAX_DRAFTS);
    let mut noted = 0; // the tokens counted for the draft vocabulary
    loop {
        let x = *tokens.last().expect("the loop starts after a token");
        let t0 = Instant::now();
        let wanted = match cfg.spec {
            Drafts::Fixed(n) => n.min(MAX_DRAFTS),
            Drafts::Auto => tuner.choose(),
        };
        // A window of n + 1 cells must fit the context, and yields at most n + 1 tokens.
        let room = cfg.max_context - dec.position();
        let n = wanted.min(cfg.n_predict - tokens.len() - 1).min(room - 1);
        note_drafts(dec, cfg, &tokens[noted..], n > 0)?;
        noted = tokens.len();
        // Position i's token is the generation's (tokens.len() + i)-th: drawn with that draw's number.
        let pick = |i: usize| (!cfg.sampler.greedy()).then(|| cfg.sampler.params_at((tokens.len() + i) as u64));
        let mut rows = Vec::new();
        let (drafts, chosen) = if let Verify::Logits(guide) = &mut how {
            // Drafts from the MTP layer as ever; each position's token chosen here, in turn, until one
            // differs from its draft.
            let drafts = if n > 0 { dec.draft(x, n, &[]).map_err(device)? } else { Vec::new() };
            let window: Vec<u32> = std::iter::once(x).chain(drafts.iter().copied()).collect();
            rows = if n > 0 { dec.verify_logits(&window) } else { dec.forward_last(&window).map(|l| vec![l]) }
                .map_err(device)?;
            let mut chosen = Vec::with_capacity(n + 1);
            let mut masked = Vec::new();
            // The reply's counts with this window's chosen tokens added (the penalties' input).
            let mut ahead = if cfg.sampler.penalties.is_none() { Seen::default() } else { seen.clone() };
            for (i, row) in rows.iter().enumerate() {
                masked.clone_from(row);
                cfg.sampler.penalties.apply(&mut masked, &ahead);
                if let Some(g) = guide.as_deref_mut() {
                    g.mask(&mut masked).map_err(GenerateError::Grammar)?;
                }
                let t = sample(&masked, &cfg.sampler.params_at((tokens.len() + i) as u64));
                if let Some(g) = guide.as_deref_mut() {
                    g.commit(t).map_err(GenerateError::Grammar)?;
                }
                chosen.push(t);
                ahead.add(t);
                if drafts.get(i) != Some(&t) {
                    break;
                }
            }
            (drafts, chosen)
        } else if n > 0 {
            let picks: Vec<_> = (0..=n).map(pick).collect();
            let drafts = dec.draft(x, n, &picks).map_err(device)?;
            let window: Vec<u32> = std::iter::once(x).chain(drafts.iter().copied()).collect();
            let chosen = dec.verify(&window, &picks).map_err(device)?;
            (drafts, chosen)
        } else {
            // No drafts: a plain decode step (a device records the next one while it runs), which
            // keeps its token with no window to accept.
            let t = match (pick(0), pick(1)) {
                (Some(p), Some(next)) => dec.forward_sample(&[x], &p, &next),
                _ => dec.forward_greedy(&[x]),
            };
            (Vec::new(), vec![t.map_err(device)?])
        };
        let k = drafts.iter().zip(&chosen).take_while(|(d, c)| d == c).count();
        tuner.record(n, k, t0.elapsed().as_secs_f64());
        spec.passes += 1;
        spec.drafted += n;
        spec.accepted += k;
        for i in 0..n {
            spec.at[i].0 += 1;
            spec.at[i].1 += usize::from(i < k);
        }
        for (j, &t) in chosen[..=k].iter().enumerate() {
            let shown = rows.get(j).map_or(Ok(()), |row| on_event(Event::Logits(row)));
            if shown.is_err() && n > 0 {
                dec.accept(j + 1).map_err(device)?; // the window up to this position's token
            }
            shown?;
            tokens.push(t);
            seen.add(t);
            let sent = on_event(Event::Token(t));
            let stop = if !cfg.ignore_eos && cfg.stops.contains(&t) {
                Some(Stop::StopToken(t))
            } else if tokens.len() == cfg.n_predict {
                Some(Stop::Length)
            } else {
                None
            };
            if sent.is_err() || stop.is_some() {
                // The decoder keeps the window up to this token (which is not through the model).
                if n > 0 {
                    dec.accept(j + 1).map_err(device)?;
                }
                sent?;
                return Ok(stop.expect("checked above"));
            }
        }
        if n > 0 {
            dec.accept(k + 1).map_err(device)?;
        }
        if dec.position() >= cfg.max_context {
            return Ok(Stop::ContextFull);
        }
    }
}

/// `tokens` counted in the draft vocabulary, where the config keeps one, and before drafts (`drafting`)
/// its new list given to the decoder when one is due.
fn note_drafts(
    dec: &mut dyn Decoder,
    cfg: &GenerateConfig,
    tokens: &[u32],
    drafting: bool,
) -> Result<(), GenerateError> {
    let Some(vocab) = &cfg.draft_vocab else { return Ok(()) };
    // A panic elsewhere while it was held leaves counts that are still counts.
    let mut vocab = vocab.lock().unwrap_or_else(|e| e.into_inner());
    vocab.note(tokens);
    // A list made now and not given would be lost: the decoder keeps the last one given.
    match drafting.then(|| vocab.due()).flatten() {
        Some(ids) => dec.set_draft_vocab(ids).map_err(GenerateError::Device),
        None => Ok(()),
    }
}

/// What a window's head gave the loop.
enum Head {
    Logits(Vec<f32>),
    Token(u32),
}

/// Feeds the last generated token through the model (when the context has room), so the state holds the
/// whole conversation: what a checkpoint saves.
pub fn complete_state(dec: &mut dyn Decoder, generated: &Generated, max_context: usize) -> Result<(), GenerateError> {
    if let Some(&last) = generated.tokens.last() {
        if dec.position() < max_context {
            dec.advance(&[last]).map_err(GenerateError::Device)?;
        }
    }
    Ok(())
}

fn check_prompt(dec: &dyn Decoder, prompt: &[u32], max: usize) -> Result<(), GenerateError> {
    if prompt.is_empty() {
        return Err(GenerateError::EmptyPrompt);
    }
    let vocab = dec.vocab();
    if let Some(&id) = prompt.iter().find(|&&t| t as usize >= vocab) {
        return Err(GenerateError::TokenOutOfVocab { id, vocab });
    }
    if dec.position() + prompt.len() > max {
        return Err(GenerateError::PromptTooLong { held: dec.position(), prompt: prompt.len(), max });
    }
    Ok(())
}
