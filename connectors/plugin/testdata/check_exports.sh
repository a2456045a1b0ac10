#!/bin/sh
# check_exports.sh NM LIBRARY...: fails unless each library's dynamic symbol
# table defines exactly one symbol, sluice_plugin_entry.
nm=$1
shift
status=0
for lib in "$@"; do
  defined=$("$nm" -D --defined-only "$lib" | awk '{print $NF}')
  if [ "$defined" != "sluice_plugin_entry" ]; then
    echo "$lib exports more than sluice_plugin_entry:"
    echo "$defined"
    status=1
  fi
done
exit $status
