//! (in progress)

pub mod names;
pub mod patch;
pub mod schema;
pub mod selector;
pub mod timefmt;
