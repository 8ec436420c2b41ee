#!/usr/bin/env bash
# Installs the real agent CLIs that crates/sandy-cli/tests/agents.rs runs inside Sandy:
# Claude Code, Codex CLI, OpenCode and Gemini CLI, from the npm registry, pinned, into a
# fixed world-readable prefix that the unprivileged test user (uid 65534) can execute.
#
#     scripts/install-agents.sh [PREFIX]        # default /opt/sandy-test-agents
#
# Idempotent: does nothing when every package is already installed at its pinned version.
# Prints the directory holding the binaries on its last line. Run it as root on a fresh
# machine (it installs node and npm with apt-get when they are missing).
set -euo pipefail

PREFIX="${1:-${SANDY_TEST_AGENTS:-/opt/sandy-test-agents}}"

# The versions the tests were written against; bump them together with the tests.
PACKAGES=(
    "@anthropic-ai/claude-code@2.1.332"
    "@openai/codex@0.171.0"
    "opencode-ai@1.18.33"
    "@google/gemini-cli@0.61.0"
)
BINARIES=(claude codex opencode gemini)
BIN="$PREFIX/node_modules/.bin"

say() { echo "install-agents: $*" >&2; }

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        say "node and npm are missing; run as root to install them"
        exit 1
    fi
    say "installing node and npm with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq nodejs npm >/dev/null
fi

# The installed version of package NAME under the prefix, or nothing.
installed_version() {
    local manifest="$PREFIX/node_modules/$1/package.json"
    [ -f "$manifest" ] || return 0
    node -e 'process.stdout.write(String(require(process.argv[1]).version || ""))' "$manifest"
}

up_to_date() {
    local spec name want
    for spec in "${PACKAGES[@]}"; do
        name="${spec%@*}"
        want="${spec##*@}"
        [ "$(installed_version "$name")" = "$want" ] || return 1
    done
    local b
    for b in "${BINARIES[@]}"; do
        [ -x "$BIN/$b" ] || return 1
    done
}

# Every binary answers --version (as the unprivileged user too, when run as root). Each
# check gets a throw-away HOME: the agents create state directories even for --version,
# and nothing may land in a real home (or in /nonexistent, nobody's nominal home).
check() {
    local b out home
    home=$(mktemp -d)
    chmod 0755 "$home"
    trap 'rm -rf "$home"' RETURN
    for b in "${BINARIES[@]}"; do
        if ! out="$(cd / && HOME="$home/root" timeout 60 "$BIN/$b" --version 2>&1)"; then
            say "$b --version failed: $out"
            return 1
        fi
        say "$b: $(printf '%s' "$out" | tail -n 1)"
    done
    if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null 2>&1; then
        mkdir -p "$home/nobody"
        chown 65534:65534 "$home/nobody"
        for b in "${BINARIES[@]}"; do
            if ! out="$(cd / && HOME="$home/nobody" timeout 60 setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN/$b" --version 2>&1)"; then
                say "$b --version failed as uid 65534: $out"
                return 1
            fi
        done
    fi
}

if up_to_date; then
    say "already installed in $PREFIX"
else
    say "installing ${PACKAGES[*]} into $PREFIX"
    umask 022
    mkdir -p "$PREFIX"
    # The Claude Code and OpenCode post-install scripts put the native binary for this
    # platform in place of a placeholder; `check` below fails if they did not run.
    npm install --prefix "$PREFIX" --no-audit --no-fund \
        --loglevel=error "${PACKAGES[@]}" >&2
    if ! up_to_date; then
        say "npm finished but the pinned versions are not all in $PREFIX"
        exit 1
    fi
fi
# World-readable and executable, whatever umask npm or an earlier run used.
chmod -R a+rX "$PREFIX"
check
echo "$BIN"
