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
