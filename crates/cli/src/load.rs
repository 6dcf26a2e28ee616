//! The engine flags that `strata run`, `strata serve` and `strata perplexity` share, and the session
//! (strata_engine::session) they open.

use std::path::PathBuf;

use anyhow::Result;
use strata_engine::generate::Drafts;
use strata_engine::session::{Device, Session, SessionOptions};
use strata_model::KvMode;

/// The model, where it runs, and its context.
#[derive(clap::Args, Clone)]
pub struct EngineArgs {
    /// Model file (or any shard of a set). Without it, the built-in model (a small one trained on English
    /// text: models/README.md).
    #[arg(short, long)]
    pub model: Option<PathBuf>,
    /// Where the forward pass runs: cuda (GPU 0), cpu (the reference engine), or auto (the GPU when
    /// one opens, else the CPU). Both give the same bits.
    #[arg(long, default_value = "auto")]
    pub device: Device,
    /// KV cache storage: fp16, int8, or f32 (unrounded: for checks against float references).
    #[arg(long, default_value = "fp16")]
    pub kv: KvMode,
    /// Context cells (default: the model's trained context).
    #[arg(long)]
    pub max_context: Option<usize>,
    /// Position scaling: none, linear or yarn. Default: yarn when --max-context exceeds the trained
    /// context, else none.
    #[arg(long)]
    pub rope_scaling: Option<String>,
    /// Scaling factor for linear or yarn (default: max-context / trained context).
    #[arg(long)]
    pub rope_scale: Option<f64>,
    /// The MTP draft layer from a separate MTP-only GGUF (the converter's `--mtp` output), in place of
    /// the model file's own; loaded and checked against the model (speculative decoding uses it).
    #[arg(long)]
    pub mtp: Option<PathBuf>,
    /// CPU threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Speculative decoding: drafts of the model's MTP layer per verify window, 1..7, or 0 to decode a
    /// token at a time; auto (the default) drafts as many as the measured acceptance pays for where a
    /// window costs less than its tokens' steps (the GPU; not the CPU, which decodes plainly). The
    /// tokens are those of plain decoding either way (docs/SPECULATION.md); `run --dump-logits`
    /// decodes plainly.
    #[arg(long, default_value = "auto")]
    pub spec: Drafts,
    /// Drafts choose among K tokens: those the run has seen most often in its prompts and replies, then
    /// the lowest ids (a cheaper draft head of K rows, gathered again as the counts move; the verify
    /// pass's full head decides, so the text does not change). Default: the whole vocabulary.
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub draft_vocab: usize,
    /// A VRAM budget in GiB. Where the model exceeds it, the routed experts stay in host memory (read from
    /// the file's mapping), the card holds as many of them as the rest of the budget takes, and the host
    /// computes the others; the same bits (docs/PLACEMENT.md). The plan is printed at start. A budget that
    /// holds not even the dense weights, caches and scratch is refused. Default: the card's free memory
    /// less 0.5 GiB.
    #[arg(long, value_name = "GiB", value_parser = gib)]
    pub gpu_mem: Option<u64>,
    /// Where routed experts stay in host memory, leave them in the file's mapping (the page cache may
    /// drop them and read them again) instead of locking their pages in RAM: for hosts short of memory.
    /// Without it they are locked where RAM holds them beside 4 GiB for everything else.
    #[arg(long)]
    pub mmap_experts: bool,
}

/// A positive number of GiB, in bytes.
fn gib(s: &str) -> Result<u64, String> {
    match s.parse::<f64>() {
        Ok(g) if g.is_finite() && g > 0.0 && g < 1e6 => Ok((g * (1u64 << 30) as f64) as u64),
        _ => Err(format!("{s:?}: a size in GiB, more than 0 (e.g. 12 or 7.5)")),
    }
}

impl EngineArgs {
    /// The session these flags open (the built-in model without `--model`), on `device`.
    pub fn open_on(&self, device: Device) -> Result<Session> {
        let model = match &self.model {
            Some(p) => p.clone(),
            None => crate::default_model::path()?,
        };
        Session::open(SessionOptions {
            model,
            mtp: self.mtp.clone(),
            device,
            kv: self.kv,
            context: self.max_context,
            rope_scaling: self.rope_scaling.clone(),
            rope_scale: self.rope_scale,
            threads: self.threads,
            draft_vocab: self.draft_vocab,
            gpu_mem: self.gpu_mem,
            mmap_experts: self.mmap_experts,
            settings: crate::env::settings().clone(),
        })
    }

    /// The session these flags open.
    pub fn open(&self) -> Result<Session> {
        self.open_on(self.device)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn gpu_mem_is_a_positive_size_in_gib() {
        assert_eq!(super::gib("12"), Ok(12 << 30));
        assert_eq!(super::gib("0.5"), Ok(1 << 29));
        for bad in ["0", "-1", "x", "nan", "inf", ""] {
            let e = super::gib(bad).unwrap_err();
            assert!(e.contains("a size in GiB"), "{bad}: {e}");
        }
    }
}
