pub mod bench;
pub mod parity;
