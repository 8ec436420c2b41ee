//! Raw process and namespace syscalls that no safe wrapper covers (part of the `sys`
//! module: every `unsafe` block of Sandy lives under `sys`).
