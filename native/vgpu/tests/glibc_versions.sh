#!/usr/bin/env bash
# usage: tests/glibc_versions.sh ELF [MAX]   (MAX defaults to 2.28, RHEL 8 / UBI 8)
# Fails, naming them, when ELF needs a glibc symbol version newer than MAX: its dynamic symbols
# (readelf --dyn-syms: name@GLIBC_x.y) and its version needs (readelf -V), for any architecture.
set -euo pipefail
elf=$1
max=${2:-2.28}
[ -f "$elf" ] || { echo "$elf: no such file" >&2; exit 2; }
syms=$(readelf --dyn-syms -W "$elf")
needs=$(readelf -V -W "$elf")
grep -q 'GLIBC_' <<<"$syms$needs" || { echo "$elf: no GLIBC_ symbol versions at all" >&2; exit 2; }
newer() { # the versions in stdin (one a line) newer than $max
	sort -u | while read -r v; do
		[ "$(printf '%s\n%s\n' "$v" "$max" | sort -V | tail -n 1)" = "$max" ] || echo "$v"
	done
}
bad=$( (grep -o 'GLIBC_[0-9][0-9.]*' <<<"$syms$needs" | sed 's/^GLIBC_//') | newer)
if [ -n "$bad" ]; then
	for v in $bad; do
		echo "$elf needs GLIBC_$v (newer than $max):" \
			$(grep -oE "[A-Za-z0-9_]+@GLIBC_$v( |$)" <<<"$syms" | sed 's/@.*//' | sort -u)
	done
	exit 1
fi
echo "$elf: glibc symbol versions at most $max:" $(grep -o 'GLIBC_[0-9][0-9.]*' <<<"$syms" | sort -uV | tail -n 1)
