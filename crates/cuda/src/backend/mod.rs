pub mod budget;
pub mod decoder;
pub mod forward;
pub mod report;
pub mod speculate;
pub mod state;
pub mod weights;
