//! Layer 5: what is made from a resolved policy (see the crate documentation, "Layers").

pub mod dryrun;
pub mod manifest;
pub mod summary;
pub mod why;
