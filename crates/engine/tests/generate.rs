//! The generation loop's stop rules, events and errors, on the converter-written fixture model.

use std::path::Path;

use strata_engine::generate::{
    complete_state, generate, Drafts, Event, GenerateConfig, GenerateError, Generated, Stop,
};
use strata_engine::sampler::SamplerConfig;
use strata_model::decoder::{CpuDecoder, Decoder};
use strata_model::{KvMode, Model, RopeScaling};

fn model() -> Model {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/real/qwen4exp-real-q8_0.gguf");
    Model::open(path, RopeScaling::None).unwrap()
}

fn cfg(n: usize, stops: Vec<u32>, max_context: usize) -> GenerateConfig {
    GenerateConfig {
        n_predict: n,
        stops,
        ignore_eos: false,
        max_context,
        sampler: SamplerConfig::default(),
        logits: true,
        mark: None,
        spec: Drafts::Fixed(0),
        draft_vocab: None,
    }
}

/// Runs a generation and records its events as a string: `L` for logits, the id for a token (the
/// prompt's progress is checked here: after each window, counting up to the prompt, before any logits).
fn run(m: &Model, prompt: &[u32], c: &GenerateConfig) -> (Result<Generated, GenerateError>, String) {
    let mut dec = CpuDecoder::new(m, m.new_state(KvMode::F16).unwrap());
    let window = dec.window();
    let mut log = String::new();
    let mut progress = Vec::new();
    let r = generate(&mut dec, prompt, c, |e| {
        match e {
            Event::Prompt { done, total } => {
                assert!(log.is_empty() || log == "M ", "prompt progress after a token: {log}");
                assert_eq!(total, prompt.len());
                progress.push(done);
            }
            Event::Logits(l) => {
                assert_eq!(l.len(), m.config.vocab);
                log.push('L');
            }
            Event::Mark(dec) => {
                assert_eq!(
                    Some(dec.position()),
                    c.mark,
                    "the mark comes with the decoder holding the prompt before it"
                );
                assert_eq!(progress.last().copied(), c.mark, "the mark comes right after the window that ends there");
                log.push_str("M ");
            }
            Event::Token(t) => log.push_str(&format!("{t} ")),
        }
        Ok(())
    });
    if r.is_ok() {
        // Windows of `window` up to the mark, then from it.
        let m = c.mark.filter(|&m| m > 0 && m < prompt.len()).unwrap_or(0);
        let ends = |from: usize, to: usize| (from..to).step_by(window).map(move |i| (i + window).min(to));
        let want: Vec<usize> = ends(0, m).chain(ends(m, prompt.len())).collect();
        assert_eq!(progress, want, "one progress event per window of {window}");
    }
    (r, log)
}

#[test]
fn a_mark_splits_the_prompts_windows_and_changes_no_token() {
    let m = model();
    let prompt: Vec<u32> = (0..30).map(|i| (i * 37 + 5) % 3000).collect();
    let (plain, log) = run(&m, &prompt, &cfg(6, vec![], 4096));
    let (marked, marked_log) = run(&m, &prompt, &GenerateConfig { mark: Some(13), ..cfg(6, vec![], 4096) });
    assert_eq!(plain.unwrap().tokens, marked.unwrap().tokens);
    assert_eq!(marked_log, format!("M {log}"), "the mark comes once, before the first token");
    // A mark outside the prompt's inside is no mark.
    for at in [0, 30, 31] {
        let (_, l) = run(&m, &prompt, &GenerateConfig { mark: Some(at), ..cfg(2, vec![], 4096) });
        assert!(!l.contains('M'), "mark {at}: {l}");
    }
}

#[test]
fn stop_rules_and_events() {
    let m = model();
    let prompt: Vec<u32> = (0..30).map(|i| (i * 37 + 5) % 3000).collect();
    let (all, log) = run(&m, &prompt, &cfg(8, vec![], 4096));
    let all = all.unwrap();
    assert_eq!((all.tokens.len(), all.stop), (8, Stop::Length));
    assert_eq!(log.matches('L').count(), 8, "one logits event before each token: {log}");
    // A stop token ends the generation and is its last token; with ignore_eos it does not.
    let third = all.tokens[2];
    let first_at = all.tokens.iter().position(|&t| t == third).unwrap();
    let (r, _) = run(&m, &prompt, &cfg(8, vec![third], 4096));
    let r = r.unwrap();
    assert_eq!(r.stop, Stop::StopToken(third));
    assert_eq!(r.tokens, all.tokens[..=first_at]);
    let (r, _) = run(&m, &prompt, &GenerateConfig { ignore_eos: true, ..cfg(8, vec![third], 4096) });
    assert_eq!(r.unwrap().tokens, all.tokens);
    // A full context stops it: 30 prompt cells of 33 leave room for 3 more tokens through the model.
    let (r, _) = run(&m, &prompt, &cfg(8, vec![], 33));
    let r = r.unwrap();
    assert_eq!((r.stop, r.tokens.clone()), (Stop::ContextFull, all.tokens[..4].to_vec()));
    // Nothing asked, nothing generated.
    let (r, log) = run(&m, &prompt, &cfg(0, vec![], 4096));
    assert_eq!((r.unwrap().tokens.len(), log.as_str()), (0, ""));
}

#[test]
fn without_logits_the_decoder_chooses_the_same_tokens() {
    // Without logits asked for, greedy tokens come from the decoder's own argmax (the device's on a GPU)
    // and no logits event is sent; the tokens and the state left behind are those of the logits path.
    let m = model();
    let prompt: Vec<u32> = (0..21).map(|i| (i * 53 + 11) % 3000).collect();
    let (with, log) = run(&m, &prompt, &cfg(12, vec![], 4096));
    let (without, quiet) = run(&m, &prompt, &GenerateConfig { logits: false, ..cfg(12, vec![], 4096) });
    assert_eq!(with.unwrap().tokens, without.unwrap().tokens);
    assert_eq!((log.matches('L').count(), quiet.matches('L').count()), (12, 0));
    // Sampling draws where the logits are (the decoder's `forward_sample`) with the same uniform numbers
    // as a draw made here from the logits: the same tokens, and no logits event unless asked for.
    let sampler = SamplerConfig { temperature: 0.8, top_k: 0, top_p: 0.95, seed: 3, ..Default::default() };
    let here = GenerateConfig { sampler: sampler.clone(), ..cfg(12, vec![], 4096) };
    let there = GenerateConfig { logits: false, sampler, ..cfg(12, vec![], 4096) };
    let ((a, la), (b, lb)) = (run(&m, &prompt, &here), run(&m, &prompt, &there));
    assert_eq!(a.unwrap().tokens, b.unwrap().tokens);
    assert_eq!((la.matches('L').count(), lb.matches('L').count()), (12, 0));
}

#[test]
fn bad_prompts_are_errors() {
    let m = model();
    assert!(matches!(run(&m, &[], &cfg(4, vec![], 64)).0, Err(GenerateError::EmptyPrompt)));
    let vocab = m.config.vocab as u32;
    assert!(
        matches!(run(&m, &[1, vocab], &cfg(4, vec![], 64)).0, Err(GenerateError::TokenOutOfVocab { id, .. }) if id == vocab)
    );
    assert!(matches!(run(&m, &[1; 65], &cfg(4, vec![], 64)).0, Err(GenerateError::PromptTooLong { prompt: 65, .. })));
}

#[test]
fn a_completed_state_continues_like_one_run() {
    let m = model();
    let prompt: Vec<u32> = (0..20).map(|i| (i * 91 + 7) % 3000).collect();
    let c = cfg(6, vec![], 4096);
    let mut dec = CpuDecoder::new(&m, m.new_state(KvMode::F16).unwrap());
    let first = generate(&mut dec, &prompt, &c, |_| Ok(())).unwrap();
    complete_state(&mut dec, &first, 4096).unwrap();
    assert_eq!(dec.position(), prompt.len() + first.tokens.len());
    // Continuing with a new turn equals one run over the whole conversation.
    let turn = [11u32, 12, 13];
    let cont = generate(&mut dec, &turn, &c, |_| Ok(())).unwrap();
    let whole: Vec<u32> = prompt.iter().chain(&first.tokens).chain(&turn).copied().collect();
    let mut fresh = CpuDecoder::new(&m, m.new_state(KvMode::F16).unwrap());
    let once = generate(&mut fresh, &whole, &c, |_| Ok(())).unwrap();
    assert_eq!(cont.tokens, once.tokens);
}
