#!/bin/sh
# The exploring step of action.yml (a GitHub Actions composite action):
# explores with `hvsim explore $HVSIM_ARGS` against the baseline in
# ./hvsim-baseline if there is one, then makes this exploration the next
# baseline. Its exit status goes to the step's `status` output, not to the
# step (so the results are kept before the job fails); the exploration's
# directory to `report`.
#
# HVSIM names the hvsim binary (default: hvsim on the PATH). Under GitHub
# Actions hvsim itself annotates new bugs and writes the job summary.
set -u
hvsim=${HVSIM:-hvsim}
out=${HVSIM_OUT:-hvsim-out}
baseline="hvsim-baseline"
set --
[ -f "$baseline/report.json" ] && set -- --baseline "$baseline"
# HVSIM_ARGS is split into words as the action's user wrote them.
# shellcheck disable=SC2086
"$hvsim" explore --out "$out" --fail-on "${HVSIM_FAIL_ON:-new}" "$@" ${HVSIM_ARGS:-}
status=$?
report=
if [ -d "$out/latest" ]; then
  report=$(cd "$out/latest" && pwd -P)
  # The next baseline: this exploration's report (bugs/ for reference).
  rm -rf "$baseline.new" && mkdir -p "$baseline.new" \
    && cp "$report/report.json" "$baseline.new/" \
    && rm -rf "$baseline" && mv "$baseline.new" "$baseline"
fi
if [ -n "${GITHUB_OUTPUT:-}" ]; then
  echo "status=$status" >> "$GITHUB_OUTPUT"
  echo "report=$report" >> "$GITHUB_OUTPUT"
fi
echo "hvsim: explore exited $status; results in ${report:-(none)}"
exit 0
