#!/usr/bin/env bash
# usage: tests/need_packages.sh PACKAGE...: installs the Debian packages that are missing
# (apt-get update first when the package lists do not have them). Installed packages stay.
set -euo pipefail
missing=()
for p in "$@"; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
command -v apt-get >/dev/null || { echo "need ${missing[*]} and there is no apt-get" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "need ${missing[*]}: run as root to install them" >&2; exit 1; }
echo "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends "${missing[@]}" ||
	{ apt-get update -q && apt-get install -y -q --no-install-recommends "${missing[@]}"; }
