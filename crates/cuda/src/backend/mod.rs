pub mod budget;
pub mod decoder;
pub mod forward;
pub mod state;
pub mod weights;
