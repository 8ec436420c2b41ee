pub mod ceilings;
pub mod osbytes;
pub mod policy;
pub mod text;
