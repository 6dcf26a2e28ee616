//! Start-up choice of kernel variants: every variant is checked against the plain kernel on random inputs
//! (T = 1..8, with the pending write and inject rows, edge-case streams) bit for bit; one that differs is
//! never used on this card; among those that pass the fastest is the default. A switch forces a choice.

use std::sync::OnceLock;

use crate::buf::Buf;
use crate::device::Gpu;
use crate::error::CudaError;
use crate::hc::{hc_read_with, HcGpu, HcScratch, HcVariant, Pending, MAX_T};
use crate::parity::{gpu_read as read, inputs, random_hc};

/// The chosen HC variant and why.
#[derive(Clone, Debug)]
pub struct Choice {
    pub variant: HcVariant,
    pub reason: String,
}

static HC: OnceLock<Choice> = OnceLock::new();

/// The HC read variant this process uses (decided once).
pub fn hc_variant(gpu: &Gpu) -> &'static Choice {
    HC.get_or_init(|| choose_hc(gpu))
}

fn choose_hc(gpu: &Gpu) -> Choice {
    if let Some(v) = HcVariant::from_env() {
        return Choice { variant: v, reason: "forced by a switch".into() };
    }
    let (n, hc, r) = (2560, 4, 320);
    let w = random_hc(n, hc, r, true, 0x5e1f);
    let (Ok(wg), Ok(s)) = (HcGpu::upload(gpu, &w, hc), HcScratch::new(gpu, n, hc, r)) else {
        return Choice { variant: HcVariant::PLAIN, reason: "self-check could not run: plain".into() };
    };
    let mut best = (HcVariant::PLAIN, f64::INFINITY);
    let mut notes = Vec::new();
    for v in HcVariant::ALL {
        if v != HcVariant::PLAIN && !agrees(gpu, v, &wg, &s, n, hc) {
            notes.push(format!("{} differs from plain: never used", v.name()));
            continue;
        }
        // Device time of T = 1 and T = 4 reads (events around 20 calls each), pending write folded in.
        let mut secs = 0.0;
        for t in [1, 4] {
            let x = inputs(n, hc, t, 9);
            let bufs = (Buf::from_host(gpu, &x.r), Buf::from_host(gpu, &x.y), Buf::from_host(gpu, &x.inj));
            let (Ok(rb), Ok(yb), Ok(ib)) = bufs else {
                return Choice { variant: HcVariant::PLAIN, reason: "no memory for the check".into() };
            };
            let out: Result<Buf<f32>, _> = Buf::zeros(gpu, x.r.len());
            let Ok(out) = out else {
                return Choice { variant: HcVariant::PLAIN, reason: "no memory for the check".into() };
            };
            let call = || {
                hc_read_with(gpu, v, &wg, rb.ptr(gpu), out.ptr(gpu), Some(Pending { y: &yb, inj: &ib }), t, &s, None)
            };
            secs += crate::bench::time_calls(gpu, 20, &call).unwrap_or(f64::INFINITY);
        }
        notes.push(format!("{} {:.1} µs", v.name(), secs));
        if secs < best.1 {
            best = (v, secs);
        }
    }
    Choice {
        variant: best.0,
        reason: format!("self-checked and timed at start-up (T = 1 plus T = 4): {}", notes.join(", ")),
    }
}

/// Whether variant `v` gives the plain kernel's bits for T = 1..8.
fn agrees(gpu: &Gpu, v: HcVariant, w: &HcGpu, s: &HcScratch, n: usize, hc: usize) -> bool {
    (1..=MAX_T).all(|t| {
        let x = inputs(n, hc, t, 1000 + t as u64);
        let plain = read(gpu, HcVariant::PLAIN, w, s, &x, t, true, false);
        let other = read(gpu, v, w, s, &x, t, true, false);
        matches!((plain, other), (Ok(a), Ok(b)) if bits(&a) == bits(&b))
    })
}

fn bits(o: &crate::parity::ReadOut) -> Vec<u32> {
    o.0.iter().chain(&o.1).chain(&o.2).map(|v| v.to_bits()).collect()
}

static SCORES: OnceLock<(crate::qsa::ScoresVariant, String)> = OnceLock::new();
static TOPK: OnceLock<(crate::qsa::TopkVariant, String)> = OnceLock::new();

/// The fastest of `variants` whose check passes: `check` gives `Some(µs)` for a variant that agrees with the
/// reference, `None` for one that differs (never used). Returns the choice and a line saying why.
fn fastest<V: Copy>(
    variants: &[V],
    name: fn(V) -> &'static str,
    check: impl Fn(V) -> Result<Option<f64>, CudaError>,
) -> (V, String) {
    let mut best: Option<(V, f64)> = None;
    let mut notes = Vec::new();
    for &v in variants {
        match check(v) {
            Ok(Some(us)) => {
                notes.push(format!("{} {us:.1} µs", name(v)));
                if best.is_none_or(|(_, b)| us < b) {
                    best = Some((v, us));
                }
            }
            Ok(None) => notes.push(format!("{} differs: never used", name(v))),
            Err(e) => notes.push(format!("{} failed: {e}", name(v))),
        }
    }
    let choice = best.map(|(v, _)| v).unwrap_or(variants[0]);
    (choice, format!("self-checked and timed at start-up (Q = 4, 131K cells): {}", notes.join(", ")))
}

/// The QSA scorer this process uses: `STRATA_SCORES_HALVE` / `_TILE` / `_STREAM` force one; otherwise
/// each is checked against the butterfly kernel (Q = 4, 131K cells) and the fastest that agrees wins.
pub fn scores_variant(gpu: &Gpu) -> &'static (crate::qsa::ScoresVariant, String) {
    use crate::qsa::ScoresVariant;
    SCORES.get_or_init(|| match ScoresVariant::from_env() {
        Some(v) => (v, "forced by a switch".into()),
        None => fastest(&ScoresVariant::ALL, ScoresVariant::name, |v| crate::bench::scores_check(gpu, v)),
    })
}

/// The QSA top-k this process uses: `STRATA_TOPK_SPLIT` forces one; otherwise each is checked against the
/// CPU and the faster wins.
pub fn topk_variant(gpu: &Gpu) -> &'static (crate::qsa::TopkVariant, String) {
    use crate::qsa::TopkVariant;
    TOPK.get_or_init(|| match TopkVariant::from_env() {
        Some(v) => (v, "forced by a switch".into()),
        None => fastest(&TopkVariant::available(gpu), TopkVariant::name, |v| crate::bench::topk_check(gpu, v)),
    })
}
