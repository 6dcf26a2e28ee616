pub mod check;
pub mod plan;
