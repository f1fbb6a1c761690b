#!/bin/sh
# usage: site.sh EXTRA (in the images' `site` stage, from /src): the project with its [EXTRA]
# installed into /opt/vgpu-bridge/site as wheels for TARGETARCH (BuildKit's automatic argument;
# images/build.py passes it to the legacy builder), glibc 2.GLIBC_MINOR and PYTHON_VERSION (not
# necessarily this machine's), then byte-compiled by this machine's python3, which must be
# PYTHON_VERSION too: bytecode is the same on every architecture.
#        site.sh --platforms: only print pip's --platform options for TARGETARCH and glibc
# 2.GLIBC_MINOR (images/build.py downloads the wheelhouse with them, on the host)
set -eu

# the image's machine as wheels' platform tags name it
case "${TARGETARCH:-}" in
amd64) machine=x86_64 ;;
arm64) machine=aarch64 ;;
*)
	echo "TARGETARCH='${TARGETARCH:-}': not amd64 or arm64 (docker buildx build --platform" \
		"linux/amd64,linux/arm64 sets it; the legacy builder needs --build-arg TARGETARCH=...)" >&2
	exit 1
	;;
esac

# every manylinux tag glibc 2.$GLIBC_MINOR runs (pip does not widen one to older ones)
platforms=
minor=$GLIBC_MINOR
while [ "$minor" -ge 5 ]; do
	platforms="$platforms --platform manylinux_2_${minor}_$machine"
	minor=$((minor - 1))
done
for alias in 2014 2010 1; do
	platforms="$platforms --platform manylinux${alias}_$machine"
done
if [ "$1" = --platforms ]; then
	echo $platforms
	exit 0
fi

extra=$1
have=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$have" != "$PYTHON_VERSION" ]; then
	echo "BUILD_IMAGE has Python $have; PYTHON_VERSION is $PYTHON_VERSION" >&2
	exit 1
fi
abi=cp$(echo "$PYTHON_VERSION" | tr -d .)
# the project's own wheel is pure Python: built here, for any platform
python3 -m pip wheel --quiet --no-deps $PIP_OPTIONS --wheel-dir /wheels .
wheel=$(ls /wheels/vgpu_bridge-*.whl)
python3 -m pip install --quiet $PIP_OPTIONS --target /opt/vgpu-bridge/site --no-compile \
	--only-binary=:all: $platforms --python-version "$PYTHON_VERSION" \
	--implementation cp --abi "$abi" --abi abi3 --abi none "$wheel[$extra]"
site=/opt/vgpu-bridge/site
# console scripts name this machine's interpreter; the image runs `python3 -m vgpu_bridge.cli`
rm -rf "$site/bin"
# kubernetes/aio is the client's asyncio twin (66 MB with its bytecode) and aiohttp and its
# helpers are there for it alone: vgpu_bridge uses the synchronous client (vgpu_bridge.kube).
# The images' check imports the whole kubernetes package (every subpackage but aio).
rm -rf "$site/kubernetes/aio"
for name in aiohttp aiohttp_retry aiohappyeyeballs aiosignal yarl multidict frozenlist propcache; do
	rm -rf "${site:?}/$name" "$site/$name"-*.dist-info
done
# The generated API and model classes of the client (32 MB of source) ship as bytecode only:
# a traceback through them shows file and line, not the line's text.
python3 -m compileall -q -j 0 -b "$site/kubernetes/client"
find "$site/kubernetes/client" -name '*.py' -delete
# unchecked-hash: the interpreter uses the bytecode as it is and never tries to rewrite it
python3 -m compileall -q -j 0 --invalidation-mode unchecked-hash "$site"
