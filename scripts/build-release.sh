#!/usr/bin/env bash
# Builds the release `sandy` and prints its path. `.cargo/config.toml` makes the build
# static and names the host's target triple, so the binary is in target/<triple>/release/.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p sandy-cli
host=$(rustc -vV | sed -n 's/^host: //p')
echo "$PWD/target/$host/release/sandy"
