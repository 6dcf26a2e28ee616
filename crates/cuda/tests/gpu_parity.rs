//! GPU parity: runs on a machine with a CUDA device (the H200 runs the same checks through
//! `strata parity`); elsewhere each test says SKIPPED. Without a device, start-up must be a clear error.

use strata_cuda::{parity, CudaError, Gpu};

fn gpu() -> Option<std::sync::Arc<Gpu>> {
    match Gpu::new(0) {
        Ok(g) => Some(g),
        Err(e) => {
            assert!(matches!(e, CudaError::NoDevice(_)), "not a clear no-device error: {e}");
            assert!(e.to_string().starts_with("no CUDA device: use --device cpu"), "{e}");
            eprintln!("SKIPPED: {e}");
            None
        }
    }
}

#[test]
fn hc_read_equals_the_cpu() {
    let Some(g) = gpu() else { return };
    assert!(parity::gr_parity(&g, &[(256, 4, 32)], 7).unwrap() > 0);
}

#[test]
fn hc_window_equals_single_tokens() {
    let Some(g) = gpu() else { return };
    assert!(parity::gr_multi_parity(&g, 256, 4, 32, 7).unwrap() > 0);
}
