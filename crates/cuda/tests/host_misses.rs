//! The host's half of a pass with experts off the card (ops/misses.rs), with no device: the test plays
//! the card on its own thread. Each named slot comes back with the CPU back-end's bits for its expert
//! (its gate, up and down products over the token's input), the slots the card keeps are left alone, the
//! layer is the one asked for, and a request no pass could write is refused in words.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

use strata_cuda::ops::misses::{Mailbox, MissError, MissServer, Routed, SlotAsk, MAX_T};
use strata_gguf::GgmlType;
use strata_model::ops::act::glu;
use strata_model::ops::matvec::Inputs;
use strata_model::weights::MoeWeights;
use strata_model::{Model, RopeScaling};
use strata_synth::{Options, Preset, Router};

fn model(experts: GgmlType) -> Model {
    let dir = strata_scratch::Scratch::new("host-misses");
    let path = dir.join("m.gguf");
    strata_synth::write(
        &path,
        &Options { preset: Preset::tiny(), experts, seed: 5, router: Router::Uniform },
        &|_, _| {},
    )
    .unwrap();
    Model::open(&path, RopeScaling::None).unwrap()
}

/// Expert e of `w` over x, as the CPU back-end's own products make it (layers/moe.rs).
fn expert(w: &MoeWeights, x: &[f32], f: usize, e: usize) -> Vec<f32> {
    let xs = [x];
    let inputs = Inputs::new(&xs);
    let g = w.gate_exps.m.matvec_rows_inputs(&inputs, w.gate_exps.first_row(e), f);
    let u = w.up_exps.m.matvec_rows_inputs(&inputs, w.up_exps.first_row(e), f);
    let h = glu(&g, &u);
    let hs = [h[0].as_slice()];
    w.down_exps.m.matvec_rows_inputs(&Inputs::new(&hs), w.down_exps.first_row(e), x.len()).remove(0)
}

/// The request's slots: the host computes the named ones; the card holds the others, each with an
/// expert of its own (the host is told it but computes nothing for it).
fn slots(ids: &[Option<usize>], e: usize) -> Vec<SlotAsk> {
    let held = |s: usize| SlotAsk { expert: (s * 7 + 3) % e, host: false };
    ids.iter().enumerate().map(|(s, id)| id.map_or(held(s), |expert| SlotAsk { expert, host: true })).collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn named_slots_come_back_with_the_cpu_bits_and_the_rest_untouched() {
    for ty in [GgmlType::Q2_0, GgmlType::IQ2_XS] {
        let m = model(ty);
        let c = &m.config;
        let (k, f, n, e) = (c.n_expert_used, c.expert_ff, c.n_embd, c.n_expert);
        let layers: Vec<&MoeWeights> = m.weights.layers.iter().map(|l| &l.moe).collect();
        let words: Vec<AtomicU32> = (0..Mailbox::words(k, n)).map(|_| AtomicU32::new(0)).collect();
        let mb = Mailbox::new(&words, k, n);
        let t = 3;
        let xs: Vec<Vec<f32>> =
            (0..t).map(|j| (0..n).map(|i| ((i * 31 + j * 7) % 19) as f32 / 9.0 - 1.0).collect()).collect();
        let rows: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
        // Every other slot named; token 0 and token 2 share an expert, so it is computed once for both.
        let ids: Vec<Option<usize>> =
            (0..t * k).map(|s| (s % 2 == 0).then_some(if s == 2 * k { 0 } else { (s * 5 + 1) % e })).collect();
        let asks = slots(&ids, e);
        let layer = layers.len() - 1;
        // A sentinel in the slots the card keeps.
        let sentinel = 7.5f32.to_bits();
        let out0 = Mailbox::words(k, n) - MAX_T * k * n;
        for w in &words[out0..] {
            w.store(sentinel, std::sync::atomic::Ordering::Relaxed);
        }
        std::thread::scope(|s| {
            let host = s.spawn(|| mb.serve_one(&layers, f, Duration::from_secs(60)));
            mb.ask(layer, &asks, &rows);
            assert_eq!(host.join().unwrap(), Ok(layer));
        });
        assert!(mb.answered());
        for (slot, id) in ids.iter().enumerate() {
            let got = mb.output(slot);
            match id {
                Some(ex) => {
                    let want = expert(layers[layer], &xs[slot / k], f, *ex);
                    assert_eq!(bits(&got), bits(&want), "{ty:?} slot {slot} (expert {ex})");
                }
                None => assert!(got.iter().all(|v| v.to_bits() == sentinel), "{ty:?} slot {slot} was written"),
            }
        }
        mb.take();
        assert!(!mb.answered());
    }
}

#[test]
fn requests_no_pass_could_write_are_refused() {
    let m = model(GgmlType::Q2_0);
    let c = &m.config;
    let (k, f, n) = (c.n_expert_used, c.expert_ff, c.n_embd);
    let layers: Vec<&MoeWeights> = m.weights.layers.iter().map(|l| &l.moe).collect();
    let words: Vec<AtomicU32> = (0..Mailbox::words(k, n)).map(|_| AtomicU32::new(0)).collect();
    let mb = Mailbox::new(&words, k, n);
    let x = vec![0.5f32; n];
    let none = vec![None; k];
    // A layer the model does not have.
    mb.ask(layers.len(), &slots(&none, c.n_expert), &[&x]);
    let err = mb.serve_one(&layers, f, Duration::from_secs(5)).unwrap_err();
    assert!(matches!(&err, MissError::Bad(w) if w.contains("layer")), "{err}");
    assert!(mb.answered(), "a refused request is still answered, so the card does not wait for ever");
    mb.take();
    // An expert past the router's.
    let mut ids = none.clone();
    ids[1] = Some(c.n_expert);
    mb.ask(0, &slots(&ids, c.n_expert), &[&x]);
    let err = mb.serve_one(&layers, f, Duration::from_secs(5)).unwrap_err();
    assert!(matches!(&err, MissError::Bad(w) if w.contains("expert")), "{err}");
    // No request at all.
    let err = mb.serve_one(&layers, f, Duration::from_millis(50)).unwrap_err();
    assert!(matches!(err, MissError::Silent(_)), "{err}");
    assert!(err.to_string().starts_with("the card asked for no host experts"), "{err}");
}

#[test]
fn the_server_answers_a_pass_layer_by_layer_and_keeps_the_first_refusal() {
    let m = model(GgmlType::Q2_0);
    let c = &m.config;
    let (k, f, n, e) = (c.n_expert_used, c.expert_ff, c.n_embd, c.n_expert);
    let layers: Vec<MoeWeights> = m.weights.layers.iter().map(|l| l.moe.clone()).collect();
    let words: std::sync::Arc<Vec<AtomicU32>> =
        std::sync::Arc::new((0..Mailbox::words(k, n)).map(|_| AtomicU32::new(0)).collect());
    let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = told.clone();
    let routed: Routed = std::sync::Arc::new(move |l: usize, ex: &[usize]| sink.lock().unwrap().push((l, ex.to_vec())));
    let server = MissServer::spawn(words.clone(), (k, n, f), layers.clone(), Some(routed));
    let mb = Mailbox::new(&words, k, n);
    let x: Vec<f32> = (0..n).map(|i| (i % 7) as f32 / 3.0 - 1.0).collect();
    // A pass: one request a layer, in order, each answered before the next (as the card waits).
    server.wake();
    for (l, moe) in layers.iter().enumerate() {
        let ids: Vec<Option<usize>> = (0..k).map(|r| (r != 1).then_some((l * 3 + r * 2) % e)).collect();
        let asks = slots(&ids, e);
        mb.ask(l, &asks, &[&x]);
        while !mb.answered() {
            std::hint::spin_loop();
        }
        for (slot, id) in ids.iter().enumerate() {
            if let Some(ex) = id {
                assert_eq!(bits(&mb.output(slot)), bits(&expert(moe, &x, f, *ex)), "layer {l} slot {slot}");
            }
        }
        mb.take();
        let last = told.lock().unwrap().last().cloned();
        assert_eq!(last, Some((l, asks.iter().map(|a| a.expert).collect())), "the routing told, held slots too");
    }
    assert_eq!(server.error(), None);
    // A window of two tokens: counted apart from the one-token requests.
    let ids: Vec<Option<usize>> = (0..2 * k).map(|i| Some(i % e)).collect();
    mb.ask(0, &slots(&ids, e), &[&x, &x]);
    while !mb.answered() {
        std::hint::spin_loop();
    }
    mb.take();
    let [one, windows, gaps] = server.answered();
    assert_eq!((one.0, windows.0), (layers.len() as u64, 1), "requests of one token, then of windows");
    // A gap is counted only before a one-token request that follows one: at most one for each request of
    // the pass after its first (fewer where this test's own checks between them took over 2 ms), none for
    // the window's.
    assert!(gaps.0 < layers.len() as u64, "{} gaps for {} one-token requests", gaps.0, layers.len());
    // The one-token requests' parts are within their whole (seeing one to answering it), and computing
    // experts took some of it.
    let p = server.one_token_parts();
    assert!(
        p.read + p.computed + p.written <= one.1,
        "{:?} + {:?} + {:?} within {:?}",
        p.read,
        p.computed,
        p.written,
        one.1
    );
    assert!(p.computed > std::time::Duration::ZERO);
    // A request no pass could write: answered, and kept as the server's error.
    mb.ask(0, &vec![SlotAsk { expert: e, host: true }; k], &[&x]);
    while !mb.answered() {
        std::hint::spin_loop();
    }
    mb.take();
    let err = server.error().expect("the refusal kept");
    assert!(err.contains(&format!("expert {e} of {e}")), "{err}");
    drop(server); // joins the thread
}
