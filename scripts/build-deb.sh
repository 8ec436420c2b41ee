#!/usr/bin/env bash
# Builds sandy_VERSION_ARCH.deb with dpkg-deb from the static release binary and prints
# its path. The package installs /usr/bin/sandy, sandy(1), the bash, zsh and fish
# completions, the documentation, and the AppArmor profile /etc/apparmor.d/sandy (a
# conffile; postinst loads it where AppArmor is active, postrm unloads it).
#
#   scripts/build-deb.sh [OUTDIR]        (default OUTDIR: the target directory)
#
# Honors CARGO_TARGET_DIR, so CI reuses its build. SANDY_DEB_BINARY names an already
# built binary instead (no cargo build).
set -euo pipefail
cd "$(dirname "$0")/.."
root_dir=$PWD

command -v dpkg-deb >/dev/null || { echo "build-deb: dpkg-deb is not installed" >&2; exit 1; }

target=$(./scripts/rust-target.sh)
target_dir=${CARGO_TARGET_DIR:-$root_dir/target}
bin=${SANDY_DEB_BINARY:-}
if [[ -z "$bin" ]]; then
  echo "build-deb: cargo build --release -p sandy-cli ($target)" >&2
  cargo build --release -p sandy-cli >&2
  bin=$target_dir/$target/release/sandy
fi
[[ -x "$bin" ]] || { echo "build-deb: no sandy binary at $bin" >&2; exit 1; }
outdir=${1:-$target_dir}
mkdir -p "$outdir"

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
case "$target" in
  x86_64-*) arch=amd64 ;;
  aarch64-*) arch=arm64 ;;
  *) echo "build-deb: no Debian architecture known for $target" >&2; exit 1 ;;
esac

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pkg=$stage/sandy
umask 022
install -d "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/usr/share/man/man1" \
  "$pkg/usr/share/doc/sandy" "$pkg/usr/share/bash-completion/completions" \
  "$pkg/usr/share/zsh/vendor-completions" "$pkg/usr/share/fish/vendor_completions.d" \
  "$pkg/usr/share/lintian/overrides" "$pkg/etc/apparmor.d" "$pkg/usr/share/sandy/containers"

install -m 0755 "$bin" "$pkg/usr/bin/sandy"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$pkg/usr/bin/sandy"

# Everything below comes from the binary itself, so it matches what is installed.
"$bin" man | gzip -9n >"$pkg/usr/share/man/man1/sandy.1.gz"
"$bin" completions bash >"$pkg/usr/share/bash-completion/completions/sandy"
"$bin" completions zsh >"$pkg/usr/share/zsh/vendor-completions/_sandy"
"$bin" completions fish >"$pkg/usr/share/fish/vendor_completions.d/sandy.fish"
"$bin" setup --print --binary /usr/bin/sandy >"$pkg/etc/apparmor.d/sandy"
if ! cmp -s "$pkg/etc/apparmor.d/sandy" packaging/apparmor/sandy; then
  echo "build-deb: packaging/apparmor/sandy differs from 'sandy setup --print --binary /usr/bin/sandy'" >&2
  exit 1
fi
chmod 0644 "$pkg"/usr/share/*/*/sandy* "$pkg"/usr/share/zsh/vendor-completions/_sandy \
  "$pkg/etc/apparmor.d/sandy"

# The seccomp profile a container needs for the full tier (docs/containers.md).
install -m 0644 packaging/containers/sandy-seccomp.json "$pkg/usr/share/sandy/containers/"

doc=$pkg/usr/share/doc/sandy
install -m 0644 packaging/deb/copyright "$doc/copyright"
for f in README.md SECURITY.md THREAT_MODEL.md RUNTIME_CONTROLS.md docs/*.md; do
  gzip -9n <"$f" >"$doc/$(basename "$f").gz"
done
gzip -9n <CHANGELOG.md >"$doc/CHANGELOG.md.gz"
# A native package's changelog, in Debian's format.
date=$(date -R -u -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)")
printf 'sandy (%s) unstable; urgency=medium\n\n  * Package built from the Sandy repository; see CHANGELOG.md.gz.\n\n -- The Sandy authors <sandy@example.invalid>  %s\n' \
  "$version" "$date" | gzip -9n >"$doc/changelog.gz"
install -m 0644 packaging/lintian-overrides "$pkg/usr/share/lintian/overrides/sandy"

install -m 0755 packaging/deb/postinst packaging/deb/postrm "$pkg/DEBIAN/"
echo /etc/apparmor.d/sandy >"$pkg/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" \
  packaging/deb/control.in >"$pkg/DEBIAN/control"
(cd "$pkg" && find . -type f ! -path './DEBIAN/*' ! -path './etc/*' -printf '%P\0' |
  sort -z | xargs -0 md5sum) >"$pkg/DEBIAN/md5sums"
chmod 0644 "$pkg/DEBIAN/control" "$pkg/DEBIAN/conffiles" "$pkg/DEBIAN/md5sums"

deb=$outdir/sandy_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$pkg" "$deb" >&2
echo "$deb"
