#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, golden and end-to-end tests.
# End-to-end tests run the real `sandy` binary; as root they also run every enforcement
# test as an unprivileged user (uid 65534, or SANDY_TEST_UID). With CI=true, a kernel
# feature or tool the tests need but cannot find is a failure instead of a reported skip.
# Every test binary runs even when an earlier one fails (no fail-fast). The last line
# totals every binary's results; a test that skipped (locally: a missing feature) is
# counted as skipped, not passed.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/rust-target.sh >/dev/null
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The crates' documentation (the library's API reference) builds without a broken link.
RUSTDOCFLAGS='-D warnings' cargo doc -p sandy -p sandy-policy -p sandy-net -p sandy-linux --no-deps --quiet

log=$(mktemp)
skips=$(mktemp)
chmod 0666 "$skips" # the unprivileged pass's helpers may write it too
trap 'rm -f "$log" "$skips"' EXIT
status=0
SANDY_TEST_SKIP_LOG="$skips" cargo test --workspace --no-fail-fast 2>&1 | tee "$log" || status=$?
if [[ -s "$skips" ]]; then
  echo "skipped tests (a missing feature or tool; each is a failure under CI=true):"
  sort -u "$skips" | awk -F '\t' '{ printf "  %s: %s\n", $1, $2 }'
fi
skipped=$(cut -f1 "$skips" | sort -u | grep -c . || true)
awk -v skipped="$skipped" '/^test result:/ {
        for (i = 1; i <= NF; i++) {
          if ($(i + 1) ~ /^passed;?$/) passed += $i
          if ($(i + 1) ~ /^failed;?$/) failed += $i
          if ($(i + 1) ~ /^ignored;?$/) ignored += $i
        }
      }
      END {
        printf "summary: %d passed, %d failed, %d skipped\n", passed - skipped, failed, ignored + skipped
      }' "$log"
exit "$status"
