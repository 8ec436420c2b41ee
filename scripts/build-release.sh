#!/usr/bin/env bash
# Builds the release `sandy` and prints its path. `.cargo/config.toml` names the target
# (static musl), so the binary is in target/<target>/release/.
#
# With --archive, also packs the release archive and prints its path instead:
# target/dist/sandy-VERSION-TARGET.tar.gz, holding the static binary, the manual page
# (sandy.1), the completions for bash, zsh and fish, the seccomp profile for containers
# (containers/sandy-seccomp.json, docs/containers.md), both licences and the README, beside
# it the archive's SHA-256 (sandy-VERSION-TARGET.tar.gz.sha256, `sha256sum -c` checks it).
set -euo pipefail
cd "$(dirname "$0")/.."
archive=false
case "${1:-}" in
  --archive) archive=true ;;
  "") ;;
  *) echo "usage: $0 [--archive]" >&2; exit 2 ;;
esac
target=$(./scripts/rust-target.sh)
# Progress goes to stderr (the path alone to stdout): a first build takes a few minutes.
out="${CARGO_TARGET_DIR:-$PWD/target}"
bin="$out/$target/release/sandy"
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
if ! $archive; then
  echo "$bin"
  exit 0
fi

version=$("$bin" --version | awk '{ print $2 }')
name="sandy-$version-$target"
dist="$out/dist"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$name/completions" "$stage/$name/containers" "$dist"
install -m 0755 "$bin" "$stage/$name/sandy"
"$bin" man > "$stage/$name/sandy.1"
"$bin" completions bash > "$stage/$name/completions/sandy.bash"
"$bin" completions zsh > "$stage/$name/completions/_sandy"
"$bin" completions fish > "$stage/$name/completions/sandy.fish"
cp README.md LICENSE-MIT LICENSE-APACHE "$stage/$name/"
install -m 0644 packaging/containers/sandy-seccomp.json "$stage/$name/containers/"
# The same owner, order and times inside the archive on every build.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
  -C "$stage" -czf "$dist/$name.tar.gz" "$name"
(cd "$dist" && sha256sum "$name.tar.gz" > "$name.tar.gz.sha256")
echo "archive: $dist/$name.tar.gz (and .sha256)" >&2
echo "$dist/$name.tar.gz"
