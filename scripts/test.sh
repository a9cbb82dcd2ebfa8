#!/usr/bin/env bash
# `make test`'s body: the whole pytest suite and, beside it, `make e2e` (the platform under
# docker compose). Usage: scripts/test.sh [pytest args]; E2E=0 leaves e2e out (a machine with no
# Docker Engine).
#
# Why beside and not after: on a 2-core CI machine the suite takes most of the 45-minute budget,
# and e2e's ~6 min cold are mostly waiting (debootstrap, wheel downloads, image layers, health
# checks), so run together they cost little more than the suite alone. The suite is built to pass
# with every core busy (scripts/stress_test.sh), and e2e publishes only ephemeral loopback ports
# under its own compose project, so neither sees the other.
#
# The suite runs on PYTEST_WORKERS pytest-xdist workers (default 2, one per core of a CI machine;
# 0 runs it in this process), a whole test file per worker (--dist loadfile) so module fixtures
# start once. Tests wait on conditions, not fixed sleeps, and use private ports, data dirs and
# databases, so two files at once see neither each other nor the stack beside them.
#
# e2e's output goes to a log that is printed once the suite is done; then each part's time, the
# whole and e2e's share of it. The exit status is the suite's, or e2e's if the suite passed.
set -uo pipefail
cd "$(dirname "$0")/.."
E2E=${E2E:-1}
WORKERS=${PYTEST_WORKERS:-2}
LOG=${TMPDIR:-/tmp}/k3stack-test-e2e.log
start=$(date +%s)
e2e_pid=

stop_e2e() { # an interrupted run takes its stack down (e2e.sh's EXIT trap runs `down -v`)
  [[ -n $e2e_pid ]] && kill -TERM -- "-$e2e_pid" 2>/dev/null
  [[ -n $e2e_pid ]] && wait "$e2e_pid" 2>/dev/null
  exit 130
}

if [[ $E2E != 0 ]]; then
  # The engine once, before either side could start it (both would otherwise race to).
  bash scripts/setup_docker.sh || { echo "make test: no Docker Engine (E2E=0 skips e2e)" >&2; exit 1; }
  echo "make test: e2e runs beside the suite; its log: $LOG (printed when the suite is done)"
  setsid bash -c 'bash scripts/e2e.sh >"$1" 2>&1; rc=$?; date +%s >"$1.end"; exit $rc' _ "$LOG" &
  e2e_pid=$!
  trap stop_e2e INT TERM
fi

opts=(--durations=30)  # the slowest tests, for whoever trims the suite next
[[ $WORKERS != 0 ]] && opts+=(-n "$WORKERS" --dist loadfile)
.venv/bin/pytest "${opts[@]}" "$@"
suite_rc=$?
suite_end=$(date +%s)
suite_s=$((suite_end - start))

if [[ $E2E == 0 ]]; then
  echo "make test: suite ${suite_s} s (E2E=0: e2e left out)"
  exit $suite_rc
fi

[[ -f $LOG.end ]] || echo "make test: the suite is done; waiting for e2e"
wait "$e2e_pid"
e2e_rc=$?
trap - INT TERM
end=$(date +%s)
e2e_end=$(cat "$LOG.end" 2>/dev/null || echo "$end")
e2e_s=$((e2e_end - start))
total=$((end - start))
echo "================================ e2e (make e2e) ================================"
cat "$LOG"
echo "make test: suite ${suite_s} s (rc ${suite_rc}); e2e ${e2e_s} s beside it (rc ${e2e_rc});" \
  "whole ${total} s; e2e's share of the whole: $((100 * e2e_s / (total > 0 ? total : 1)))%," \
  "of which $((end > suite_end ? end - suite_end : 0)) s after the suite"
rm -f "$LOG.end"
[[ $suite_rc != 0 ]] && exit $suite_rc
exit $e2e_rc
