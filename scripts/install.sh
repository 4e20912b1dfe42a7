#!/usr/bin/env bash
# Installs gmux on a GPU host: the gmux command, libgmux.so (in lib/, where gmux looks
# for it), shell completions, the man page, and a systemd unit for gmuxd.
#
#   sudo bash scripts/install.sh                      PREFIX=/usr/local; builds with cargo
#   PREFIX=$HOME/.local bash scripts/install.sh       for one user, without root
#   bash scripts/install.sh --from target/release     installs a build that is there
#
# GROUP (default: gmux) names the group whose members the systemd unit's daemon serves;
# DESTDIR stages the files for a package.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PREFIX=${PREFIX:-/usr/local}
GROUP=${GROUP:-gmux}
DESTDIR=${DESTDIR:-}
from=""
while [ $# -gt 0 ]; do
  case "$1" in
    --from) from=${2:?--from needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$from" ]; then
  command -v cargo >/dev/null || { echo "install.sh: cargo not found: install Rust (https://rustup.rs), or give --from DIR" >&2; exit 1; }
  echo "building gmux (release)..."
  cargo build --release -q -p gmux
  from=target/release
fi
gmux=$from/gmux
shim=$from/libgmux.so
[ -f "$shim" ] || shim=$from/deps/libgmux.so
for f in "$gmux" "$shim"; do
  [ -f "$f" ] || { echo "install.sh: $f is missing: build with \`cargo build --release -p gmux\` first" >&2; exit 1; }
done
root=$DESTDIR$PREFIX
put() { install -D -m "$1" "$2" "$3" && echo "  $3"; }
echo "installing into $root:"
put 755 "$gmux" "$root/bin/gmux"
put 755 "$shim" "$root/lib/libgmux.so"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$gmux" completions bash >"$tmp/gmux.bash"
"$gmux" completions zsh >"$tmp/_gmux"
"$gmux" completions fish >"$tmp/gmux.fish"
"$gmux" man >"$tmp/gmux.1"
sed -e "s|@PREFIX@|$PREFIX|g" -e "s|@GROUP@|$GROUP|g" packaging/gmuxd.service >"$tmp/gmuxd.service"
put 644 "$tmp/gmux.bash" "$root/share/bash-completion/completions/gmux"
put 644 "$tmp/_gmux" "$root/share/zsh/site-functions/_gmux"
put 644 "$tmp/gmux.fish" "$root/share/fish/vendor_completions.d/gmux.fish"
put 644 "$tmp/gmux.1" "$root/share/man/man1/gmux.1"
put 644 "$tmp/gmuxd.service" "$root/lib/systemd/system/gmuxd.service"
echo "installed $("$root/bin/gmux" --version)."
echo "next: docs/install.md (the group $GROUP, then: systemctl daemon-reload && systemctl enable --now gmuxd)"
