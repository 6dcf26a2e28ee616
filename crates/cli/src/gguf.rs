//! `strata gguf info|dequant|quantize`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressStyle};
use strata_gguf::{quant, GgmlType, GgufFile, GgufSet, TensorInfo};

#[derive(Subcommand)]
pub enum GgufCommand {
    /// Print metadata (long arrays summarised) and a table of tensors. A shard opens its whole set.
    Info { file: PathBuf },
    /// Write one tensor as little-endian f32, ne0 fastest.
    Dequant {
        file: PathBuf,
        tensor: String,
        #[arg(short, long)]
        out: PathBuf,
    },
    /// Write a copy with the routed experts (`*_exps`) and the other large matrices stored as other types.
    /// The router (`ffn_gate_inp`) and tensors of under 4,096 values keep their type; a matrix whose rows
    /// are not whole blocks of the new type is stored as F16 instead. One file, not a shard set.
    Quantize {
        file: PathBuf,
        out: PathBuf,
        /// The routed experts' type: Q2_0, IQ2_XS, IQ3_XXS, IQ3_S, IQ4_NL, Q4_K, Q6_K, Q8_0, F16 …
        #[arg(long, default_value = "IQ4_NL")]
        experts: String,
        /// The other large matrices' type.
        #[arg(long, default_value = "Q8_0")]
        matrices: String,
    },
}

pub fn run(cmd: GgufCommand) -> Result<()> {
    match cmd {
        GgufCommand::Info { file } => info(&GgufSet::open(&file)?),
        GgufCommand::Dequant { file, tensor, out } => dequant(&GgufSet::open(&file)?, &tensor, &out),
        GgufCommand::Quantize { file, out, experts, matrices } => {
            quantize(&file, &out, quant_type("--experts", &experts)?, quant_type("--matrices", &matrices)?)
        }
    }
}

fn quant_type(flag: &str, name: &str) -> Result<GgmlType> {
    match GgmlType::from_name(&name.to_uppercase()) {
        Some(t) if quant::can_quantize(t) => Ok(t),
        Some(t) => bail!("{flag} {name}: strata reads {t} but does not write it"),
        None => bail!("{flag} {name}: not a ggml type name (Q2_0, IQ3_S, IQ4_NL, Q8_0, F16, …)"),
    }
}

/// The type each tensor gets (see `GgufCommand::Quantize`).
fn planned(t: &TensorInfo, experts: GgmlType, matrices: GgmlType) -> GgmlType {
    let big = t.shape.len() >= 2 && t.n_elements >= 1 << 12 && !t.name.contains("ffn_gate_inp");
    let want = if t.name.contains("_exps.") {
        experts
    } else if big {
        matrices
    } else {
        return t.ty;
    };
    if t.shape[0].is_multiple_of(want.block_size() as u64) {
        want
    } else {
        GgmlType::F16
    }
}

fn quantize(file: &Path, out: &Path, experts: GgmlType, matrices: GgmlType) -> Result<()> {
    if file == out {
        bail!("{}: the copy needs a file of its own", out.display());
    }
    let bar = ProgressBar::new(0);
    bar.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} tensors").expect("valid template"));
    let tmp = out.with_extension("gguf.partial");
    strata_gguf::retyped_copy(file, &tmp, |t| planned(t, experts, matrices), &mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })?;
    bar.finish_and_clear();
    std::fs::rename(&tmp, out).with_context(|| format!("moving the copy to {}", out.display()))?;
    let (before, after) = (std::fs::metadata(file)?.len(), std::fs::metadata(out)?.len());
    println!("wrote {}: {after} bytes ({before} before)", out.display());
    Ok(())
}

fn info(set: &GgufSet) -> Result<()> {
    let mut o = std::io::stdout().lock();
    for f in set.files() {
        print_file(&mut o, f)?;
    }
    // The one fact about the head a reader would otherwise infer from a missing name.
    if set.tensor("token_embd.weight").is_some() {
        match set.tensor("output.weight") {
            Some(_) => writeln!(o, "head: output.weight (untied)")?,
            None => writeln!(o, "head: tied (no output.weight: token_embd.weight is the head)")?,
        }
    }
    Ok(())
}

fn print_file(o: &mut impl Write, f: &GgufFile) -> Result<()> {
    let h = f.header();
    writeln!(
        o,
        "{}: GGUF v{}, {} bytes, {} metadata keys, {} tensors, alignment {}, data at {}",
        f.path().display(),
        h.version,
        f.file_len(),
        h.metadata.len(),
        h.tensors.len(),
        h.alignment,
        h.data_offset
    )?;
    for (k, v) in f.metadata() {
        writeln!(o, "  {k} = {v}")?;
    }
    let width = h.tensors.iter().map(|t| t.name.len()).max().unwrap_or(4).max(4);
    writeln!(o, "  {:<width$}  {:<7}  {:<24}  {:>14}  {:>14}", "name", "type", "shape", "bytes", "offset")?;
    for t in &h.tensors {
        let shape = format!("{:?}", t.shape);
        writeln!(
            o,
            "  {:<width$}  {:<7}  {:<24}  {:>14}  {:>14}",
            t.name,
            t.ty.name(),
            shape,
            t.n_bytes,
            h.data_offset + t.offset
        )?;
    }
    let total: u64 = h.tensors.iter().map(|t| t.n_bytes).sum();
    writeln!(o, "  {} tensors, {} bytes of tensor data", h.tensors.len(), total)?;
    Ok(())
}

/// Dequantizes in pieces so a tensor larger than memory streams to disk.
fn dequant(set: &GgufSet, name: &str, out: &PathBuf) -> Result<()> {
    let t = set.require(name)?;
    let (bs, ts) = (t.info.ty.block_size(), t.info.ty.type_size());
    let blocks_per_piece = (1 << 22) / bs; // 4M elements, 16 MB of f32
    let mut w = BufWriter::new(File::create(out).with_context(|| format!("{}", out.display()))?);
    let bar = ProgressBar::new(t.info.n_elements * 4);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
            .expect("valid template"),
    );
    let mut values = vec![0f32; blocks_per_piece * bs];
    let mut bytes = Vec::with_capacity(values.len() * 4);
    for piece in t.data.chunks(blocks_per_piece * ts) {
        let y = &mut values[..piece.len() / ts * bs];
        quant::dequantize(t.info.ty, piece, y).map_err(|e| anyhow::anyhow!("tensor {name:?}: {e}"))?;
        bytes.clear();
        bytes.extend(y.iter().flat_map(|v| v.to_le_bytes()));
        w.write_all(&bytes).with_context(|| format!("{}", out.display()))?;
        bar.inc(bytes.len() as u64);
    }
    w.flush().with_context(|| format!("{}", out.display()))?;
    bar.finish_and_clear();
    Ok(())
}
