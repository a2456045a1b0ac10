# Summarises a cyclictest histogram (-h20000: 1 us buckets, one count column
# per thread; "# Histogram Overflows:" counts wake-ups of 20 ms or more) as
#   probe_wakeups=N probe_p99_ms=A probe_p999_ms=B probe_max_ms=C probe_over_2ms_pct=P
# Exits 1, printing probe_error=1, when it holds no wake-up.
# Used by bench/run (the probe step) and bench/machine_stops.
/^[0-9]+[ \t]/ { for (i = 2; i <= NF; i++) { n[$1 + 0] += $i; total += $i } }
/^# Histogram Overflows:/ { for (i = 4; i <= NF; i++) { over += $i; total += $i } }
/^# Max Latencies:/ { for (i = 4; i <= NF; i++) if ($i + 0 > max) max = $i + 0 }
END {
  if (total == 0) { print "probe_error=1"; exit 1 }
  late = over; for (us in n) if (us + 0 >= 2000) late += n[us]
  split("0.99 0.999", qs, " "); seen = 0; j = 1
  for (us = 0; us < 20000 && j <= 2; us++) {
    seen += n[us]
    while (j <= 2 && seen >= qs[j] * total) { q[j++] = us }
  }
  while (j <= 2) q[j++] = max
  printf "probe_wakeups=%d probe_p99_ms=%.3f probe_p999_ms=%.3f probe_max_ms=%.3f probe_over_2ms_pct=%.3f",
    total, q[1] / 1000, q[2] / 1000, max / 1000, 100 * late / total
}
