#!/usr/bin/env bash
# CI check of the Debian package: builds it (scripts/build-deb.sh, reusing the release
# build in the target directory), checks the AppArmor profile with apparmor_parser
# (without loading it), runs lintian (errors and warnings fail; the remaining tags are
# justified in packaging/lintian-overrides), then installs it, runs `sandy doctor` and a
# real `sandy run -- true` from /usr/bin, and removes it again. Needs root, dpkg, lintian
# and apparmor's userspace tools (.ci/run installs them). Refuses to touch a machine
# where a sandy package or /usr/bin/sandy is already installed.
set -euo pipefail
cd "$(dirname "$0")/.."
root_dir=$PWD

fail() { echo "check-deb: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || fail "needs root (dpkg -i)"
for tool in dpkg-deb lintian apparmor_parser; do
  command -v "$tool" >/dev/null || fail "$tool is not installed"
done
if dpkg-query -W sandy >/dev/null 2>&1 || [[ -e /usr/bin/sandy ]]; then
  fail "sandy is already installed here (dpkg -l sandy, /usr/bin/sandy); not touching it"
fi

work=$(mktemp -d)
installed=0
cleanup() {
  if ((installed)); then dpkg --purge sandy >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

deb=$(./scripts/build-deb.sh "$work")
echo "check-deb: built $deb ($(du -h "$deb" | cut -f1))"

# The profile: a parser that knows abi 4.0 (AppArmor 4: Ubuntu 24.04, Debian 13) parses
# it whole; an older one (Debian 12's 3.0) knows neither the abi nor the userns rule, so
# everything but that rule is parsed at abi 3.0.
profile=$work/apparmor.d/sandy
mkdir -p "$work/apparmor.d"
dpkg-deb --fsys-tarfile "$deb" | tar -xO ./etc/apparmor.d/sandy >"$profile"
if [[ -e /etc/apparmor.d/abi/4.0 ]]; then
  apparmor_parser -Q -K "$profile"
  echo "check-deb: apparmor_parser parsed the profile"
else
  sed -e 's#<abi/4.0>#<abi/3.0>#' -e '/^ *userns,$/d' "$profile" >"$profile.3"
  apparmor_parser -Q -K "$profile.3" 2>&1 | grep -v '^Cache read/write disabled' || true
  apparmor_parser -Q -K "$profile.3" >/dev/null 2>&1 ||
    fail "apparmor_parser rejects the profile (without its userns rule)"
  echo "check-deb: apparmor_parser $(apparmor_parser --version | sed -n '1s/.* //p') has no abi 4.0: parsed the profile without its userns rule"
fi

# Errors and warnings fail; informational tags are listed.
lintian --fail-on error,warning --display-info "$deb"
echo "check-deb: lintian passed"

dpkg -i "$deb"
installed=1
[[ -x /usr/bin/sandy && -f /etc/apparmor.d/sandy && -f /usr/share/man/man1/sandy.1.gz \
  && -f /usr/share/sandy/containers/sandy-seccomp.json ]] ||
  fail "the package did not install /usr/bin/sandy, its profiles and its manual page"
/usr/bin/sandy doctor
# As root, and as an unprivileged account (uid 65534), each with a home of its own so
# that nothing is left in the real one.
base=$(mktemp -d /var/tmp/sandy-deb-XXXXXX)
chmod 0755 "$base"
for uid in 0 65534; do
  home=$base/home-$uid
  mkdir -p "$home/project"
  chown -R "$uid:$uid" "$home"
  (cd "$home/project" &&
    setpriv --reuid="$uid" --regid="$uid" --clear-groups \
      env -i HOME="$home" PATH=/usr/bin:/bin LANG=C.UTF-8 /usr/bin/sandy run -- true) ||
    fail "sandy run -- true from /usr/bin failed as uid $uid"
done
rm -rf "$base"
echo "check-deb: sandy doctor and sandy run -- true work from /usr/bin"

dpkg -r sandy
[[ ! -e /usr/bin/sandy ]] || fail "dpkg -r left /usr/bin/sandy"
dpkg --purge sandy
installed=0
[[ ! -e /etc/apparmor.d/sandy ]] || fail "dpkg --purge left /etc/apparmor.d/sandy"
echo "check-deb: removed and purged"
