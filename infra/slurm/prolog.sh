#!/usr/bin/env bash
# Slurm prolog (runs as root on each allocated node before the job starts).
# Publishes JobEvent(running->scheduled) for the job and writes the GPU -> run
# allocation file the runwatch agent reads for process attribution.
#
# slurm.conf:   Prolog=/etc/slurm/runwatch-prolog.sh
#               Epilog=/etc/slurm/runwatch-epilog.sh
# Environment:  KAFKA_BOOTSTRAP_SERVERS (and KAFKA_* TLS/SASL settings) in
#               /etc/default/runwatch, read below. RUNWATCH_EMIT_TIMEOUT: seconds
#               the hook waits for delivery (default 5; with the broker away the
#               event spools and the hook waits that long, never failing the job).
set -u
[ -r /etc/default/runwatch ] && . /etc/default/runwatch
RUNWATCH=${RUNWATCH:-/opt/runwatch/bin/runwatch}
RUN_ID="${RUNWATCH_RUN_ID:-slurm-${SLURM_CLUSTER_NAME:-cluster}-${SLURM_JOB_ID}}"
ALLOC_DIR=${RUNWATCH_ALLOC_DIR:-/run/runwatch}
mkdir -p "$ALLOC_DIR"

# GPUs of this job on this node (Slurm sets SLURM_JOB_GPUS / CUDA_VISIBLE_DEVICES)
GPUS="${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}"
if [ -n "$GPUS" ]; then
  python3 - "$ALLOC_DIR/slurm-$SLURM_JOB_ID.json" "$RUN_ID" "$GPUS" <<'PY'
import json, sys
path, run, gpus = sys.argv[1], sys.argv[2], sys.argv[3]
json.dump([{"run_id": run, "gpus": [int(g) for g in gpus.split(",") if g.strip().isdigit()]}],
          open(path, "w"))
PY
  # the agent reads one file: merge every job's entries on this node
  python3 - "$ALLOC_DIR" <<'PY'
import glob, json, os, sys
d = sys.argv[1]
entries = [e for f in sorted(glob.glob(os.path.join(d, "slurm-*.json"))) for e in json.load(open(f))]
tmp = os.path.join(d, f"allocation.json.{os.getpid()}.tmp")  # two jobs' hooks at once
json.dump(entries, open(tmp, "w")); os.replace(tmp, os.path.join(d, "allocation.json"))
PY
fi

# The prolog runs on every node of the job: each sends the whole allocation (every node,
# from the job's node list, a hostlist emit expands) and the same event id, so the copies
# are one event downstream; naming only its own node, each would replace the others'.
# Without a node list in the environment the event names this node, under an id of its own.
# JobEvent.attempt is 1-based; Slurm counts restarts from 0 (the prolog's variable is
# SLURM_JOB_RESTART_COUNT; SLURM_RESTART_COUNT is the job step's).
ATTEMPT=$(( ${SLURM_JOB_RESTART_COUNT:-${SLURM_RESTART_COUNT:-0}} + 1 ))
NODES="${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-}}"
EVENT_ID="$RUN_ID-scheduled-$ATTEMPT"
if [ -z "$NODES" ]; then
  NODES="$(hostname -s)"
  EVENT_ID="$EVENT_ID-$NODES"
fi
# never fail the job because telemetry is unreachable: emit spools locally
"$RUNWATCH" emit job-state --run-id "$RUN_ID" --state scheduled \
  --queue "${SLURM_JOB_PARTITION:-}" --attempt "$ATTEMPT" \
  --nodes "$NODES" --gpus "$GPUS" \
  --event-id "$EVENT_ID" \
  --timeout "${RUNWATCH_EMIT_TIMEOUT:-5}" >/dev/null 2>&1 || true
exit 0
