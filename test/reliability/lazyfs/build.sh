#!/usr/bin/env bash
# Builds LazyFS (INESC TEC, MIT-style licence inside the tarball): a FUSE filesystem that keeps written data in
# its own page cache until fsync and, on `lazyfs::clear-cache`, drops every unsynced byte — a power cut.
# Usage: build.sh [OUT_DIR]   (default <repo>/.cache/lazyfs, gitignored: built once, then reused); prints the
# path of the lazyfs binary last. Vendored from the team's tools (the tarball holds the source and its MIT licence).
# Needs root for apt-get (g++ cmake libfuse3-dev fuse3 libtoml11-dev libspdlog-dev), Debian 12 or later.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../../.cache/lazyfs}
bin="$out/lazyfs/lazyfs/build/lazyfs"
if [[ -x $bin ]]; then echo "$bin"; exit 0; fi
need=()
for p in g++ cmake libfuse3-dev fuse3 libtoml11-dev libspdlog-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if ((${#need[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
grep -q '^user_allow_other' /etc/fuse.conf 2>/dev/null || echo user_allow_other >>/etc/fuse.conf
rm -rf "$out" && mkdir -p "$out"
tar -xzf "$here"/lazyfs-*.tar.gz -C "$out"
src="$out/lazyfs"
# Upstream fetches toml11 and spdlog from the internet at configure time; use Debian's packages instead.
python3 - "$src" <<'PY'
import sys, re, pathlib
src = pathlib.Path(sys.argv[1])
p = src / 'libs/libpcache/CMakeLists.txt'
s = p.read_text()
s = s[:s.index('include(FetchContent)')] + 'find_package(toml11 REQUIRED)\nfind_package(spdlog REQUIRED)\n' + s[s.index('set(warn_opts'):]
s = s.replace('target_link_libraries(pcache toml11::toml11 spdlog)', 'target_link_libraries(pcache toml11::toml11 spdlog::spdlog)')
p.write_text(s)
p = src / 'lazyfs/CMakeLists.txt'
s = p.read_text()
s = s.replace('Threads::Threads libpcache.so)', 'Threads::Threads libpcache.so fmt spdlog)')
p.write_text(s)
PY
(cd "$src/libs/libpcache" && mkdir -p build && cd build && cmake .. >/dev/null && cmake --build . -j2 >/dev/null)
(cd "$src/lazyfs" && mkdir -p build && cd build && cmake -DLAZYFS_BUILD_TESTS=OFF .. >/dev/null && cmake --build . -j2 >/dev/null 2>&1)
[[ -x $bin ]] || { echo "lazyfs build failed" >&2; exit 1; }
echo "$bin"
