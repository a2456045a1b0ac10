#!/usr/bin/env bash
# Every user-facing script of the repository parses (bash -n, or Python's
# parser for a python3 script) and answers --help with exit 0 and some text,
# and every benchmark scenario parses (bench/run --check). Benchmark scripts
# run by hand only, so a syntax error in one would otherwise surface on its
# next run.
# Usage: tests/check_scripts.sh REPOSITORY_ROOT
set -uo pipefail
root="${1:?usage: check_scripts.sh REPOSITORY_ROOT}"
scripts=(scripts/bootstrap scripts/demo scripts/services scripts/test .ci/run fuzz/run_fuzzer fuzz/wait_build
  bench/run bench/thread_cpu bench/machine_stops)
failed=0
for s in "${scripts[@]}"; do
  f="${root}/${s}"
  interpreter=bash
  [[ "$(head -1 "${f}")" == *python3* ]] && interpreter=python3
  if [[ "${interpreter}" == python3 ]]; then
    parse=(python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "${f}")
  else
    parse=(bash -n "${f}")
  fi
  if ! "${parse[@]}"; then
    echo "FAIL ${s}: does not parse"
    failed=1
    continue
  fi
  out="$(timeout 60 "${interpreter}" "${f}" --help 2>&1)"
  rc=$?
  if ((rc != 0)) || [[ -z "${out}" ]]; then
    echo "FAIL ${s}: --help exited ${rc} with ${#out} bytes of output"
    failed=1
    continue
  fi
  echo "ok   ${s}"
done
if out="$(python3 "${root}/bench/run" --check 2>&1)"; then
  echo "ok   bench/scenarios/*.bench"
else
  echo "FAIL bench/scenarios: ${out}"
  failed=1
fi
exit "${failed}"
