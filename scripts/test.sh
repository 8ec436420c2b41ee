#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, golden and end-to-end tests.
# End-to-end tests run the real `sandy` binary; as root they also run every enforcement
# test as an unprivileged user (uid 65534, or SANDY_TEST_UID). With CI=true, a kernel
# feature the tests need but cannot find is a failure instead of a reported skip.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
