//! Layer 3: the rules that decide each part of a policy (see the crate documentation,
//! "Layers"). Refers only to `model` and `host`.

pub mod caches;
pub mod egress;
pub mod error;
pub mod files;
pub mod filter;
pub mod history;
pub mod hooks;
pub mod kontext;
pub mod later;
pub mod profile;
pub mod protect;
pub mod secrets;
pub mod sensitive;
pub mod statedirs;
pub mod statemerge;
pub mod tier;
