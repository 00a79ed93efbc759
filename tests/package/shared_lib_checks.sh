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
# 3. every exported symbol is the API's: the name directly in dspipe it belongs to (Loader, for
#    dspipe::Loader::Open and "vtable for dspipe::Loader") is declared at namespace scope in
#    API_HEADERS/*.h (include/dspipe: a line of code that starts in column 0). The map exports
#    any CamelCase name in dspipe, so an internal one declared there (not in its folder's
#    namespace, dspipe::convert, dspipe::fetch, ...) fails here, named;
# 4. the map misses nothing: every symbol of the API that the component archives define (nm
#    --extern-only; in dspipe, not in an internal or anonymous namespace) is exported, so no
#    part of the API (a vtable, a const member function) is hidden from a consumer.
# Usage: shared_lib_checks.sh MAJOR LIBDSPIPE_SO API_HEADERS ARCHIVE...
set -euo pipefail
export LC_ALL=C  # sort and comm agree on the order
major=$1 so=$2 api_headers=$3
shift 3

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
# The names declared at namespace scope in the API's headers: each identifier on a line of code
# (comments removed) that starts in column 0; members, parameters on continuation lines and
# anything inside a function body are indented.
api_names=$(sed -e 's://.*$::' "$api_headers"/*.h | grep -E '^[A-Za-z_]' |
  grep -oE '[A-Za-z_][A-Za-z0-9_]*' | sort -u)
if ! grep -qx 'Loader' <<<"$api_names"; then
  echo "$api_headers: no declaration of dspipe::Loader found (not the API's headers?)" >&2
  exit 1
fi
# The name in dspipe of each exported symbol, after its compiler object's prefix.
names=$(sed -E "s/${objects}//" <<<"$exported" |
  sed -nE 's/^dspipe::([A-Za-z_][A-Za-z0-9_]*).*/\1/p' | sort -u)
not_api=$(comm -23 <(echo "$names") <(echo "$api_names"))
if [ -n "$not_api" ]; then
  echo "$so exports $(grep -c . <<<"$not_api") names in dspipe that $api_headers/*.h do not" \
    "declare (internals: move them into their folder's namespace, dspipe::convert, ...):" >&2
  while read -r name; do
    echo "  $name, e.g. $(sed -E "s/${objects}//" <<<"$exported" | grep -m1 "^dspipe::$name\b" |
      cut -c1-120)" >&2
  done <<<"$not_api"
  exit 1
fi
if ! grep -q '^dspipe::Loader::Open(' <<<"$exported"; then
  echo "$so does not export dspipe::Loader::Open ($count symbols)" >&2
  exit 1
fi
echo "exports: $count symbols, all in the dspipe namespace, none in an internal one, of" \
  "$(grep -c . <<<"$names") names that $api_headers/*.h declare"

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
