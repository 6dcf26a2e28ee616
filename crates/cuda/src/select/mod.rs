pub mod check;
pub mod plan;
pub mod start;
