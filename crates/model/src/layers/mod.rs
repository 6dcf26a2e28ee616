//! The blocks of the forward pass, one file each.

pub mod experts;
pub mod gdn;
pub mod hc;
pub mod moe;
pub mod ple;
pub mod qsa;
