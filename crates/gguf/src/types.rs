//! The ggml tensor types this project reads (spec §10 and §0.12), with their block geometry.

use std::fmt;

/// Elements per super-block of the K-quants and the IQ formats.
pub const QK_K: usize = 256;

/// A ggml tensor type. Only the types of spec §10 are known; any other id is an error.
/// Variants keep the format's own names (`Q4_K`, `IQ2_XS`).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q5_0,
    Q2_0,
    IQ4_NL,
    IQ4_XS,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    IQ2_XS,
    IQ3_XXS,
    IQ3_S,
    Q4_1,
    Q5_1,
    Q2_K,
    IQ2_XXS,
    IQ2_S,
    IQ1_M,
    TQ1_0,
    TQ2_0,
    NVFP4,
}

impl GgmlType {
    /// Every known type, in type-id order.
    pub const ALL: [GgmlType; 25] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ3_XXS,
        GgmlType::IQ4_NL,
        GgmlType::IQ3_S,
        GgmlType::IQ2_S,
        GgmlType::IQ4_XS,
        GgmlType::IQ1_M,
        GgmlType::BF16,
        GgmlType::TQ1_0,
        GgmlType::TQ2_0,
        GgmlType::NVFP4,
        GgmlType::Q2_0,
    ];

    /// The type for a ggml type id, or `None` for an id this project does not know.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        Self::ALL.into_iter().find(|t| t.id() == id)
    }

    /// The ggml type id stored in a GGUF tensor info.
    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q5_0 => 6,
            GgmlType::Q8_0 => 8,
            GgmlType::Q3_K => 11,
            GgmlType::Q4_K => 12,
            GgmlType::Q5_K => 13,
            GgmlType::Q6_K => 14,
            GgmlType::IQ2_XS => 17,
            GgmlType::IQ3_XXS => 18,
            GgmlType::IQ4_NL => 20,
            GgmlType::IQ3_S => 21,
            GgmlType::IQ4_XS => 23,
            GgmlType::BF16 => 30,
            GgmlType::Q2_0 => 42,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_1 => 7,
            GgmlType::Q2_K => 10,
            GgmlType::IQ2_XXS => 16,
            GgmlType::IQ2_S => 22,
            GgmlType::IQ1_M => 29,
            GgmlType::TQ1_0 => 34,
            GgmlType::TQ2_0 => 35,
            GgmlType::NVFP4 => 40,
        }
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::IQ4_NL => 32,
            GgmlType::Q4_1 | GgmlType::Q5_1 => 32,
            GgmlType::Q2_0 | GgmlType::NVFP4 => 64,
            _ => QK_K,
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q8_0 => 34,
            GgmlType::Q4_0 => 18,
            GgmlType::Q5_0 => 22,
            GgmlType::Q2_0 => 18,
            GgmlType::IQ4_NL => 18,
            GgmlType::IQ4_XS => 136,
            GgmlType::Q3_K => 110,
            GgmlType::Q4_K => 144,
            GgmlType::Q5_K => 176,
            GgmlType::Q6_K => 210,
            GgmlType::IQ2_XS => 74,
            GgmlType::IQ3_XXS => 98,
            GgmlType::IQ3_S => 110,
            GgmlType::Q4_1 => 20,
            GgmlType::Q5_1 => 24,
            GgmlType::Q2_K => 84,
            GgmlType::IQ2_XXS => 66,
            GgmlType::IQ2_S => 82,
            GgmlType::IQ1_M => 56,
            GgmlType::TQ1_0 => 54,
            GgmlType::TQ2_0 => 66,
            GgmlType::NVFP4 => 36,
        }
    }

    /// The type's usual name (`Q4_K`, `IQ2_XS`, ...).
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::BF16 => "BF16",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q5_0 => "Q5_0",
            GgmlType::Q2_0 => "Q2_0",
            GgmlType::IQ4_NL => "IQ4_NL",
            GgmlType::IQ4_XS => "IQ4_XS",
            GgmlType::Q3_K => "Q3_K",
            GgmlType::Q4_K => "Q4_K",
            GgmlType::Q5_K => "Q5_K",
            GgmlType::Q6_K => "Q6_K",
            GgmlType::IQ2_XS => "IQ2_XS",
            GgmlType::IQ3_XXS => "IQ3_XXS",
            GgmlType::IQ3_S => "IQ3_S",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q5_1 => "Q5_1",
            GgmlType::Q2_K => "Q2_K",
            GgmlType::IQ2_XXS => "IQ2_XXS",
            GgmlType::IQ2_S => "IQ2_S",
            GgmlType::IQ1_M => "IQ1_M",
            GgmlType::TQ1_0 => "TQ1_0",
            GgmlType::TQ2_0 => "TQ2_0",
            GgmlType::NVFP4 => "NVFP4",
        }
    }

    /// The type with this name, case-insensitive.
    pub fn from_name(name: &str) -> Option<GgmlType> {
        Self::ALL.into_iter().find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// Bytes of `n_elements` elements of this type, or `None` if `n_elements` is not a whole number of
    /// blocks or the size overflows.
    pub fn bytes_for(self, n_elements: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if !n_elements.is_multiple_of(bs) {
            return None;
        }
        (n_elements / bs).checked_mul(self.type_size() as u64)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_round_trip() {
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
            assert_eq!(GgmlType::from_name(t.name()), Some(t));
        }
        assert_eq!(GgmlType::from_id(19), None); // IQ1_S: not a type of this model
        assert_eq!(GgmlType::from_id(39), None); // MXFP4
        assert_eq!(GgmlType::from_id(u32::MAX), None);
    }

    #[test]
    fn bytes_for_checks_blocks_and_overflow() {
        assert_eq!(GgmlType::Q4_K.bytes_for(512), Some(288));
        assert_eq!(GgmlType::Q4_K.bytes_for(100), None);
        assert_eq!(GgmlType::F32.bytes_for(u64::MAX), None);
        assert_eq!(GgmlType::Q2_0.bytes_for(64), Some(18));
    }
}
