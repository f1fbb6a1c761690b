#!/usr/bin/env bash
# Which module of libvgpu calls (or reads) which: one object per src/ file, an edge "A B" when
# A uses a symbol B defines. Prints the edges; fails, naming the modules, when they form a
# circle (the layout in the README is bottom-up: init at the bottom, hook at the top).
# usage: tests/module_graph.sh OBJ_DIR       (make test runs it over build/obj)
set -eu
cd "$1"
defs=$(mktemp) uses=$(mktemp)
trap 'rm -f "$defs" "$uses"' EXIT
for o in *.o; do
	nm --defined-only "$o" | awk -v m="${o%.o}" 'NF == 3 && $2 ~ /^[TDBRVW]$/ {print $3, m}'
done | sort >"$defs"
for o in *.o; do
	nm -u "$o" | awk -v m="${o%.o}" '{print $2, m}'
done | sort >"$uses"
edges=$(join "$defs" "$uses" | awk '$2 != $3 {print $3, $2}' | sort -u)
echo "$edges"
# tsort names the modules of a circle on stderr and exits non-zero
tsort <<<"$edges" >/dev/null
