#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, golden and end-to-end tests.
# End-to-end tests run the real `sandy` binary; as root they also run every enforcement
# test as an unprivileged user (uid 65534, or SANDY_TEST_UID). With CI=true, a kernel
# feature or tool the tests need but cannot find is a failure instead of a reported skip.
# The last line totals every test binary's results.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace 2>&1 | tee "$log" || status=$?
awk '/^test result:/ {
        for (i = 1; i <= NF; i++) {
          if ($(i + 1) ~ /^passed;?$/) passed += $i
          if ($(i + 1) ~ /^failed;?$/) failed += $i
          if ($(i + 1) ~ /^ignored;?$/) ignored += $i
        }
      }
      END { printf "summary: %d passed, %d failed, %d skipped\n", passed, failed, ignored }' "$log"
exit "$status"
