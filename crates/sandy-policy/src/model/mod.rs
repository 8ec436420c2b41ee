//! Layer 1: the policy as data (see the crate documentation, "Layers"). Refers to no
//! other layer.

pub mod caches;
pub mod ceilings;
pub mod egress;
pub mod history;
pub mod kontext;
pub mod osbytes;
pub mod paths;
pub mod policy;
pub mod statedirs;
pub mod text;
pub mod tier;
