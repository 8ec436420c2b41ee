//! Sandy's Linux enforcement.
//!
//! The bootstrap hands a validated launch manifest to [`launch`], which probes the kernel
//! ([`probe`]), computes a pure [`EnforcementPlan`] ([`plan`]), then applies the layers in
//! a fixed order and `execve`s the target:
//!
//! 1. a user and mount namespace and the mounts of [`namespaces::mount_plan`] (with the
//!    copy-on-write tool caches of [`overlay`]),
//! 2. `no_new_privs` and every capability dropped,
//! 3. Landlock: filesystem rights of the pinned ABI, signal and abstract-socket scopes,
//! 4. seccomp: with `--explain`, the refusal observer ([`seccomp::compile_notifier`]),
//!    then the fixed syscall floor ([`seccomp::allowlist`] and [`seccomp::floor`]),
//!    installed last,
//! 5. every descriptor above 2 marked close-on-exec, then `execve`.
//!
//! The rule builders return data and are unit-tested as data; the appliers only install
//! it. Every `unsafe` block lives in [`sys`].
//!
//! # Limits
//!
//! Landlock is allow-only and path-based: it cannot make a path read-only inside a
//! writable grant, hide a file inside a readable directory, or stop `connect()` to a
//! pathname Unix socket before ABI 9. Those promises need the mount layer.
#![cfg(target_os = "linux")]

mod apply;
pub mod diagnose;
mod error;
pub mod landlock;
pub mod limits;
pub mod namespaces;
pub mod overlay;
mod plan;
mod probe;
pub mod reach;
pub mod relay;
pub mod seccomp;
#[allow(unsafe_code)]
pub mod sys;
pub mod tier;

pub use apply::{
    launch, launch_forked, restrict_current_process, Ahead, ExecFailure, FREEZE, INIT_NAME, THAW,
};
pub use error::{LinuxError, PlanError};
pub use plan::{check_support, plan, plan_listing, EnforcementPlan};
pub use probe::{
    host_facts, notify_receive_ends_with_filter, probe, userns_hint, KernelSupport,
    MIN_LANDLOCK_ABI, PINNED_LANDLOCK_ABI,
};
