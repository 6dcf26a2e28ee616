//! GPU parity, every kernel family and the whole pass, bit for bit against the CPU: needs a CUDA device, so
//! these tests are ignored in CI (reported as ignored, never as passed). On the device machine (no Rust
//! there) the test binary built here runs with `--ignored` (bench/gpu_tests.sh), where a missing device
//! fails every test. Without a device, start-up must be a clear error.

use std::path::Path;
use std::sync::Arc;

use strata_cuda::tools::parity;
use strata_cuda::{CudaError, Gpu, Settings};
use strata_model::{KvMode, Model, RopeScaling};

/// The switches from the environment (a test may read it), so bench/gpu_tests.sh can run the tests
/// under a switch.
fn settings() -> Settings {
    Settings::read(&|k| std::env::var(k).ok()).0
}

fn gpu() -> Arc<Gpu> {
    Gpu::new(0, settings()).expect("a CUDA device (these tests run on the device machine)")
}

/// A parity tool's outcome: some cases checked, none different.
fn ok(what: &str, outcome: parity::Outcome) {
    match outcome {
        Ok(n) => assert!(n > 0, "{what}: no case ran"),
        Err(e) => panic!("{what}: {e}"),
    }
}

/// Without a device the error is clear; with `STRATA_REQUIRE_GPU=1` (bench/gpu_tests.sh sets it on the
/// device machine) there must be one, so a run there that found none fails rather than passing.
#[test]
fn without_a_device_the_error_says_so() {
    match Gpu::new(0, settings()) {
        Err(e) => {
            assert!(std::env::var("STRATA_REQUIRE_GPU").as_deref() != Ok("1"), "STRATA_REQUIRE_GPU=1: {e}");
            assert!(matches!(e, CudaError::NoDevice(_)), "not a clear no-device error: {e}");
            assert!(e.to_string().starts_with("no CUDA device: use --device cpu"), "{e}");
        }
        Ok(gpu) => assert!(gpu.sm_count > 0 && !gpu.name.is_empty(), "a device that says nothing of itself"),
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn hc_read_equals_the_cpu() {
    ok("gr_parity", parity::gr_parity(&gpu(), &[(256, 4, 32), (2560, 4, 320)], 1));
}

#[test]
#[ignore = "needs a CUDA device"]
fn hc_window_equals_single_tokens() {
    ok("gr_multi_parity", parity::gr_multi_parity(&gpu(), 2560, 4, 320, 1));
}

#[test]
#[ignore = "needs a CUDA device"]
fn hc_long_window_equals_the_cpu() {
    ok("gr_long_parity", parity::gr_long_parity(&gpu(), &[(256, 4, 32), (2560, 4, 320)], 3));
}

#[test]
#[ignore = "needs a CUDA device"]
fn qsa_scores_equal_the_cpu() {
    ok("qsa_parity", parity::qsa_parity(&gpu(), 1));
}

#[test]
#[ignore = "needs a CUDA device"]
fn qsa_topk_equals_the_cpu() {
    ok("qsa_topk_parity", parity::qsa_topk_selftest(&gpu(), 1));
}

#[test]
#[ignore = "needs a CUDA device"]
fn matvec_equals_the_cpu() {
    ok("matvec_parity", parity::matvec_parity(&gpu(), 1));
}

#[test]
#[ignore = "needs a CUDA device"]
fn draft_heads_equal_the_cpu() {
    ok("draft_head_parity", parity::draft_head_parity(&gpu(), 1));
}

#[test]
#[ignore = "needs a CUDA device"]
fn gdn_equals_the_cpu() {
    ok("gdn_parity", parity::gdn_parity(&gpu(), 1));
}

#[test]
#[ignore = "needs a CUDA device"]
fn moe_equals_the_cpu() {
    ok("moe_parity", parity::moe_parity(&gpu(), 1));
}

#[test]
#[ignore = "needs a CUDA device"]
fn attention_equals_the_cpu() {
    ok("attn_parity", parity::attn_parity(&gpu(), 1));
}

#[test]
#[ignore = "needs a CUDA device"]
fn sampling_equals_the_cpu() {
    ok("sample_parity", parity::sample_parity(&gpu(), 1));
}

/// The whole pass on every converter-written fixture (the real one and the sweep of geometries), each
/// window size T = 1..8, fp16 and f32 KV (int8 where the cells are whole groups of 64).
#[test]
#[ignore = "needs a CUDA device"]
fn the_whole_pass_equals_the_cpu_on_every_fixture() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
    let mut files = vec![root.join("real/qwen4exp-real-f32.gguf"), root.join("real/qwen4exp-real-q8_0.gguf")];
    let mut sweep: Vec<_> =
        std::fs::read_dir(root.join("sweep")).unwrap().map(|e| e.unwrap().path().join("model.gguf")).collect();
    sweep.sort();
    files.extend(sweep);
    let g = gpu();
    for f in files {
        let m = Model::open(&f, RopeScaling::None).unwrap();
        for kv in [KvMode::F16, KvMode::F32, KvMode::Int8] {
            if m.new_state(kv).is_err() {
                continue; // int8 refused for cells that are not whole groups of 64
            }
            ok(&format!("{}, {kv:?}", f.display()), parity::forward_parity(&g, &m, 96, kv));
        }
    }
}

/// The card's half of a pass with experts in host memory (ops/misses.rs, kernels/misses.cu) against the
/// host's (ops/misses.rs), on a real card: the slots the residency table does not hold are asked for,
/// answered by the host from the experts' bytes, and land in their rows with the host's bits; the card's
/// own rows are left alone, each slot's cache slot (0 for the host's) comes back for the card's
/// gathers, and the host is told every slot's expert.
#[test]
#[ignore = "needs a CUDA device"]
fn host_experts_reach_the_card_with_their_bits() {
    use strata_cuda::ops::misses::MissBox;
    use strata_cuda::runtime::buf::Buf;
    use strata_model::layers::experts::slot_outputs;
    use strata_model::weights::MoeWeights;

    let dir = strata_scratch::Scratch::new("gpu-misses");
    let path = dir.join("m.gguf");
    let opts = strata_synth::Options {
        preset: strata_synth::Preset::tiny(),
        experts: strata_gguf::GgmlType::Q2_0,
        seed: 9,
        router: strata_synth::Router::Uniform,
    };
    strata_synth::write(&path, &opts, &|_, _| {}).unwrap();
    let m = Model::open(&path, RopeScaling::None).unwrap();
    let c = &m.config;
    let (k, f, n, e) = (c.n_expert_used, c.expert_ff, c.n_embd, c.n_expert);
    let layers: Vec<&MoeWeights> = m.weights.layers.iter().map(|l| &l.moe).collect();
    let g = gpu();
    let mb = MissBox::new(&g, k, n).unwrap();
    let t = 3;
    let ids: Vec<i32> = (0..t * k).map(|s| ((s / k) * 3 + (s % k) * 5) as i32 % e as i32).collect();
    let slot_of: Vec<i32> = (0..e as i32).map(|x| if x % 3 == 0 { -1 } else { x + 100 }).collect();
    let xs: Vec<Vec<f32>> =
        (0..t).map(|j| (0..n).map(|i| ((i * 13 + j * 5) % 17) as f32 / 8.0 - 1.0).collect()).collect();
    let x: Vec<f32> = xs.concat();
    let sentinel = 7.5f32;
    let (ids_d, slot_d, x_d) =
        (Buf::from_host(&g, &ids).unwrap(), Buf::from_host(&g, &slot_of).unwrap(), Buf::from_host(&g, &x).unwrap());
    let cache_d = Buf::<i32>::zeros(&g, t * k).unwrap();
    let eo_d = Buf::from_host(&g, &vec![sentinel; t * k * n]).unwrap();
    let layer = 1 % layers.len();
    // Twice: answered by one request served on a thread of the test's, then by the server thread.
    std::thread::scope(|s| {
        let host = s.spawn(|| mb.mailbox().serve_one(&layers, f, std::time::Duration::from_secs(60)));
        mb.ask(&g, (layer, t, 1), (&ids_d, &slot_d, &x_d), (&cache_d, None), None).unwrap();
        mb.take(&g, t, &eo_d, None).unwrap();
        g.sync().unwrap();
        assert_eq!(host.join().unwrap(), Ok(layer));
    });
    let first = eo_d.read(&g, t * k * n).unwrap();
    let eo_d = Buf::from_host(&g, &vec![sentinel; t * k * n]).unwrap();
    // The server is told every slot's expert, the card's own included (the cache's counts).
    let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = told.clone();
    let routed: strata_cuda::ops::misses::Routed =
        std::sync::Arc::new(move |l: usize, ex: &[usize]| sink.lock().unwrap().push((l, ex.to_vec())));
    let server = mb.serve(layers.iter().map(|&l| l.clone()).collect(), f, Some(routed));
    server.wake();
    mb.ask(&g, (layer, t, 1), (&ids_d, &slot_d, &x_d), (&cache_d, None), None).unwrap();
    mb.take(&g, t, &eo_d, None).unwrap();
    g.sync().unwrap();
    assert_eq!(server.error(), None);
    let want_told: Vec<(usize, Vec<usize>)> =
        ids.chunks(k).map(|tok| (layer, tok.iter().map(|&i| i as usize).collect())).collect();
    assert_eq!(*told.lock().unwrap(), want_told, "the routing the server was told");
    let (cache, eo) = (cache_d.read(&g, t * k).unwrap(), eo_d.read(&g, t * k * n).unwrap());
    assert!(first.iter().zip(&eo).all(|(a, b)| a.to_bits() == b.to_bits()), "the server's answer differs");
    let rows: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
    let asked: Vec<Option<usize>> = ids.iter().map(|&id| (slot_of[id as usize] < 0).then_some(id as usize)).collect();
    let want = slot_outputs(layers[layer], &rows, &asked, (k, f), &strata_model::team::Pool);
    assert!(asked.iter().any(Option::is_some) && asked.iter().any(Option::is_none), "a mix of slots");
    for s in 0..t * k {
        assert_eq!(cache[s], slot_of[ids[s] as usize].max(0), "slot {s}'s cache slot");
        let got = &eo[s * n..(s + 1) * n];
        match &want[s] {
            Some(y) => {
                assert!(got.iter().zip(y).all(|(a, b)| a.to_bits() == b.to_bits()), "slot {s}: not the host's bits")
            }
            None => assert!(got.iter().all(|&v| v == sentinel), "slot {s}: the card's row was written"),
        }
    }
    // Counted on the card (`STRATA_ASK_MISSES_ONLY`): the same answer, each slot's expert counted, and the
    // server, told nothing, computes the host's slots; then a request whose slots the card all holds
    // asks nothing (the host never sees it) and its take does not wait.
    let (counts_d, skip_d) = (Buf::<u32>::zeros(&g, e).unwrap(), Buf::<i32>::zeros(&g, 1).unwrap());
    drop(server); // joins its thread: one server a mailbox
    let quiet = mb.serve(layers.iter().map(|&l| l.clone()).collect(), f, None);
    quiet.wake();
    let eo_d = Buf::from_host(&g, &vec![sentinel; t * k * n]).unwrap();
    mb.ask(&g, (layer, t, 1), (&ids_d, &slot_d, &x_d), (&cache_d, Some((&counts_d, &skip_d))), None).unwrap();
    mb.take(&g, t, &eo_d, Some(&skip_d)).unwrap();
    g.sync().unwrap();
    let counted = eo_d.read(&g, t * k * n).unwrap();
    assert!(first.iter().zip(&counted).all(|(a, b)| a.to_bits() == b.to_bits()), "the counted answer differs");
    assert_eq!(skip_d.read(&g, 1).unwrap(), [0], "a request with host slots asks");
    let mut want_counts = vec![0u32; e];
    ids.iter().for_each(|&id| want_counts[id as usize] += 1);
    assert_eq!(counts_d.read(&g, e).unwrap(), want_counts, "each slot's expert counted on the card");
    let all_held: Vec<i32> = (0..e as i32).map(|x| x + 100).collect();
    let held_d = Buf::from_host(&g, &all_held).unwrap();
    let eo_d = Buf::from_host(&g, &vec![sentinel; t * k * n]).unwrap();
    let answered = quiet.answered()[1].0; // requests of windows (t tokens)
    mb.ask(&g, (layer, t, 1), (&ids_d, &held_d, &x_d), (&cache_d, Some((&counts_d, &skip_d))), None).unwrap();
    mb.take(&g, t, &eo_d, Some(&skip_d)).unwrap();
    g.sync().unwrap();
    assert_eq!(skip_d.read(&g, 1).unwrap(), [1], "a request the card holds whole asks nothing");
    assert!(eo_d.read(&g, t * k * n).unwrap().iter().all(|&v| v == sentinel), "the card's rows left alone");
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(quiet.answered()[1].0, answered, "the host was asked");
    want_counts.iter_mut().for_each(|c| *c *= 2);
    assert_eq!(counts_d.read(&g, e).unwrap(), want_counts, "the held request's experts counted too");
    let cache = cache_d.read(&g, t * k).unwrap();
    assert!((0..t * k).all(|s| cache[s] == all_held[ids[s] as usize]), "the held slots' cache slots");
}

/// A placed prompt window's plan on the card (`miss_window_plan`) against its twin (ops/moe/window.rs
/// `assign`): random routings of windows up to 256 tokens, a third of the experts held, uniform and
/// skewed, some experts outside the bus's reach; every output table, and the counts.
#[test]
#[ignore = "needs a CUDA device"]
fn window_plans_equal_their_twin() {
    use strata_cuda::ops::moe::{assign, chunk_bound, Place, Plan, Sizes, CHUNK_SLOTS};
    use strata_cuda::runtime::buf::Buf;
    let g = gpu();
    let mut rng = strata_gguf::SplitMix64::new(0x91a9);
    for round in 0..40 {
        let (e, k) = (64 + rng.next_u64() as usize % 449, 1 + rng.next_u64() as usize % 10);
        let t = 9 + rng.next_u64() as usize % (4096 / k - 8).min(248);
        let m = t * k;
        let mut slot_of = vec![-1i32; e];
        let mut held = 0;
        for x in slot_of.iter_mut() {
            if rng.next_u64().is_multiple_of(3) {
                *x = held;
                held += 1;
            }
        }
        let ids: Vec<i32> = (0..m)
            .map(|_| {
                let r = rng.next_u64() as usize;
                (if round % 2 == 0 { r % e } else { (r % e) * (r % e) / e }) as i32
            })
            .collect();
        let (lo, hi, s) =
            (rng.next_u64() as usize % 3, e - rng.next_u64() as usize % 3, 1 + rng.next_u64() as usize % 16);
        let held = held as usize;
        let chunks = chunk_bound(m, (hi - lo).min(e - held).min(m), s, CHUNK_SLOTS);
        let z = Sizes { e, held, lo, hi, s, chunks };
        let plan = Plan::new(&g, m, z).unwrap();
        let counts = Buf::<u32>::zeros(&g, e).unwrap();
        let (ids_d, slot_of_d) = (Buf::from_host(&g, &ids).unwrap(), Buf::from_host(&g, &slot_of).unwrap());
        plan.launch(&g, (&ids_d, &slot_of_d, Some(&counts)), z).unwrap();
        let read = |b: &Buf<i32>| b.read(&g, b.len()).unwrap();
        let (held_ids, host_slot) = (read(&plan.held_ids), read(&plan.host_slot));
        let (chunk_of, chunk_list, chunk_ids) = (read(&plan.chunk_of), read(&plan.chunk_list), read(&plan.chunk_ids));
        // The twin.
        let mut per = vec![0usize; e];
        for &x in &ids {
            if slot_of[x as usize] < 0 {
                per[x as usize] += 1;
            }
        }
        let places = assign(&per, (lo, hi), s, CHUNK_SLOTS);
        let (mut want_of, mut want_list, mut want_ids) =
            (vec![-1i32; chunks * s], vec![-1i32; chunks * CHUNK_SLOTS], vec![-1i32; chunks * CHUNK_SLOTS]);
        let mut taken = vec![0usize; e];
        for (ts, &x) in ids.iter().enumerate() {
            let x = x as usize;
            assert_eq!(held_ids[ts], slot_of[x], "round {round}: held_ids[{ts}]");
            let host = matches!(places[x], Some(Place::Host));
            assert_eq!(host_slot[ts], host as i32, "round {round}: host_slot[{ts}] (expert {x})");
            if let Some(Place::Chunk { chunk, first, stream }) = places[x] {
                want_of[chunk * s + stream] = x as i32;
                want_list[chunk * CHUNK_SLOTS + first + taken[x]] = ts as i32;
                want_ids[chunk * CHUNK_SLOTS + first + taken[x]] = (held + stream) as i32;
                taken[x] += 1;
            }
        }
        assert_eq!(chunk_of, want_of, "round {round}: chunk_of");
        assert_eq!(chunk_list, want_list, "round {round}: chunk_list");
        assert_eq!(chunk_ids, want_ids, "round {round}: chunk_ids");
        let mut want_counts = vec![0u32; e];
        ids.iter().for_each(|&x| want_counts[x as usize] += 1);
        assert_eq!(counts.read(&g, e).unwrap(), want_counts, "round {round}: counts");
    }
}
