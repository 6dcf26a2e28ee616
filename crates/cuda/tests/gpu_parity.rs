//! GPU parity: needs a CUDA device, so these tests are ignored in CI (reported as ignored, never as
//! passed) and run on the device machine with `cargo test -- --ignored` (the H200 runs the same checks
//! through `strata parity`: bench/gpu_eps.sh). Without a device, start-up must be a clear error.

use strata_cuda::{parity, CudaError, Gpu};

fn gpu() -> std::sync::Arc<Gpu> {
    Gpu::new(0).expect("a CUDA device (these tests run on the device machine)")
}

#[test]
fn without_a_device_the_error_says_so() {
    if let Err(e) = Gpu::new(0) {
        assert!(matches!(e, CudaError::NoDevice(_)), "not a clear no-device error: {e}");
        assert!(e.to_string().starts_with("no CUDA device: use --device cpu"), "{e}");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn hc_read_equals_the_cpu() {
    assert!(parity::gr_parity(&gpu(), &[(256, 4, 32)], 7).unwrap() > 0);
}

#[test]
#[ignore = "needs a CUDA device"]
fn hc_window_equals_single_tokens() {
    assert!(parity::gr_multi_parity(&gpu(), 256, 4, 32, 7).unwrap() > 0);
}
