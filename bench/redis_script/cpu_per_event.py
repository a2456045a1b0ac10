#!/usr/bin/env python3
"""Redis CPU per event of a version check script, outside sluice.

Loads each SCRIPT given with SCRIPT LOAD and sends it the sink's calls
(on keys named sluice-bench-script:N, deleted before each run and at the end):
EVALSHA of --per-call events (json format, no TTL, guard '>') over
--entities keys, --versions versions each in the backlog's order (every key
new, then every key updated, ...), pipelined --depth calls deep. Prints per
script Redis's CPU per event (/proc/PID/stat of the server, so run it on the
server's host) and its time inside EVALSHA per event (INFO commandstats).
Run the scripts alternately (--rounds) on a busy machine: single runs move
by about 10%.

  bench/redis_script/cpu_per_event.py connectors/redis/version_check.lua
  git show e251662:connectors/redis/version_check.lua > /tmp/old.lua
  bench/redis_script/cpu_per_event.py --argv6 none /tmp/old.lua connectors/redis/version_check.lua

--argv6: what the script gets as ARGV[6] ('0': no key repeats in a call,
as the sink sends for these calls; 'none': nothing, for scripts from before
that argument; a script is given none when its file has no ARGV[6]).
"""

import argparse
import os
import socket
import time


class Resp:
    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port))
        self.file = self.sock.makefile("rb")

    @staticmethod
    def encode(*args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, str):
                a = a.encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind in (b"+", b":"):
            return rest
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2]
        if kind == b"*":
            return [self.read() for _ in range(int(rest))]
        raise RuntimeError("unexpected reply %r" % line)

    def call(self, *args):
        self.sock.sendall(self.encode(*args))
        return self.read()


PREFIX = "sluice-bench-script:"


def drop_keys(r):
    """Deletes this tool's keys (values and tombstones), and only those."""
    cursor = b"0"
    while True:
        cursor, keys = r.call("SCAN", cursor, "MATCH", PREFIX + "*", "COUNT", "1000")
        if keys:
            r.call("UNLINK", *keys)
        if cursor == b"0":
            return


def value(entity, version):
    return ('{"_version":%d,"balance":%d,"note":"v%d of %d abcdefghijklmnopqrstuvwxyz0123456","owner":"o%d"}'
            % (version, (entity * 7919 + version * 104729) % 1000000, version, entity, entity % 1000))


def run(r, path, args, pid):
    text = open(path, "rb").read()
    argv6 = [] if args.argv6 == "none" or b"ARGV[6]" not in text else [args.argv6]
    drop_keys(r)
    sha = r.call("SCRIPT", "LOAD", text).decode()
    calls = []
    for v in range(1, args.versions + 1):
        for first in range(0, args.entities, args.per_call):
            ks = range(first, min(args.entities, first + args.per_call))
            argv = ["j", "0", "0", ":_tomb", ">"] + argv6
            for k in ks:
                argv += [str(v), value(k, v)]
            calls.append(Resp.encode("EVALSHA", sha, str(len(ks)), *[PREFIX + str(k) for k in ks], *argv))
    r.call("CONFIG", "RESETSTAT")
    cpu0, t0 = cpu_seconds(pid), time.time()
    for i in range(0, len(calls), args.depth):
        r.sock.sendall(b"".join(calls[i:i + args.depth]))
        for _ in calls[i:i + args.depth]:
            reply = r.read()
            if isinstance(reply, list) and any(x != b"1" for x in reply):
                raise RuntimeError("%s: an event was not applied" % path)
    cpu1, t1 = cpu_seconds(pid), time.time()
    stats = r.call("INFO", "commandstats").decode()
    usec = int(stats.split("cmdstat_evalsha:")[1].split("usec=")[1].split(",")[0])
    n = args.entities * args.versions
    print("%s: %d events, redis %.2f us/event (in EVALSHA %.2f), %d events/s"
          % (path, n, (cpu1 - cpu0) * 1e6 / n, usec / n, n / (t1 - t0)), flush=True)


def cpu_seconds(pid):
    fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("scripts", nargs="+")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=int(os.environ.get("SLUICE_REDIS_PORT", "16379")))
    p.add_argument("--entities", type=int, default=100000)
    p.add_argument("--versions", type=int, default=10)
    p.add_argument("--per-call", type=int, default=100, help="events per EVALSHA (the sink's kEventsPerCall)")
    p.add_argument("--depth", type=int, default=8, help="calls per round trip")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--argv6", default="0")
    args = p.parse_args()
    r = Resp(args.host, args.port)
    pid = int(r.call("INFO", "server").decode().split("process_id:")[1].split()[0])
    for _ in range(args.rounds):
        for path in args.scripts:
            run(r, path, args, pid)
    drop_keys(r)


if __name__ == "__main__":
    main()
