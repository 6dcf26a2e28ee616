//! The presets: `tiny` (tests), `small` (a few hundred MB with the full model's ratios) and `full`
//! (Qwen3.8-Flash-Next's geometry, spec §1).

use strata_gguf::GgmlType;

#[derive(Clone, Debug)]
pub struct Preset {
    pub name: &'static str,
    pub n_layer: usize,
    pub n_embd: usize,
    pub hc: usize,
    pub hc_rank: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub rope_dim: usize,
    pub context_length: usize,
    /// The rms norms' epsilon (`attention.layer_norm_rms_epsilon`): the released model's 1e-6.
    pub rms_eps: f32,
    pub idx_heads: usize,
    pub idx_dim: usize,
    pub idx_top_k: usize,
    pub ssm_state: usize,
    pub ssm_groups: usize,
    pub ssm_heads: usize,
    pub n_expert: usize,
    pub n_expert_used: usize,
    pub expert_ff: usize,
    pub ple_dim: usize,
    /// Rows of each of the 16 PLE heads.
    pub ple_rows_per_head: u64,
    /// Vocabulary the tokenizer is trained to.
    pub vocab: usize,
    /// The PLE table's type, and whether it goes to its own shard.
    pub ple_type: GgmlType,
    pub ple_shard: bool,
}

impl Preset {
    pub fn by_name(name: &str) -> Option<Preset> {
        match name {
            "tiny" => Some(Self::tiny()),
            "small" => Some(Self::small()),
            "full" => Some(Self::full()),
            _ => None,
        }
    }

    pub fn tiny() -> Preset {
        Preset {
            name: "tiny",
            n_layer: 8,
            n_embd: 256,
            hc: 4,
            hc_rank: 32,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 64,
            rope_dim: 16,
            context_length: 8192,
            rms_eps: 1e-6,
            idx_heads: 4,
            idx_dim: 32,
            idx_top_k: 64,
            ssm_state: 32,
            ssm_groups: 2,
            ssm_heads: 6,
            n_expert: 16,
            n_expert_used: 4,
            expert_ff: 64,
            ple_dim: 16,
            ple_rows_per_head: 1024,
            vocab: 4096,
            ple_type: GgmlType::F16, // rows of 16 are not whole IQ4_NL blocks
            ple_shard: false,
        }
    }

    pub fn small() -> Preset {
        Preset {
            name: "small",
            n_layer: 8,
            n_embd: 1024,
            hc: 4,
            hc_rank: 128,
            n_head: 12,
            n_head_kv: 1,
            head_dim: 128,
            rope_dim: 32,
            context_length: 65536,
            rms_eps: 1e-6,
            idx_heads: 4,
            idx_dim: 64,
            idx_top_k: 512,
            ssm_state: 64,
            ssm_groups: 8,
            ssm_heads: 24,
            n_expert: 64,
            n_expert_used: 6,
            expert_ff: 256,
            ple_dim: 64,
            ple_rows_per_head: 65536,
            vocab: 8192,
            ple_type: GgmlType::IQ4_NL,
            ple_shard: false,
        }
    }

    pub fn full() -> Preset {
        Preset {
            name: "full",
            n_layer: 48,
            n_embd: 2560,
            hc: 4,
            hc_rank: 320,
            n_head: 24,
            n_head_kv: 2,
            head_dim: 256,
            rope_dim: 64,
            context_length: 262_144,
            rms_eps: 1e-6,
            idx_heads: 4,
            idx_dim: 128,
            idx_top_k: 2048,
            ssm_state: 128,
            ssm_groups: 16,
            ssm_heads: 48,
            n_expert: 512,
            n_expert_used: 10,
            expert_ff: 640,
            ple_dim: 160,
            ple_rows_per_head: 20_000_096, // 16 heads: 320,001,536 rows (28.8 GB at IQ4_NL)
            vocab: 248_320,
            ple_type: GgmlType::IQ4_NL,
            ple_shard: true,
        }
    }
}
