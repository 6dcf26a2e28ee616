//! The variant of each kernel family a card runs, as one value: chosen by the plan (select/plan.rs) and
//! handed to the weights' uploads, so each op runs the variant its weights carry and asks no global.

use crate::ops::hc::HcVariant;
use crate::ops::layout::Layouts;
use crate::ops::qsa::{ScoresVariant, TopkVariant};

/// Every family's variant. All variants of a family give the same bits (docs/ARITHMETIC.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variants {
    /// Each weight type's matvec layouts.
    pub layouts: Layouts,
    pub hc: HcVariant,
    pub scores: ScoresVariant,
    pub topk: TopkVariant,
}

impl Default for Variants {
    /// The reference variants: the block layout for every type, the plain HC read, the butterfly scorer,
    /// the wide top-k.
    fn default() -> Variants {
        Variants {
            layouts: Layouts::default(),
            hc: HcVariant::PLAIN,
            scores: ScoresVariant::Butterfly,
            topk: TopkVariant::Wide,
        }
    }
}
