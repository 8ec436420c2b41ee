#!/usr/bin/env bash
# Builds the release `sandy` and prints its path. `.cargo/config.toml` names the target
# (static musl), so the binary is in target/<target>/release/.
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(./scripts/rust-target.sh)
# Progress goes to stderr (the path alone to stdout): a first build takes a few minutes.
bin="$PWD/target/$target/release/sandy"
if [[ ! -x "$bin" ]]; then
  echo "building Sandy (release, $target); the first build takes a few minutes..." >&2
fi
set +e
cargo build --release -p sandy-cli 2>&1 | grep --line-buffered -E '^ *(Compiling|Finished|error)' >&2
built=${PIPESTATUS[0]}
set -e
if [[ $built -ne 0 ]]; then
  echo "the build failed; for the whole message run: cargo build --release -p sandy-cli" >&2
  exit 1
fi
echo "$bin"
