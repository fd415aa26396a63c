#!/usr/bin/env bash
# Builds LazyFS, the power-cut filesystem of the team's shared tools (../shared/tools/lazyfs beside the repo,
# as in CI), into <repo>/.cache/lazyfs (gitignored: built once, then reused); prints the binary's path last.
# Usage: build.sh [OUT_DIR]. LAZYFS_TOOL names another copy of the tool's build.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
tool=${LAZYFS_TOOL:-$repo/../shared/tools/lazyfs/build.sh}
if [[ ! -f $tool ]]; then
  echo "LazyFS build script not found at $tool (the shared tools are expected beside the repo)" >&2
  exit 1
fi
exec bash "$tool" "${1:-$repo/.cache/lazyfs}"
