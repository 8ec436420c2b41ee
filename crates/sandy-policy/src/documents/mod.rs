pub mod dryrun;
pub mod manifest;
pub mod summary;
pub mod why;
