#!/usr/bin/env bash
# Every user-facing script of the repository parses (bash -n) and answers
# --help with exit 0 and some text. Benchmark scripts run by hand only, so a
# syntax error in one would otherwise surface on its next run.
# Usage: tests/check_scripts.sh REPOSITORY_ROOT
set -uo pipefail
root="${1:?usage: check_scripts.sh REPOSITORY_ROOT}"
scripts=(scripts/bootstrap scripts/demo scripts/services scripts/test .ci/run fuzz/run_fuzzer
  bench/run_engine_bench bench/run_kafka_bench bench/run_push_bench bench/run_writer_bench bench/thread_cpu bench/machine_stops)
failed=0
for s in "${scripts[@]}"; do
  f="${root}/${s}"
  if ! bash -n "${f}"; then
    echo "FAIL ${s}: does not parse"
    failed=1
    continue
  fi
  out="$(timeout 60 bash "${f}" --help 2>&1)"
  rc=$?
  if ((rc != 0)) || [[ -z "${out}" ]]; then
    echo "FAIL ${s}: --help exited ${rc} with ${#out} bytes of output"
    failed=1
    continue
  fi
  echo "ok   ${s}"
done
exit "${failed}"
