//! `strata bench spec`: verify windows on the GPU against the plain step (docs/SPECULATION.md). After a
//! prompt of DEPTH tokens: the plain decode step; a verify pass of T = 1..8 tokens, kept whole and cut to
//! one (the rewind); drafts of N = 1..7 tokens, alone and as a pass runs them (their window recorded
//! beside them), with their whole pass, greedy and sampled, and three drafts over draft vocabularies;
//! each window's byte floor; the effective decode at per-draft
//! acceptance a = 0.6..0.9 computed from those times, and checked by a run whose acceptance is forced
//! to a.

use std::time::Instant;

use anyhow::{bail, Result};
use strata_engine::session::Device;
use strata_gguf::SplitMix64;
use strata_model::decoder::Decoder;
use strata_model::ops::sample::SampleParams;

use crate::load::EngineArgs;

/// Distinct pseudo-random ids (windows of one repeated token would route every token to the same experts).
fn ids(rng: &mut SplitMix64, n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|_| (rng.next_u64() % vocab as u64) as u32).collect()
}

/// Mean seconds of `reps` calls of `f`, after one unmeasured call.
fn time(reps: usize, mut f: impl FnMut() -> Result<(), String>) -> Result<f64> {
    f().map_err(anyhow::Error::msg)?;
    let t0 = Instant::now();
    for _ in 0..reps {
        f().map_err(anyhow::Error::msg)?;
    }
    Ok(t0.elapsed().as_secs_f64() / reps as f64)
}

pub fn run(engine: &EngineArgs, depth: usize, reps: usize, bandwidth: f64, windows_only: bool) -> Result<()> {
    if !(bandwidth > 0.0 && bandwidth.is_finite()) || reps == 0 || depth == 0 {
        bail!("--bandwidth (TB/s), --reps and --depth must be above 0");
    }
    let session = engine.open_on(Device::Cuda)?;
    let model = &session.model;
    // Room for the prompt and every pass below (at most 8 cells each).
    let cells = depth + 8 * reps * 40 + 64;
    let (mut dec, _) = session.decoder(cells, None)?;
    let vocab = dec.vocab();
    let mut rng = SplitMix64::new(7);
    let prompt = ids(&mut rng, depth, vocab);
    for w in prompt.chunks(dec.window()) {
        dec.advance(w).map_err(anyhow::Error::msg)?;
    }
    println!(
        "{} at depth {depth}, {reps} passes a figure",
        engine.model.as_ref().map_or("the built-in model".into(), |p| p.display().to_string())
    );
    let ms = |s: f64| s * 1e3;
    let floor = |t: usize| strata_cuda::backend::budget::window_bytes(model, session.kv, depth, t) as f64;
    let floor_ms = |t: usize| floor(t) / (bandwidth * 1e12) * 1e3;
    // The plain step: decoding a token at a time, steps recorded ahead as `strata run` does.
    let mut x = prompt[depth - 1];
    dec.card_ms();
    let step = time(reps, || {
        x = dec.forward_greedy(&[x])?;
        Ok(())
    })?;
    // With STRATA_GAPS=1, each kind of step's own time on the card beside the host's wall time (a window
    // recorded when called waits on the host's recording; its graph on the card does not).
    let step_card = dec.card_ms();
    println!(
        "plain step: {:.3} ms; floor {:.3} ms ({:.2} GB at {bandwidth:.2} TB/s), {:.2}× it{}",
        ms(step),
        floor_ms(1),
        floor(1) / 1e9,
        ms(step) / floor_ms(1),
        step_card.map_or(String::new(), |c| format!("; on the card {c:.3} ms"))
    );
    if !dec.start_drafting() {
        bail!("the model has no MTP layer: nothing to draft with");
    }
    // A pass that runs the trunk once while drafting (its MTP cells written), so drafts can follow.
    dec.verify(&[x], &[None]).map_err(anyhow::Error::msg)?;
    dec.accept(1).map_err(anyhow::Error::msg)?;
    // Each window here is recorded when it is called, with the card waiting on the host's recording.
    println!("\n| T | verify, kept whole (ms) | × step | verify, cut to 1 (ms) | × step | floor (GB) | floor (ms) | floor × step floor |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut cards = Vec::new();
    for t in 1..=8 {
        let window = ids(&mut rng, t, vocab);
        let picks = vec![None; t];
        let kept = time(reps, || dec.verify(&window, &picks).and_then(|_| dec.accept(t)))?;
        let kept_card = dec.card_ms();
        let cut = time(reps, || dec.verify(&window, &picks).and_then(|_| dec.accept(1)))?;
        cards.push((t, kept_card, dec.card_ms()));
        println!(
            "| {t} | {:.3} | {:.2} | {:.3} | {:.2} | {:.2} | {:.3} | {:.2} |",
            ms(kept),
            kept / step,
            ms(cut),
            cut / step,
            floor(t) / 1e9,
            floor_ms(t),
            floor(t) / floor(1)
        );
    }
    if let Some(sc) = step_card {
        println!("\non the card (STRATA_GAPS=1): the plain step {sc:.3} ms, each window's graph (its inputs copied up, then the graph; not the rewind)");
        println!("\n| T | window on the card, kept (ms) | × step's | cut to 1 (ms) | × step's |");
        println!("|---|---|---|---|---|");
        for (t, k, c) in cards {
            let (k, c) = (k.unwrap_or(f64::NAN), c.unwrap_or(f64::NAN));
            println!("| {t} | {k:.3} | {:.2} | {c:.3} | {:.2} |", k / sc, c / sc);
        }
    }
    if windows_only {
        return Ok(());
    }
    // A whole pass as the generation runs it: the drafts, then their window (recorded while the drafts
    // ran, where the decoder does so), cut to one.
    // The window's share of a pass (pass − drafts) is what a verify window costs as decoding runs it:
    // recorded while the drafts ran, where the table above records each window when it is called.
    // "drafts alone": the draft calls with no window recorded while they run (the chain's recording and
    // its time on the card), where "drafts" also holds the window's recording wherever that is longer
    // than the chain.
    println!("\n| drafts N | drafts alone (ms) | × step | drafts (ms) | × step | whole pass: drafts, window of N + 1, cut (ms) | × step | its window: pass − drafts (ms) | × step | the pass sampled (ms) | × step |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut whole = [0f64; 8];
    for (n, w) in whole.iter_mut().enumerate().skip(1) {
        let (d, p) = time_passes(&mut *dec, x, n, reps, Told::Yes(None))?;
        let (alone, _) = time_passes(&mut *dec, x, n, reps, Told::No)?;
        let (_, sampled) = time_passes(&mut *dec, x, n, reps, Told::Yes(Some(SAMPLED)))?;
        *w = p;
        println!(
            "| {n} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} | {:.3} | {:.2} | {:.3} | {:.2} |",
            ms(alone),
            alone / step,
            ms(d),
            d / step,
            ms(p),
            p / step,
            ms(p - d),
            (p - d) / step,
            ms(sampled),
            sampled / step
        );
    }
    println!("\n| draft vocabulary K | three drafts alone (ms) | × step | three drafts (ms) | × step | three drafts after a window kept whole (ms) | × step |");
    println!("|---|---|---|---|---|---|---|");
    for k in [vocab, 65536, 32768, 16384, 8192].into_iter().filter(|&k| k <= vocab) {
        // The whole head, or a draft head of k rows (which k tokens does not change its time).
        let ids: Vec<u32> = if k == vocab { Vec::new() } else { (0..k as u32).collect() };
        dec.set_draft_vocab(&ids).map_err(anyhow::Error::msg)?;
        let (alone, _) = time_passes(&mut *dec, x, 3, reps, Told::No)?;
        let (d3, _) = time_passes(&mut *dec, x, 3, reps, Told::Yes(None))?;
        let whole = time_drafts_after_whole(&mut *dec, x, 3, reps)?;
        println!(
            "| {k} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            ms(alone),
            alone / step,
            ms(d3),
            d3 / step,
            ms(whole),
            whole / step
        );
    }
    dec.set_draft_vocab(&[]).map_err(anyhow::Error::msg)?;
    effective(&mut *dec, (step, &whole), FORCED_TOKENS, &mut rng, x)?;
    if let Some(r) = dec.report() {
        println!("\n{r}");
    }
    Ok(())
}

/// A sampled window's draws: a chat's usual settings (the numbers drawn do not change the time).
const SAMPLED: SampleParams = SampleParams { temperature: 0.8, top_k: 40, top_p: 0.95, u: 0.5 };

/// Whether the drafts are told their window's picks (so that a device records the window while they
/// run), and the window's draw at each position (None: greedy).
#[derive(Clone, Copy)]
enum Told {
    No,
    Yes(Option<SampleParams>),
}

/// Mean seconds of a draft of `n` tokens after `x` and of the whole pass (the drafts, their window
/// verified, greedily or drawing at each position, and cut to one), over `reps` passes after one
/// unmeasured. Drafts not told their window's picks (`Told::No`) run alone: the window is greedy and
/// recorded when it is called.
fn time_passes(dec: &mut dyn Decoder, x: u32, n: usize, reps: usize, told: Told) -> Result<(f64, f64)> {
    let (mut drafts, mut passes) = (0.0, 0.0);
    let draw = match told {
        Told::No => None,
        Told::Yes(draw) => draw,
    };
    let picks = vec![draw; n + 1];
    let told: &[Option<SampleParams>] = if matches!(told, Told::Yes(_)) { &picks } else { &[] };
    for i in 0..=reps {
        let t0 = Instant::now();
        let d = dec.draft(x, n, told).map_err(anyhow::Error::msg)?;
        let t1 = Instant::now();
        let w: Vec<u32> = std::iter::once(x).chain(d).collect();
        dec.verify(&w, &picks).and_then(|_| dec.accept(1)).map_err(anyhow::Error::msg)?;
        if i > 0 {
            drafts += (t1 - t0).as_secs_f64();
            passes += t0.elapsed().as_secs_f64();
        }
    }
    Ok((drafts / reps as f64, passes / reps as f64))
}

/// Mean seconds of a draft call of `n` tokens right after a verify window of n + 1 kept whole (its drafts
/// accepted as they are, as a forced run keeps them), over `reps` calls after one unmeasured: where the
/// next chain is recorded while the window runs (`STRATA_CHAIN_AHEAD`), the call launches it.
fn time_drafts_after_whole(dec: &mut dyn Decoder, x: u32, n: usize, reps: usize) -> Result<f64> {
    let (mut x, mut total) = (x, 0.0);
    for i in 0..=reps {
        let t0 = Instant::now();
        let d = dec.draft(x, n, &[]).map_err(anyhow::Error::msg)?;
        if i > 0 {
            total += t0.elapsed().as_secs_f64();
        }
        let w: Vec<u32> = std::iter::once(x).chain(d).collect();
        let chosen = dec.verify(&w, &vec![None; n + 1]).map_err(anyhow::Error::msg)?;
        dec.accept(n + 1).map_err(anyhow::Error::msg)?;
        x = *chosen.last().ok_or_else(|| anyhow::anyhow!("a verify window chose nothing"))?;
    }
    Ok(total / reps as f64)
}

/// The tokens each forced-acceptance run writes (the engine bench's decode length).
const FORCED_TOKENS: usize = 256;

/// The effective decode at per-draft acceptance a: for each N the tokens a pass yield, (1 − a^(N+1)) /
/// (1 − a), over the whole pass's time measured (N drafts and a window of N + 1 cut to one); the best N;
/// then a run of
/// passes whose acceptance is forced to a (each draft kept with probability a, the first refusal ending
/// the window) at that N until it has written `want` tokens, timed.
fn effective(
    dec: &mut dyn Decoder,
    (step, whole): (f64, &[f64; 8]),
    want: usize,
    rng: &mut SplitMix64,
    x: u32,
) -> Result<()> {
    println!("\n| a | best N | tokens a pass | pass (ms) | effective tok/s | × plain | forced run of {want} tokens: tokens a pass | its tok/s | × plain |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for a in [0.6f64, 0.7, 0.8, 0.9] {
        let yield_of = |n: usize| (1.0 - a.powi(n as i32 + 1)) / (1.0 - a);
        let rate = |n: usize| yield_of(n) / whole[n];
        let best = (1..=7).max_by(|&p, &q| rate(p).total_cmp(&rate(q))).expect("seven");
        // The forced run: N = best, the kept count drawn as the plain acceptance would make it.
        let (mut tokens, mut passes, t0) = (0usize, 0usize, Instant::now());
        while tokens < want {
            passes += 1;
            let d = dec.draft(x, best, &vec![None; best + 1]).map_err(anyhow::Error::msg)?;
            let w: Vec<u32> = std::iter::once(x).chain(d).collect();
            dec.verify(&w, &vec![None; best + 1]).map_err(anyhow::Error::msg)?;
            let k = (0..best).take_while(|_| ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < a).count();
            dec.accept(k + 1).map_err(anyhow::Error::msg)?;
            tokens += k + 1;
        }
        let secs = t0.elapsed().as_secs_f64();
        println!(
            "| {a:.1} | {best} | {:.2} | {:.3} | {:.1} | {:.2} | {:.2} | {:.1} | {:.2} |",
            yield_of(best),
            whole[best] * 1e3,
            rate(best),
            rate(best) * step,
            tokens as f64 / passes as f64,
            tokens as f64 / secs,
            tokens as f64 / secs * step
        );
    }
    Ok(())
}
