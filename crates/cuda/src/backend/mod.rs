pub mod forward;
