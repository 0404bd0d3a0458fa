#!/usr/bin/env bash
# Slurm epilog (runs as root on each node after the job ends): publishes the
# final job state when the SDK could not (killed job, node failure) and drops
# the job's entries from the agent's allocation file. When both arrive, the run
# summary and `runwatch slo` keep the SDK's own final JobEvent (it came after the
# run's latest running one); the processor's live state takes the later one.
# RUNWATCH_EMIT_TIMEOUT: seconds to wait for delivery (default 5), as the prolog.
set -u
[ -r /etc/default/runwatch ] && . /etc/default/runwatch
RUNWATCH=${RUNWATCH:-/opt/runwatch/bin/runwatch}
RUN_ID="${RUNWATCH_RUN_ID:-slurm-${SLURM_CLUSTER_NAME:-cluster}-${SLURM_JOB_ID}}"
ALLOC_DIR=${RUNWATCH_ALLOC_DIR:-/run/runwatch}

# SLURM_JOB_EXIT_CODE2 is "exit:signal" in recent Slurm versions; older ones give only
# SLURM_JOB_EXIT_CODE, a wait status (exit code in the high byte, signal in the low bits)
CODE2="${SLURM_JOB_EXIT_CODE2:-}"
if [ -z "$CODE2" ] && [ -n "${SLURM_JOB_EXIT_CODE:-}" ]; then
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
ATTEMPT=$(( ${SLURM_JOB_RESTART_COUNT:-${SLURM_RESTART_COUNT:-0}} + 1 ))
"$RUNWATCH" emit job-state --run-id "$RUN_ID" --state "$STATE" --reason "$REASON" \
  --attempt "$ATTEMPT" \
  --event-id "$RUN_ID-end-$ATTEMPT" \
  --timeout "${RUNWATCH_EMIT_TIMEOUT:-5}" >/dev/null 2>&1 || true

rm -f "$ALLOC_DIR/slurm-$SLURM_JOB_ID.json"
python3 - "$ALLOC_DIR" <<'PY'
import glob, json, os, sys
d = sys.argv[1]
entries = [e for f in sorted(glob.glob(os.path.join(d, "slurm-*.json"))) for e in json.load(open(f))]
tmp = os.path.join(d, f"allocation.json.{os.getpid()}.tmp")  # two jobs' hooks at once
json.dump(entries, open(tmp, "w")); os.replace(tmp, os.path.join(d, "allocation.json"))
PY
exit 0
