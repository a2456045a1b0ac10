#!/usr/bin/env bash
# Shared helpers for the scripts in scripts/. Source it, do not run it:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# Sourcing sets SLUICE_ROOT (the repository root, found from this file's
# location so that it works in a tarball without .git) and SLUICE_SCRIPT (the
# calling script's name, used as the log prefix). It changes no shell options;
# each script sets `set -euo pipefail` itself.

# Run instead of sourced: explain, and honour the common --help/unknown-arg rule.
if [[ "${BASH_SOURCE[0]}" == "${0}" ]]; then
  set -euo pipefail
  echo "Usage: source scripts/lib.sh   (helpers for scripts/*; not a command)"
  case "${1:-}" in
    "" | -h | --help) exit 0 ;;
    *) exit 2 ;;
  esac
fi

if [[ -n "${SLUICE_LIB_SOURCED:-}" ]]; then
  return 0
fi
SLUICE_LIB_SOURCED=1

SLUICE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
SLUICE_SCRIPT="$(basename "${0}")"
# Git-ignored home of everything the scripts generate: server data, logs, env.
# shellcheck disable=SC2034  # used by the scripts that source this file
SLUICE_LOCAL="${SLUICE_ROOT}/.local"

# Colour only when writing to a terminal, so CI logs stay plain text.
if [[ -t 2 && -z "${NO_COLOR:-}" ]]; then
  _sl_red=$'\e[31m' _sl_yellow=$'\e[33m' _sl_bold=$'\e[1m' _sl_off=$'\e[0m'
else
  _sl_red='' _sl_yellow='' _sl_bold='' _sl_off=''
fi

# log MSG...   one progress line on stdout, prefixed with the script name.
log() { printf '%s[%s]%s %s\n' "${_sl_bold}" "${SLUICE_SCRIPT}" "${_sl_off}" "$*"; }
# warn MSG...  a warning on stderr; the script carries on.
warn() { printf '%s[%s] warning:%s %s\n' "${_sl_yellow}" "${SLUICE_SCRIPT}" "${_sl_off}" "$*" >&2; }
# err MSG...   an error on stderr; the caller decides whether to stop.
err() { printf '%s[%s] error:%s %s\n' "${_sl_red}" "${SLUICE_SCRIPT}" "${_sl_off}" "$*" >&2; }
# die MSG...   an error on stderr, then exit 1.
die() {
  err "$@"
  exit 1
}
# usage_error MSG...  a bad command line: say so, point at --help, exit 2.
usage_error() {
  err "$@"
  printf 'Run %s --help for usage.\n' "${SLUICE_SCRIPT}" >&2
  exit 2
}

# need_cmd CMD [HINT]  exit 1 unless CMD is on PATH; HINT says how to get it.
need_cmd() {
  if ! command -v "$1" >/dev/null 2>&1; then
    die "required command '$1' not found${2:+ ($2)}; run scripts/bootstrap"
  fi
}

# is_ci  true when running under CI (CI=true or CI=1, as most CI systems set).
is_ci() {
  case "${CI:-}" in
    true | TRUE | True | 1 | yes) return 0 ;;
    *) return 1 ;;
  esac
}

# is_root  true when the effective user is root.
is_root() { [[ "$(id -u)" -eq 0 ]]; }

# as_root CMD...  run CMD as root: directly when root, else through sudo
# (non-interactive when there is no terminal, so CI fails instead of hanging).
as_root() {
  if is_root; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    if [[ -t 0 ]]; then
      sudo "$@"
    else
      sudo -n "$@"
    fi
  else
    die "need root for '$*' but not root and sudo is not installed"
  fi
}

# port_open HOST PORT  true when something accepts TCP connections there.
# Uses bash's /dev/tcp so that it needs neither ss nor nc.
port_open() {
  (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

# wait_for_port HOST PORT TIMEOUT_SECONDS  poll until the port accepts
# connections; false on timeout.
wait_for_port() {
  local host="$1" port="$2" timeout="$3" deadline
  deadline=$((SECONDS + timeout))
  until port_open "${host}" "${port}"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# wait_until TIMEOUT_SECONDS CMD...  run CMD every 0.2 s until it succeeds;
# false on timeout.
wait_until() {
  local timeout="$1" deadline
  shift
  deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# proc_running PID [NAME]  true when PID is a live process (not a zombie
# awaiting its reaper, which still answers kill -0) whose command name is
# NAME, if given, so that a reused pid is not mistaken for our server.
proc_running() {
  local pid="$1" name="${2:-}" stat comm
  [[ "${pid}" =~ ^[0-9]+$ ]] && kill -0 "${pid}" 2>/dev/null || return 1
  if [[ -r "/proc/${pid}/stat" ]]; then
    stat="$(<"/proc/${pid}/stat")" || return 1
    stat="${stat##*) }"
    [[ "${stat%% *}" != Z ]] || return 1
  fi
  if [[ -n "${name}" && -r "/proc/${pid}/comm" ]]; then
    comm="$(<"/proc/${pid}/comm")" || return 1
    [[ "${comm}" == "${name}" ]] || return 1
  fi
}

# pid_alive PIDFILE [NAME]  true when PIDFILE names a running process (see
# proc_running for NAME).
pid_alive() {
  [[ -s "$1" ]] || return 1
  proc_running "$(<"$1")" "${2:-}"
}

# wait_pid_gone PIDFILE TIMEOUT_SECONDS [NAME]  poll until the process in
# PIDFILE has exited (or the file is gone); false on timeout.
wait_pid_gone() {
  local pidfile="$1" timeout="$2" name="${3:-}" deadline
  deadline=$((SECONDS + timeout))
  while pid_alive "${pidfile}" "${name}"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# show_log_tail FILE [LINES]  print the end of a server log to stderr, framed,
# so that a failed start says why.
show_log_tail() {
  local file="$1" lines="${2:-30}"
  if [[ -f "${file}" ]]; then
    printf -- '----- last %s lines of %s -----\n' "${lines}" "${file}" >&2
    tail -n "${lines}" "${file}" >&2
    printf -- '----- end of %s -----\n' "${file}" >&2
  else
    printf -- '(no log at %s)\n' "${file}" >&2
  fi
}
