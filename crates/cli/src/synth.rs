//! `strata synth`: write a synthetic qwen4exp model; and the built-in default model `strata run` uses.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use strata_gguf::GgmlType;
use strata_synth::{Options, Preset, Router};

#[derive(clap::Args)]
pub struct SynthArgs {
    /// tiny (tests, ~20 MB), small (a few hundred MB, the full model's ratios) or full (the real geometry).
    #[arg(long, default_value = "tiny")]
    preset: String,
    /// Type of the routed experts: Q2_0, IQ2_XS, IQ3_XXS or IQ3_S.
    #[arg(long, default_value = "Q2_0")]
    experts_type: String,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The router: `uniform` (random rows, every expert about equally popular) or `zipf` / `zipf:S`
    /// (popularity ∝ 1/rank^S, S = 1 by default, as a trained router's is skewed; its own order of experts
    /// in each layer).
    #[arg(long, default_value = "uniform")]
    router: String,
    /// Rows of each of the 16 PLE heads (default: the preset's; full: 20,000,096 = a 28.8 GB table). A smaller
    /// table keeps a full model on a smaller disk; the model reads whatever the file declares.
    #[arg(long)]
    ple_rows_per_head: Option<u64>,
    /// Trunk layers, fewer than the preset's (a multiple of 4: three GDN layers, then an attention layer),
    /// for a model of the preset's width that is quick to check (`--preset full --layers 4`).
    #[arg(long)]
    layers: Option<usize>,
    /// Cells the indexer keeps (default: the preset's; full: 2,048), for a full-width model whose selection
    /// turns sparse after a short prompt.
    #[arg(long)]
    indexer_top_k: Option<usize>,
    /// The rms norms' epsilon written into the file (default: the preset's, the released model's 1e-6).
    #[arg(long)]
    rms_eps: Option<f32>,
    /// Output file (the full preset writes PREFIX-00001-of-00002.gguf and its PLE shard beside it).
    #[arg(short, long)]
    out: PathBuf,
}

pub fn run(a: SynthArgs) -> Result<()> {
    let mut preset =
        Preset::by_name(&a.preset).with_context(|| format!("unknown preset {:?} (tiny, small or full)", a.preset))?;
    if let Some(rows) = a.ple_rows_per_head {
        if rows == 0 {
            bail!("--ple-rows-per-head must be at least 1");
        }
        preset.ple_rows_per_head = rows;
    }
    if let Some(n) = a.layers {
        if n == 0 || !n.is_multiple_of(4) || n > preset.n_layer {
            bail!("--layers {n}: a multiple of 4 up to the preset's {}", preset.n_layer);
        }
        preset.n_layer = n;
    }
    if let Some(k) = a.indexer_top_k {
        if k == 0 {
            bail!("--indexer-top-k must be at least 1");
        }
        preset.idx_top_k = k;
    }
    if let Some(eps) = a.rms_eps {
        if !(eps > 0.0 && eps < 1.0) {
            bail!("--rms-eps {eps}: a number in (0, 1)");
        }
        preset.rms_eps = eps;
    }
    let experts = match GgmlType::from_name(&a.experts_type) {
        Some(t @ (GgmlType::Q2_0 | GgmlType::IQ2_XS | GgmlType::IQ3_XXS | GgmlType::IQ3_S)) => t,
        _ => bail!("--experts-type {:?}: use Q2_0, IQ2_XS, IQ3_XXS or IQ3_S", a.experts_type),
    };
    // The output's folder is made if missing, as a user naming a new path expects.
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("making the folder {}", dir.display()))?;
    }
    let Some(router) = Router::parse(&a.router) else {
        bail!("--router {:?}: use uniform, zipf or zipf:S with S in (0, 4]", a.router)
    };
    let files = write(&a.out, Options { preset, experts, seed: a.seed, router })?;
    for f in files {
        eprintln!("wrote {}", f.display());
    }
    Ok(())
}

fn write(out: &Path, o: Options) -> Result<Vec<PathBuf>> {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{msg} {bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
            .expect("valid template"),
    );
    bar.set_message(format!("synth {}", o.preset.name));
    let files = strata_synth::write(out, &o, &|done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })
    .with_context(|| format!("writing {}", out.display()))?;
    bar.finish_and_clear();
    Ok(files)
}
