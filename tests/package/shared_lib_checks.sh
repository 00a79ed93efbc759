#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The installed libdspipe.so (tests/package/run_consumer.cmake runs this on the install prefix):
# 1. its SONAME is libdspipe.so.MAJOR (CMakeLists.txt's project VERSION);
# 2. it exports the API and nothing else (lib/dspipe.map): every defined dynamic symbol (nm -D
#    --defined-only, demangled) is dspipe::..., or a vtable / typeinfo / VTT / guard variable /
#    thunk of it, and none is in an internal namespace (dspipe::loader::, dspipe::codec::, ...:
#    lower case, after lib/'s folders). Without the version script the library exports
#    everything linked into it (cv::, tbb::, std:: instantiations, cudart's cuda*, libarchive's
#    archive_*, ...), and this fails naming them;
# 3. the map misses nothing: every symbol of the API that the component archives define (nm
#    --extern-only; in dspipe, not in an internal or anonymous namespace) is exported, so no
#    part of the API (a vtable, a const member function) is hidden from a consumer.
# Usage: shared_lib_checks.sh MAJOR LIBDSPIPE_SO ARCHIVE...
set -euo pipefail
export LC_ALL=C  # sort and comm agree on the order
major=$1 so=$2
shift 2

soname=$(readelf -d "$so" | sed -nE 's/.*Library soname: \[(.*)\].*/\1/p')
if [ "$soname" != "libdspipe.so.$major" ]; then
  echo "$so: SONAME '$soname', expected libdspipe.so.$major" >&2
  exit 1
fi
echo "SONAME: $soname"

# A demangled name, optionally behind the compiler object made for it ("vtable for "), then:
# the dspipe namespace (ours), or one of its internal namespaces.
objects='^(((vtable|typeinfo|typeinfo name|VTT|guard variable|TLS init function|TLS wrapper function) for )|((non-virtual |virtual |covariant return )thunk to )|(construction vtable for .*-in-))?'
ours="${objects}dspipe::"
defined() {  # nm's demangled names of the defined symbols, one each
  nm "$@" --defined-only -C | sed -nE 's/^[0-9a-f]+ [A-Za-z] //p' | sort -u
}
# An internal namespace: dspipe:: then a lower-case name and :: (the API is CamelCase).
internal="${objects}dspipe::[a-z_][a-z_0-9]*::"
exported=$(defined -D "$so")
count=$(grep -c . <<<"$exported" || true)
others=$(grep -vE "$ours" <<<"$exported" || true)
if [ -n "$others" ]; then
  echo "$so exports $(grep -c . <<<"$others") symbols outside the dspipe namespace" \
    "(lib/dspipe.map should hide them), e.g.:" >&2
  head -25 <<<"$others" | cut -c1-160 | sed "s/^/  /" >&2
  exit 1
fi
inner=$(grep -E "$internal" <<<"$exported" || true)
if [ -n "$inner" ]; then
  echo "$so exports $(grep -c . <<<"$inner") symbols of dspipe's internal namespaces" \
    "(lib/dspipe.map should hide them), e.g.:" >&2
  head -25 <<<"$inner" | cut -c1-160 | sed "s/^/  /" >&2
  exit 1
fi
if ! grep -q '^dspipe::Loader::Open(' <<<"$exported"; then
  echo "$so does not export dspipe::Loader::Open ($count symbols)" >&2
  exit 1
fi
echo "exports: $count symbols, all in the dspipe namespace, none in an internal one"

# (An anonymous namespace is no API, even where nvcc gives its host functions external linkage.)
missing=$(comm -23 <(defined --extern-only "$@" | grep -E "$ours" | grep -vE "$internal" |
  grep -vF '(anonymous namespace)' || true) <(echo "$exported"))
if [ -n "$missing" ]; then
  echo "$so hides $(grep -c . <<<"$missing") dspipe symbols that the component archives" \
    "define (lib/dspipe.map misses them), e.g.:" >&2
  head -25 <<<"$missing" | cut -c1-160 | sed "s/^/  /" >&2
  exit 1
fi
echo "every API symbol of the $# component archives is exported"
