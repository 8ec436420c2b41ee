pub mod chain;
pub mod context;
pub mod gitfacts;
pub mod inspect;
