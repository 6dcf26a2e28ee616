//! `strata synth`: writes a complete synthetic qwen4exp GGUF (spec §1–§10) of a preset: every trunk
//! tensor, the PLE table (its own shard for `full`), the MTP layer, deterministic random weights (see
//! `tensors` for the scaling), a byte-level BPE tokenizer trained on the text this crate ships, and a
//! ChatML chat template. Tensors stream to disk piece by piece: nothing is held whole.

pub mod coded;
pub mod preset;
pub mod router;
pub mod tensors;

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use strata_engine::tokenizer::{self, Vocab};
use strata_gguf::{quant, Array, GgmlType, GgufBuilder, SplitMix64, Value};

pub use preset::Preset;
pub use router::Router;
use tensors::{Init, TensorSpec};

/// The text the tokenizer is trained on: the model's spec and the project's own code, frozen here so the
/// default model never changes when the docs do.
const CORPUS: [&str; 3] = [
    include_str!("../corpus/qwen4exp.md"),
    include_str!("../corpus/kernels.md"),
    include_str!("../corpus/code.rs.txt"),
];

/// The chat template of the synthetic models and of the built-in trained one (python/train/): ChatML
/// turns, with tools in the system turn and tool calls and tool results in the form the Qwen family's
/// templates write (`<tool_call>` and `<tool_response>`).
pub const CHAT_TEMPLATE: &str = include_str!("chat_template.jinja");

#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error(transparent)]
    Gguf(#[from] strata_gguf::Error),
    #[error(transparent)]
    Tokenizer(#[from] tokenizer::TokenizerError),
    #[error("{0}")]
    Other(String),
}

pub struct Options {
    pub preset: Preset,
    pub experts: GgmlType,
    pub seed: u64,
    pub router: Router,
}

/// Where each part of the model goes.
pub fn output_paths(out: &Path, p: &Preset) -> Vec<PathBuf> {
    if !p.ple_shard {
        return vec![out.to_path_buf()];
    }
    let stem = out.file_name().and_then(|n| n.to_str()).unwrap_or("model.gguf");
    let prefix = stem.strip_suffix(".gguf").unwrap_or(stem);
    (1..=2).map(|i| out.with_file_name(strata_gguf::shard_name(prefix, i, 2))).collect()
}

/// Writes the model; `progress(done, total)` is called with bytes of tensor data as they are written.
/// Returns the files written.
pub fn write(out: &Path, o: &Options, progress: &(dyn Fn(u64, u64) + Sync)) -> Result<Vec<PathBuf>, SynthError> {
    let p = &o.preset;
    if !quant::can_quantize(o.experts) {
        return Err(SynthError::Other(format!("cannot write experts as {}", o.experts)));
    }
    let vocab = tokenizer::train(&CORPUS, p.vocab)?;
    let mut trunk = tensors::trunk(p, vocab.tokens.len(), o.experts);
    skew_routers(&mut trunk, p, o);
    let table = tensors::ple_table(p);
    let paths = output_paths(out, p);
    let mut files: Vec<Vec<TensorSpec>> =
        if p.ple_shard { vec![trunk, vec![table]] } else { vec![[trunk, vec![table]].concat()] };
    let total: u64 = files.iter().flatten().map(bytes_of).sum();
    let mut done = 0u64;
    let count = files.len();
    for (i, (specs, path)) in files.iter_mut().zip(&paths).enumerate() {
        let mut b = GgufBuilder::new();
        if i == 0 {
            metadata(&mut b, p, &vocab, o.seed);
        } else {
            b.add("general.architecture", Value::String(strata_model::config::ARCH.into()));
        }
        if count > 1 {
            b.add("split.no", Value::U16(i as u16)).add("split.count", Value::U16(count as u16));
        }
        for t in specs.iter() {
            b.add_tensor(&t.name, &t.shape, t.ty)?;
        }
        // Written under a temporary name and renamed when complete: an interrupted run leaves no file
        // that looks finished.
        let tmp = path.with_extension("gguf.partial");
        let mut w = b.create(&tmp)?;
        for t in specs.iter() {
            write_tensor(&mut w, t, o.seed, &mut |n| {
                done += n;
                progress(done, total);
            })?;
        }
        w.finish()?;
        std::fs::rename(&tmp, path).map_err(|e| SynthError::Other(format!("{}: {e}", path.display())))?;
    }
    Ok(paths)
}

/// Under [`Router::Zipf`], every router's rows (the trunk's and the MTP layer's) get their layer's gains.
fn skew_routers(specs: &mut [TensorSpec], p: &Preset, o: &Options) {
    let Router::Zipf(s) = o.router else { return };
    let gains = router::rank_gains(p.n_expert, p.n_expert_used, s);
    for t in specs.iter_mut().filter(|t| t.name.ends_with(".ffn_gate_inp.weight")) {
        t.row_gains = Some(router::layer_gains(&gains, o.seed ^ strata_gguf::fnv1a(t.name.bytes())));
    }
}

fn bytes_of(t: &TensorSpec) -> u64 {
    t.ty.bytes_for(t.shape.iter().product()).unwrap_or(0)
}

fn metadata(b: &mut GgufBuilder, p: &Preset, vocab: &Vocab, seed: u64) {
    let a = strata_model::config::ARCH;
    let u = |v: usize| Value::U32(v as u32);
    b.add("general.architecture", Value::String(a.into()));
    b.add("general.name", Value::String(format!("qwen4exp-synthetic-{}", p.name)));
    b.add("general.alignment", Value::U32(32));
    let keys: Vec<(&str, Value)> = vec![
        ("block_count", u(p.n_layer + 1)),
        ("embedding_length", u(p.n_embd)),
        ("vocab_size", u(vocab.tokens.len())),
        ("full_attention_interval", u(4)),
        ("hyper_connection.count", u(p.hc)),
        ("hyper_connection.low_rank", u(p.hc_rank)),
        ("attention.head_count", u(p.n_head)),
        ("attention.head_count_kv", u(p.n_head_kv)),
        ("attention.key_length", u(p.head_dim)),
        ("attention.value_length", u(p.head_dim)),
        ("attention.layer_norm_rms_epsilon", Value::F32(p.rms_eps)),
        ("rope.dimension_count", u(p.rope_dim)),
        ("rope.freq_base", Value::F32(1e7)),
        ("context_length", u(p.context_length)),
        ("attention.indexer.head_count", u(p.idx_heads)),
        ("attention.indexer.key_length", u(p.idx_dim)),
        ("attention.indexer.top_k", u(p.idx_top_k)),
        ("ssm.state_size", u(p.ssm_state)),
        ("ssm.group_count", u(p.ssm_groups)),
        ("ssm.time_step_rank", u(p.ssm_heads)),
        ("ssm.conv_kernel", u(4)),
        ("expert_count", u(p.n_expert)),
        ("expert_used_count", u(p.n_expert_used)),
        ("expert_feed_forward_length", u(p.expert_ff)),
        ("expert_shared_feed_forward_length", u(p.expert_ff)),
        ("ssm.inner_size", u(p.ssm_heads * p.ssm_state)),
        ("ple.conv_kernel", u(4)),
        ("embedding_length_per_layer_input", u(p.ple_dim)),
        ("nextn_predict_layers", u(1)),
        ("ple.ngram_size", u(3)),
        ("ple.heads_per_ngram", u(8)),
    ];
    for (k, v) in keys {
        b.add(&format!("{a}.{k}"), v);
    }
    // The layer list as the converter writes it: recurrent flags for the trunk, then the MTP block.
    let trunk = 0..p.n_layer;
    let mut recurrent: Vec<bool> = trunk.clone().map(|i| !tensors::is_attn(i)).collect();
    recurrent.push(false);
    b.add(&format!("{a}.attention.recurrent_layers"), Value::Array(Array::Bool(recurrent)));
    let ratios = trunk.map(|i| if tensors::is_attn(i) { tensors::QSA_RATIO as i32 } else { 0 }).collect();
    b.add(&format!("{a}.attention.compress_ratios"), Value::Array(Array::I32(ratios)));
    b.add(&format!("{a}.rope.dimension_sections"), Value::Array(Array::I32(rope_sections(p.rope_dim))));
    b.add(&format!("{a}.ple.layers"), Value::Array(Array::I32(vec![tensors::PLE_LAYER as i32])));
    // Odd multipliers drawn from the seed; heads laid out one after another in the table.
    // Odd, and small enough that token × multiplier stays below 2^63, as the real model's are.
    let mut rng = SplitMix64::new(seed ^ 0x0050_4c45);
    let half_bound = (i64::MAX as u64 / vocab.tokens.len() as u64 / 2).max(1);
    let mult: Vec<u64> = (0..3).map(|_| 2 * (rng.next_u64() % half_bound) + 1).collect();
    b.add(&format!("{a}.ple.layer_multipliers"), Value::Array(Array::U64(mult)));
    b.add(&format!("{a}.ple.head_vocab_sizes"), Value::Array(Array::U64(vec![p.ple_rows_per_head; 16])));
    b.add(
        &format!("{a}.ple.head_offsets"),
        Value::Array(Array::U64((0..16).map(|h| h * p.ple_rows_per_head).collect())),
    );
    let id = |s: &str| vocab.tokens.iter().position(|t| t == s).unwrap_or(0) as u64;
    b.add(&format!("{a}.ple.eos_token_id"), Value::U32(id(tokenizer::ENDOFTEXT) as u32));
    b.add("tokenizer.ggml.model", Value::String("gpt2".into()));
    b.add("tokenizer.ggml.pre", Value::String("qwen2".into()));
    b.add("tokenizer.ggml.tokens", Value::Array(Array::String(vocab.tokens.clone())));
    b.add("tokenizer.ggml.token_type", Value::Array(Array::I32(vocab.types.clone())));
    b.add("tokenizer.ggml.merges", Value::Array(Array::String(vocab.merges.clone())));
    b.add("tokenizer.ggml.eos_token_id", Value::U32(id(tokenizer::ENDOFTEXT) as u32));
    b.add("tokenizer.ggml.padding_token_id", Value::U32(id(tokenizer::ENDOFTEXT) as u32));
    b.add("tokenizer.chat_template", Value::String(CHAT_TEMPLATE.into()));
}

/// Elements per piece: a piece is generated from its own seed, so pieces can be made on any number of
/// threads and the file is the same.
const PIECE: u64 = 1 << 16;

fn write_tensor<W: std::io::Write>(
    w: &mut strata_gguf::GgufWriter<W>,
    t: &TensorSpec,
    seed: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<(), SynthError> {
    let n: u64 = t.shape.iter().product();
    let row = t.shape[0];
    // Very large tensors of a suitable type get random codes directly: quantizing 10¹¹ values would take hours.
    let coded = match t.init {
        Init::Normal(std) if bytes_of(t) >= coded::CODED_MIN_BYTES && coded::supports(t.ty) => {
            Some(coded::scale_for(t.ty, std))
        }
        _ => None,
    };
    // Whole rows per piece, and whole blocks.
    let per_piece = (PIECE / row).max(1) * row;
    let pieces = n.div_ceil(per_piece);
    let base = seed ^ strata_gguf::fnv1a(t.name.bytes());
    let make = |i: u64| {
        let len = per_piece.min(n - i * per_piece) as usize;
        let mut rng = SplitMix64::new(base.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        if let Some(d) = coded {
            return coded::coded_blocks(t.ty, len / t.ty.block_size(), d, &mut rng);
        }
        let mut x: Vec<f32> = (0..len).map(|_| draw(t.init, &mut rng)).collect();
        if let Some(gains) = &t.row_gains {
            let first = (i * per_piece / row) as usize;
            for (r, xs) in x.chunks_exact_mut(row as usize).enumerate() {
                xs.iter_mut().for_each(|v| *v *= gains[first + r]);
            }
        }
        let mut q = Vec::new();
        quant::quantize(t.ty, &x, &mut q).expect("types and shapes were fitted");
        q
    };
    // Batches of pieces (about BATCH_BYTES, at least 4 a thread) are made in parallel on one thread
    // while this one writes the batch before, in order: the file is the same, and the disk and the cores
    // work at once.
    let piece_bytes = (bytes_of(t) / pieces.max(1)).max(1);
    let batch = (rayon::current_num_threads() as u64 * 4).max(BATCH_BYTES / piece_bytes) as usize;
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Vec<u8>>>(1);
        s.spawn(move || {
            for first in (0..pieces).step_by(batch) {
                let made = (first..(first + batch as u64).min(pieces)).into_par_iter().map(make).collect();
                if tx.send(made).is_err() {
                    return; // the writer stopped on an error
                }
            }
        });
        for made in rx {
            for q in made {
                w.write(&q)?;
                progress(q.len() as u64);
            }
        }
        Ok(())
    })
}

/// Bytes of pieces made in one parallel batch (two batches are held at once: one made, one written).
const BATCH_BYTES: u64 = 64 << 20;

/// One value: a normal by the sum of four uniforms (exact arithmetic, the same on every machine).
fn draw(init: Init, rng: &mut SplitMix64) -> f32 {
    let normal = |rng: &mut SplitMix64| ((0..4).map(|_| rng.uniform()).sum::<f32>() - 2.0) * 3f32.sqrt();
    match init {
        Init::Normal(std) => normal(rng) * std,
        Init::AroundOne(std) => 1.0 + normal(rng) * std,
        Init::Uniform(lo, hi) => lo + (hi - lo) * rng.uniform(),
    }
}

/// M-RoPE's sections over the `rope_dim / 2` rotated pairs, split as the released model splits its 32
/// ([11, 11, 10, 0]): a third, rounded down, last; the rest in two halves.
fn rope_sections(rope_dim: usize) -> Vec<i32> {
    let pairs = rope_dim / 2;
    let third = pairs / 3;
    let first = (pairs - third).div_ceil(2);
    vec![first as i32, (pairs - third - first) as i32, third as i32, 0]
}
