#!/usr/bin/env bash
# Installs the Rust standard library for the target `.cargo/config.toml` names (musl),
# if rustup manages this toolchain and it is missing; prints the target.
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(sed -n 's/^target = "\(.*\)"$/\1/p' .cargo/config.toml)
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx "$target"; then
  rustup target add "$target" >&2
fi
echo "$target"
