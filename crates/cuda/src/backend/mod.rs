pub mod budget;
pub(crate) mod cache;
pub mod decoder;
pub mod forward;
pub mod report;
pub mod speculate;
pub mod state;
pub mod weights;
