//! Per-shape matvec layouts for one token's dense products, chosen when a model is loaded, on the model's
//! own weights. The plan (plan.rs) picks a layout per weight type on stand-in shapes, once per card; a
//! type can serve shapes that want different layouts (on the H200, Q8_0's 2560 × 6144 output projection
//! ran `warp` 1.6 µs faster than `staged`, and its 640 × 2560 shared expert the other way round). Here
//! each shape the decode step multiplies by is timed in every layout as a step meets it: back to back,
//! each call on the next layer's matrix of that shape. A layout is used only if it gives the block layout's
//! bits on the shape's first matrix, so the bits never depend on the choice. A forced layout
//! (`STRATA_MATVEC`) is not tuned over. The choice takes a fraction of a second and is made at each load.
//! Opt-in (`STRATA_TUNE=1`) until it has run on a card.

use std::sync::RwLock;

use strata_gguf::GgmlType;

use crate::buf::Buf;
use crate::check::time_calls;
use crate::device::Gpu;
use crate::error::CudaError;
use crate::matvec::{matvec_with, Layout, MatrixGpu};

/// A product's weight type, rows and columns.
pub type Shape = (GgmlType, usize, usize);

/// The tuned layouts of this process (the shapes of every model loaded so far).
static TUNED: RwLock<Vec<(Shape, Layout)>> = RwLock::new(Vec::new());

/// The tuned layout for `w`'s shape, if there is one.
pub fn tuned(w: &MatrixGpu) -> Option<Layout> {
    let shape = (w.ty, w.rows, w.cols);
    TUNED.read().ok()?.iter().find(|(s, _)| *s == shape).map(|&(_, l)| l)
}

/// One shape's choice and why.
pub struct ShapeChoice {
    pub shape: Shape,
    pub layout: Layout,
    pub reason: String,
}

/// Chooses and keeps a layout for each shape among `mats` (the matrices a decode step multiplies one token
/// by, every layer's): the fastest of those that give the block layout's bits.
pub fn tune(gpu: &Gpu, mats: &[&MatrixGpu]) -> Result<Vec<ShapeChoice>, CudaError> {
    let on = std::env::var("STRATA_TUNE").is_ok_and(|v| v == "1");
    if !on || std::env::var_os("STRATA_MATVEC").is_some() {
        return Ok(Vec::new());
    }
    let mut groups: Vec<(Shape, Vec<&MatrixGpu>)> = Vec::new();
    for m in mats {
        let shape = (m.ty, m.rows, m.cols);
        match groups.iter_mut().find(|(s, _)| *s == shape) {
            Some((_, g)) => g.push(m),
            None => groups.push((shape, vec![m])),
        }
    }
    let mut out = Vec::new();
    for (shape, group) in groups {
        let (layout, reason) = choose(gpu, &group)?;
        out.push(ShapeChoice { shape, layout, reason });
    }
    let mut kept = TUNED.write().unwrap_or_else(|p| p.into_inner());
    for c in &out {
        kept.retain(|(s, _)| *s != c.shape);
        kept.push((c.shape, c.layout));
    }
    Ok(out)
}

/// The layout for one shape's matrices (at least one), and a line with each layout's time.
fn choose(gpu: &Gpu, group: &[&MatrixGpu]) -> Result<(Layout, String), CudaError> {
    let first = group[0];
    let mut rng = strata_gguf::SplitMix64::new(first.rows as u64 ^ (first.cols as u64) << 20);
    let x = Buf::from_host(gpu, &(0..first.cols).map(|_| rng.uniform() - 0.5).collect::<Vec<f32>>())?;
    let y = Buf::<f32>::zeros(gpu, first.rows)?;
    let bits = |layout: Layout| -> Result<Vec<u32>, CudaError> {
        matvec_with(gpu, layout, first, &x, &y, 1)?;
        Ok(y.read(gpu, first.rows)?.iter().map(|v| v.to_bits()).collect())
    };
    let reference = bits(Layout::Block)?;
    let mut best: Option<(Layout, f64)> = None;
    let mut notes = Vec::new();
    for layout in Layout::ALL {
        match bits(layout) {
            Ok(b) if b == reference => {}
            Ok(_) => {
                notes.push(format!("{} differs: never used", layout.name()));
                continue;
            }
            Err(e) => {
                notes.push(format!("{} failed: {e}", layout.name()));
                continue;
            }
        }
        let next = std::cell::Cell::new(0usize);
        let reps = (2 * group.len()).clamp(20, 100);
        let timed = time_calls(gpu, reps, &|| {
            next.set(next.get() + 1);
            matvec_with(gpu, layout, group[next.get() % group.len()], &x, &y, 1)
        });
        let Ok(us) = timed else {
            notes.push(format!("{} failed to time", layout.name()));
            continue;
        };
        notes.push(format!("{} {us:.1} µs", layout.name()));
        if best.is_none_or(|(_, b)| us < b) {
            best = Some((layout, us));
        }
    }
    let layout = best.map_or(Layout::Block, |(l, _)| l);
    Ok((layout, notes.join(", ")))
}
