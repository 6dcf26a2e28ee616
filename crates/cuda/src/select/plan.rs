//! The plan: which variant of each kernel family this card runs, chosen once and kept. Every variant is
//! first checked bit for bit against the reference (the plain HC read on random inputs with T = 1..8, the
//! pending write, inject rows and edge-case streams; the butterfly scorer; the CPU's block selection); one
//! that differs is never used on this card; among those that pass the fastest is chosen. The choice is kept
//! on disk per card, driver and binary (`$STRATA_CACHE/plans/`), so the checks (about 5 s on an H200,
//! beside the kernels' compilation: start.rs) run once, not at every start. A switch (docs/DETAILS.md)
//! forces a variant, and a forced choice is not kept.

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::ops::hc::{hc_read_with, HcGpu, HcScratch, HcVariant, Pending, MAX_T};
use crate::ops::layout::{Layout, Layouts};
use crate::ops::qsa::{ScoresVariant, TopkVariant};
use crate::ops::variants::Variants;
use crate::runtime::buf::Buf;
use crate::runtime::device::Gpu;
use crate::runtime::error::CudaError;
use crate::select::check::{
    gpu_read as read, inputs, matvec_layout_cases, matvec_window_case, random_hc, random_hc_as, scores_check,
    time_cold, topk_check, FLUSH_BYTES,
};

/// A chosen variant and why.
#[derive(Clone, Debug)]
pub struct Choice<V> {
    pub variant: V,
    pub reason: String,
}

/// The variants this card runs.
#[derive(Clone, Debug)]
pub struct Plan {
    pub matvec: Choice<Layouts>,
    pub hc: Choice<HcVariant>,
    pub scores: Choice<ScoresVariant>,
    pub topk: Choice<TopkVariant>,
}

impl Plan {
    /// The chosen variants, as the weights' uploads take them.
    pub fn variants(&self) -> Variants {
        Variants {
            layouts: self.matvec.variant.clone(),
            hc: self.hc.variant,
            scores: self.scores.variant,
            topk: self.topk.variant,
        }
    }
}

static PLAN: OnceLock<Plan> = OnceLock::new();

/// The plan, if this process has made or read it already.
pub fn kept_plan() -> Option<&'static Plan> {
    PLAN.get()
}

/// Whether this card's plan is already kept on disk (else the first [`plan`] runs the checks).
pub fn is_kept(gpu: &Gpu) -> bool {
    kept(gpu).is_some()
}

/// The plan kept on disk for this card, driver and binary, if one is there and reads whole.
fn kept(gpu: &Gpu) -> Option<Plan> {
    kept_path(gpu).and_then(|p| std::fs::read_to_string(p).ok()).and_then(|t| parse(&t))
}

/// This process's plan: from the switches, the disk, or the checks (then kept on disk).
pub fn plan(gpu: &Gpu) -> &'static Plan {
    PLAN.get_or_init(|| {
        let mut plan = match kept(gpu) {
            Some(p) => p,
            None => {
                // Each family's checks timed, for the first start's note (the plan's cost, said once).
                let mut spent = Vec::new();
                let mut timed = |name: &str, t0: std::time::Instant| {
                    spent.push(format!("{name} {:.1} s", t0.elapsed().as_secs_f64()))
                };
                let t0 = std::time::Instant::now();
                let matvec = choose_matvec(gpu);
                timed("matvec", t0);
                let t0 = std::time::Instant::now();
                let hc = choose_hc(gpu);
                timed("HC", t0);
                let t0 = std::time::Instant::now();
                let scores =
                    fastest("Q = 4, 131K cells", &ScoresVariant::ALL, ScoresVariant::name, |v| scores_check(gpu, v));
                timed("scores", t0);
                let t0 = std::time::Instant::now();
                let topk = fastest("Q = 4, 131K cells", &TopkVariant::available(gpu), TopkVariant::name, |v| {
                    topk_check(gpu, v)
                });
                timed("top-k", t0);
                eprintln!("note: variants checked and timed: {}", spent.join(", "));
                let p = Plan { matvec, hc, scores, topk };
                keep(gpu, &p);
                p
            }
        };
        let forced = || "forced by a switch".to_string();
        if let Some(l) = Layouts::forced(&gpu.settings) {
            plan.matvec = Choice { variant: l, reason: forced() };
        }
        if let Some(v) = HcVariant::forced(&gpu.settings) {
            plan.hc = Choice { variant: v, reason: forced() };
        }
        if let Some(v) = ScoresVariant::forced(&gpu.settings) {
            plan.scores = Choice { variant: v, reason: forced() };
        }
        if let Some(v) = TopkVariant::forced(&gpu.settings) {
            plan.topk = Choice { variant: v, reason: forced() };
        }
        plan
    })
}

/// `$STRATA_CACHE/plans/<card>-drv<driver>-<binary>.txt`: the binary is named by its size and
/// modification time, and the kernels by the hash of their sources (with `STRATA_DEFINES`), so a rebuilt
/// binary or other macros check again.
fn kept_path(gpu: &Gpu) -> Option<PathBuf> {
    let exe = std::fs::metadata(std::env::current_exe().ok()?).ok()?;
    let mtime = exe.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    let sources: String =
        crate::ops::sources::ALL.iter().map(|kf| format!("{}{}", gpu.settings.defines, (kf.text)())).collect();
    let kernels = strata_gguf::fnv1a(sources.bytes());
    let card: String = gpu.name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let name = format!("{card}-{}-drv{}-{}-{mtime}-{kernels:016x}.txt", gpu.arch_name(), gpu.driver_version, exe.len());
    Some(gpu.settings.cache.as_ref()?.join("plans").join(name))
}

fn keep(gpu: &Gpu, p: &Plan) {
    let Some(path) = kept_path(gpu) else { return };
    let text = format!(
        "matvec {}\t{}\nhc {}\t{}\nscores {}\t{}\ntopk {}\t{}\n",
        p.matvec.variant.name(),
        p.matvec.reason,
        p.hc.variant.name(),
        p.hc.reason,
        p.scores.variant.name(),
        p.scores.reason,
        p.topk.variant.name(),
        p.topk.reason
    );
    // Keeping the plan is an optimisation: a failure to write it costs the checks next time, nothing else.
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, &path);
    }
}

/// A kept plan; `None` (check again) for anything that does not name known variants.
fn parse(text: &str) -> Option<Plan> {
    let mut lines = text.lines().map(|l| {
        let (head, reason) = l.split_once('\t')?;
        let (family, name) = head.split_once(' ')?;
        Some((family.to_string(), name.to_string(), format!("kept from an earlier start: {reason}")))
    });
    let mut next = |family: &str| lines.next().flatten().filter(|(f, _, _)| f == family);
    let (_, mv, mv_why) = next("matvec")?;
    let (_, hc, hc_why) = next("hc")?;
    let (_, sc, sc_why) = next("scores")?;
    let (_, tk, tk_why) = next("topk")?;
    Some(Plan {
        matvec: Choice { variant: Layouts::parse(&mv)?, reason: mv_why },
        hc: Choice { variant: HcVariant::ALL.into_iter().find(|v| v.name() == hc)?, reason: hc_why },
        scores: Choice { variant: ScoresVariant::ALL.into_iter().find(|v| v.name() == sc)?, reason: sc_why },
        topk: Choice { variant: TopkVariant::ALL.into_iter().find(|v| v.name() == tk)?, reason: tk_why },
    })
}

/// Per weight type, the fastest matvec layout at the full model's shapes (dense products of one token and
/// of a prompt window of 8, the experts' rows; see check.rs), among those that give the block layout's
/// bits there. Each shape's weights are made once and every layout run on them.
fn choose_matvec(gpu: &Gpu) -> Choice<Layouts> {
    let mut layouts = Layouts::default();
    let mut notes = Vec::new();
    // The § qdot types have one layout (qdot.rs): nothing to time.
    for ty in crate::ops::layout::TYPES.into_iter().filter(|&t| !crate::ops::qdot::uses(t)) {
        for gather in [false, true] {
            let what = format!("{ty} {}, T = 1, cold, the shapes' sum", if gather { "experts" } else { "dense" });
            let c = match matvec_layout_cases(gpu, ty, gather) {
                Ok(cases) => fastest(&what, &Layout::ALL, Layout::name, |l| {
                    cases.iter().try_fold(Some(0.0), |sum, c| Ok(sum.zip(c.check(gpu, l)?).map(|(a, b)| a + b)))
                }),
                Err(e) => Choice { variant: Layout::Block, reason: format!("{what}: could not run ({e}): block") },
            };
            if c.variant != Layout::Block {
                if gather { &mut layouts.gather } else { &mut layouts.dense }.push((ty, c.variant));
            }
            notes.push(c.reason);
        }
        let what = format!("{ty} dense, T = 8, cold");
        let c = match matvec_window_case(gpu, ty) {
            Ok(case) => fastest(&what, &Layout::ALL, Layout::name, |l| case.check(gpu, l)),
            Err(e) => Choice { variant: Layout::Block, reason: format!("{what}: could not run ({e}): block") },
        };
        if c.variant != Layout::Block {
            layouts.window.push((ty, c.variant));
        }
        notes.push(c.reason);
    }
    Choice { variant: layouts, reason: notes.join("; ") }
}

fn choose_hc(gpu: &Gpu) -> Choice<HcVariant> {
    let (n, hc, r) = (2560, 4, 320);
    let w = random_hc(n, hc, r, true, 0x5e1f);
    // The F32 kernels (a file's F32 or Q8_0 HC weights) are checked too: a variant is kept only when both
    // weight types give the plain kernel's bits.
    let w32 = random_hc_as(strata_gguf::GgmlType::F32, n, hc, r, true, 0x5e20);
    // The variants differ in how they schedule the same operations, not in eps: the model's 1e-6 serves.
    let ups = (
        HcGpu::upload(gpu, &w, hc, 1e-6, HcVariant::PLAIN),
        HcGpu::upload(gpu, &w32, hc, 1e-6, HcVariant::PLAIN),
        HcScratch::new(gpu, n, hc, r),
    );
    let (Ok(wg), Ok(wg32), Ok(s)) = ups else {
        return Choice { variant: HcVariant::PLAIN, reason: "self-check could not run: plain".into() };
    };
    let Ok(mut flush) = Buf::<u8>::zeros(gpu, FLUSH_BYTES) else {
        return Choice { variant: HcVariant::PLAIN, reason: "no memory for the check".into() };
    };
    let mut best = (HcVariant::PLAIN, f64::INFINITY);
    let mut notes = Vec::new();
    for v in HcVariant::ALL {
        if v != HcVariant::PLAIN && !(agrees(gpu, v, &wg, &s, n, hc) && agrees(gpu, v, &wg32, &s, n, hc)) {
            notes.push(format!("{} differs from plain: never used", v.name()));
            continue;
        }
        // Device time of T = 1 and T = 4 reads, pending write folded in, each call timed alone with the L2
        // emptied first: a decode step meets its HC weights cold (timed warm, early weight loads lost).
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
            let call =
                || hc_read_with(gpu, v, &wg, rb.ptr(gpu), out.ptr(gpu), Some(Pending::of(&yb, &ib)), t, &s, None);
            secs += time_cold(gpu, 10, &mut flush, &call).unwrap_or(f64::INFINITY);
        }
        notes.push(format!("{} {:.1} µs", v.name(), secs));
        if secs < best.1 {
            best = (v, secs);
        }
    }
    Choice { variant: best.0, reason: format!("self-checked and timed (T = 1 plus T = 4): {}", notes.join(", ")) }
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

fn bits(o: &crate::select::check::ReadOut) -> Vec<u32> {
    o.0.iter().chain(&o.1).chain(&o.2).map(|v| v.to_bits()).collect()
}

/// The fastest of `variants` whose check passes: `check` gives `Some(µs)` for a variant that agrees with the
/// reference, `None` for one that differs (never used). Returns the choice and a line saying why.
pub(crate) fn fastest<V: Copy>(
    what: &str,
    variants: &[V],
    name: fn(V) -> &'static str,
    check: impl Fn(V) -> Result<Option<f64>, CudaError>,
) -> Choice<V> {
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
    let variant = best.map(|(v, _)| v).unwrap_or(variants[0]);
    Choice { variant, reason: format!("self-checked and timed ({what}): {}", notes.join(", ")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_plan_is_read_back_and_a_damaged_one_is_not() {
        let text = "matvec dense=Q6_K:warp,gather=-,window=Q6_K:staged\tself-checked\nhc split+tg2\tself-checked\n\
                    scores stream\tself-checked\ntopk cluster\tself-checked\n";
        let p = parse(text).expect("a kept plan");
        assert_eq!(p.hc.variant.name(), "split+tg2");
        assert_eq!(p.matvec.variant.dense, vec![(strata_gguf::GgmlType::Q6_K, Layout::Warp)]);
        assert_eq!(p.matvec.variant.window, vec![(strata_gguf::GgmlType::Q6_K, Layout::Staged)]);
        assert_eq!(p.scores.variant, ScoresVariant::Stream);
        assert_eq!(p.topk.variant, TopkVariant::Cluster);
        assert!(p.topk.reason.starts_with("kept from an earlier start"));
        for bad in [
            "",
            "hc split+tg2\tx\nscores stream\tx\ntopk cluster\tx\n",
            "matvec dense=Q6_K:warp\tx\nattend tiles\tx\nhc split+tg2\tx\nscores stream\tx\ntopk cluster\tx\n",
            "matvec dense=-,gather=-\tx\nhc split+tg2\tx\nscores stream\tx\ntopk cluster\tx\n",
            "matvec dense=-,gather=-,window=-\tx\nattend fast\tx\nhc split+tg2\tx\nscores stream\tx\ntopk cluster\tx\n",
            // A plan kept while the attention values had variants is made anew.
            "matvec dense=-,gather=-,window=-\tx\nattend tiles\tx\nhc split+tg2\tx\nscores stream\tx\ntopk cluster\tx\n",
            // A plan kept before the window layouts existed is made anew.
            "matvec dense=-,gather=-\tx\nattend tiles\tx\nhc split+tg2\tx\nscores stream\tx\ntopk cluster\tx\n",
            "hc split\tx\nscores stream\tx\n",
            "hc warp9\tx\nscores stream\tx\ntopk cluster\tx\n",
            "scores stream\tx\nhc split\tx\ntopk cluster\tx\n",
            "hc split x\nscores stream\tx\ntopk cluster\tx\n",
        ] {
            assert!(parse(bad).is_none(), "{bad:?}");
        }
    }
}
