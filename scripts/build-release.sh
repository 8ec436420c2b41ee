#!/usr/bin/env bash
# Builds the release `sandy` and prints its path. `.cargo/config.toml` names the target
# (static musl), so the binary is in target/<target>/release/.
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(./scripts/rust-target.sh)
cargo build --release --quiet -p sandy-cli
echo "$PWD/target/$target/release/sandy"
