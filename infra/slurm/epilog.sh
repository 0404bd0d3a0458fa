#!/usr/bin/env bash
# Slurm epilog (runs as root on each node after the job ends): publishes the
# final job state when the SDK could not (killed job, node failure) and drops
# the job's entries from the agent's allocation file. When both arrive, the run
# summary and `runwatch slo` keep the SDK's own final JobEvent (it came after the
# run's latest running one); the processor's live state takes the later one.
# RUNWATCH_EMIT_TIMEOUT: seconds to wait for delivery (default 5), as the prolog;
# /etc/default/runwatch is read and exported as the prolog reads it.
set -u
trap 'exit 0' EXIT  # whatever goes wrong here: a failing epilog drains the node
# the site's settings (KEY=VALUE lines, as systemd's EnvironmentFile=): exported, so that
# `runwatch emit` sees them (read without -a, they stayed the script's own variables)
DEFAULTS="${RUNWATCH_DEFAULTS_FILE:-/etc/default/runwatch}"
if [ -r "$DEFAULTS" ]; then set -a; . "$DEFAULTS"; set +a; fi
RUNWATCH=${RUNWATCH:-/opt/runwatch/bin/runwatch}
JOB_ID="${SLURM_JOB_ID:-}"
RUN_ID="${RUNWATCH_RUN_ID:-slurm-${SLURM_CLUSTER_NAME:-cluster}-${JOB_ID}}"
ALLOC_DIR=${RUNWATCH_ALLOC_DIR:-/run/runwatch}

# SLURM_JOB_EXIT_CODE2 is "exit:signal" in recent Slurm versions; older ones give only
# SLURM_JOB_EXIT_CODE, a wait status (exit code in the high byte, signal in the low bits)
CODE2="${SLURM_JOB_EXIT_CODE2:-}"
if [ -z "$CODE2" ] && [[ "${SLURM_JOB_EXIT_CODE:-}" =~ ^[0-9]+$ ]]; then
  CODE2="$(( SLURM_JOB_EXIT_CODE >> 8 )):$(( SLURM_JOB_EXIT_CODE & 127 ))"
fi
CODE2="${CODE2:-0:0}"
STATE=succeeded
REASON="exit $CODE2"
case "$CODE2" in
  0:0) STATE=succeeded ;;
  *:9|*:15) STATE=cancelled ;;
  *) STATE=failed ;;
esac

# JobEvent.attempt is 1-based; Slurm counts restarts from 0. One event id for the job's
# nodes: every node's epilog sends the same end.
RESTARTS="${SLURM_JOB_RESTART_COUNT:-${SLURM_RESTART_COUNT:-0}}"
[[ "$RESTARTS" =~ ^[0-9]+$ ]] || RESTARTS=0
ATTEMPT=$(( RESTARTS + 1 ))
if [ -n "$JOB_ID" ] || [ -n "${RUNWATCH_RUN_ID:-}" ]; then
  "$RUNWATCH" emit job-state --run-id "$RUN_ID" --state "$STATE" --reason "$REASON" \
    --attempt "$ATTEMPT" \
    --event-id "$RUN_ID-end-$ATTEMPT" \
    --timeout "${RUNWATCH_EMIT_TIMEOUT:-5}" >/dev/null 2>&1 || true
else
  echo "runwatch epilog: no SLURM_JOB_ID, nothing sent" >&2
fi

[ -n "$JOB_ID" ] && rm -f "$ALLOC_DIR/slurm-$JOB_ID.json"
# every job's entries on this node (a file that cannot be read is left out and named)
[ -d "$ALLOC_DIR" ] && python3 - "$ALLOC_DIR" <<'PY'
import glob, json, os, sys
d, entries = sys.argv[1], []
for f in sorted(glob.glob(os.path.join(d, "slurm-*.json"))):
    try:
        with open(f) as fh:
            entries += json.load(fh)
    except (OSError, ValueError) as exc:
        print(f"runwatch: left out {f}: {exc}", file=sys.stderr)
tmp = os.path.join(d, f"allocation.json.{os.getpid()}.tmp")  # two jobs' hooks at once
with open(tmp, "w") as fh:
    json.dump(entries, fh)
os.replace(tmp, os.path.join(d, "allocation.json"))
PY
exit 0
