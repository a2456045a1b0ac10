#!/bin/sh
# check_next_header.sh REAL NEXT: fails unless NEXT (testdata/abi_next's test
# header) is REAL (include/sluice/plugin.h) plus its 4-line banner, its own
# minor version and the fields marked "1.4, test", so that the newer-header
# test keeps testing today's ABI.
real=$(mktemp)
next=$(mktemp)
grep -v -e '^#define SLUICE_PLUGIN_ABI_MINOR ' "$1" > "$real"
tail -n +5 "$2" | grep -v -e '1\.4, test' -e '^#define SLUICE_PLUGIN_ABI_MINOR ' > "$next"
diff -u "$real" "$next"
status=$?
rm -f "$real" "$next"
[ $status -eq 0 ] || echo "$2 is not $1 plus the 1.4 test fields: update it"
exit $status
