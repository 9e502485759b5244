#!/usr/bin/env bash
# The README's C++ snippet ("A taste") compiles against the library as it stands, and runs.
#   bash tests/checks/readme_test.sh CXX SOURCE_DIR BUILD_DIR
set -euo pipefail
cxx=$1
root=$2
build=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
awk '/^## A taste/ { taste = 1 } taste && /^```cpp$/ { on = 1; next } on && /^```$/ { exit }
     on { print }' "$root/README.md" >"$work/taste.cpp"
[[ -s $work/taste.cpp ]] || { echo "FAIL: no C++ snippet under '## A taste' in README.md"; exit 1; }
"$cxx" -std=c++20 -I"$root/include" -I"$build/include" "$work/taste.cpp" -o "$work/taste" \
  -L"$build" -lcotensor -ltbb -pthread -Wl,-rpath,"$build"
out=$("$work/taste")
echo "$out"
# It prints b.sum().item(), then y: a number, then a tensor.
grep -Eq '^-?[0-9.e+-]+$' <<<"$(head -n 1 <<<"$out")" || { echo "FAIL: no sum first"; exit 1; }
grep -q '^tensor(' <<<"$out" || { echo "FAIL: y was not printed"; exit 1; }
echo "README snippet: compiles and runs"
