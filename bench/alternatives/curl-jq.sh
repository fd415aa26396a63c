#!/usr/bin/env bash
# What an admin would write instead of config-agent: page the device's deployed instances with curl, write
# each file through a temp file in its directory, sync it, mv it into place, and sync once at the end.
# Usage: CONFIG_API_KEY=... curl-jq.sh <base-url> <device-id> <root-dir>
# Needs bash, curl, jq (1.6+) and coreutils (`sync FILE` needs coreutils >= 8.24).
set -euo pipefail

usage='usage: CONFIG_API_KEY=... curl-jq.sh <base-url> <device-id> <root-dir>'
base=${1:?$usage}
device=${2:?$usage}
root=${3:?$usage}
: "${CONFIG_API_KEY:?$usage}"

page=$(mktemp)
trap 'rm -f "$page"' EXIT
offset=0
while :; do
  curl -fsS --retry 3 --max-time 60 -H "X-API-Key: $CONFIG_API_KEY" -o "$page" \
    "$base/v1/config_instances?device_id=$device&target_status=deployed&limit=100&offset=$offset&order_by=id:asc"
  # One jq per page: path NUL pretty-printed content NUL, so no byte of a path or content breaks the framing.
  while IFS= read -r -d '' rel && IFS= read -r -d '' body; do
    case "/$rel/" in
      // | *//* | */./* | */../* | *\\*) echo "skipping unsafe path: $rel" >&2; continue ;;
    esac
    dest="$root/$rel"
    dir=${dest%/*}
    [[ -d $dir ]] || mkdir -p "$dir"
    tmp=$(mktemp "$dir/.tmp.XXXXXXXX")
    printf '%s' "$body" >"$tmp"
    chmod 0644 "$tmp"
    sync "$tmp"
    mv -f "$tmp" "$dest"
  done < <(jq -j '.data[] | .relative_filepath, "\u0000", .content, "\n\u0000"' "$page")
  [[ $(jq -r '.has_more' "$page") == true ]] || break
  offset=$((offset + 100))
done
# The directory entries of every rename, in one go.
sync
