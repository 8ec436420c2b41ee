//! Layer 2: facts about the host (see the crate documentation, "Layers"). Refers only to
//! `model`.

pub mod chain;
pub mod context;
pub mod gitfacts;
pub mod inspect;
