#!/usr/bin/env bash
# doctest_discover_tests registers one ctest test per test case, named after it, in a CMake
# list: a `;` in a test case's name splits it, and the ctest test then runs a filter that
# matches no case and passes having run nothing. Fails, naming them, if any test case of the
# given doctest executables has a `;` in its name.
#   bash tests/checks/test_names_test.sh EXECUTABLE...
set -euo pipefail
bad=0
for exe in "$@"; do
  names=$("$exe" --list-test-cases --no-version 2>&1 | grep -v '^\[doctest\]' | grep -v '^=*$' || true)
  count=$(grep -c '' <<<"$names" || true)
  if [[ $count -lt 1 ]]; then
    echo "FAIL: $exe lists no test case"
    bad=1
  fi
  while IFS= read -r name; do
    echo "FAIL: $(basename "$exe"): a ';' in the test case name \"$name\" (ctest would run nothing)"
    bad=1
  done < <(grep ';' <<<"$names" || true)
  echo "$(basename "$exe"): $count test case names"
done
exit "$bad"
