#!/usr/bin/env bash
# Builds gmux and the shim on the dev machine and puts them in .gpu-bin/, the folder
# the device tool carries to the GPU machine (name it in the run's `carry`), where
# scripts/gpu-suite.sh uses them.
#
#   scripts/gpu-pack.sh
#
# .gpu-bin/ is ignored through .git/info/exclude, so it is never committed but can be
# carried. The GPU machine is x86-64; the binaries must not need a newer glibc than
# its own (gpu-suite.sh's setup step prints it).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Building the gmux package also builds its gmux-shim dependency, a cdylib.
cargo build --release -p gmux

# The cdylib lands in target/release/deps/ when built as a dependency, in
# target/release/ when built on its own: take the newer.
shim=""
for f in target/release/deps/libgmux.so target/release/libgmux.so; do
  if [[ -f $f && (-z $shim || $f -nt $shim) ]]; then shim=$f; fi
done
if [[ -z $shim ]]; then
  echo "gpu-pack: no libgmux.so under target/release after the build" >&2
  exit 1
fi

mkdir -p .gpu-bin
cp target/release/gmux .gpu-bin/gmux
cp "$shim" .gpu-bin/libgmux.so
chmod +x .gpu-bin/gmux

# The policies of policies/, compiled here (the GPU machine may have no clang).
if command -v clang >/dev/null; then
  mkdir -p .gpu-bin/policies
  for c in policies/*.c; do
    clang -O2 -target bpf -I include -c "$c" -o ".gpu-bin/policies/$(basename "${c%.c}").o"
  done
else
  echo "gpu-pack: no clang: .gpu-bin/policies/ not built (scripts/gpu-policy.sh needs it)" >&2
fi

exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
touch "$exclude"
grep -qxF '/.gpu-bin/' "$exclude" || echo '/.gpu-bin/' >>"$exclude"

if [[ $(uname -m) != x86_64 ]]; then
  echo "gpu-pack: warning: built for $(uname -m); the GPU machine is x86_64" >&2
fi
echo "gpu-pack: .gpu-bin/ (from $shim):"
ls -l .gpu-bin/gmux .gpu-bin/libgmux.so
du -ch .gpu-bin/gmux .gpu-bin/libgmux.so | tail -n 1
if command -v objdump >/dev/null; then
  glibc=$(objdump -T .gpu-bin/gmux .gpu-bin/libgmux.so | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)
  echo "gpu-pack: newest glibc symbol needed: ${glibc:-none}"
fi
