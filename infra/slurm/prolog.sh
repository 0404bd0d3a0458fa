#!/usr/bin/env bash
# Slurm prolog (runs as root on each allocated node before the job starts).
# Publishes JobEvent(running->scheduled) for the job and writes the GPU -> run
# allocation file the runwatch agent reads for process attribution.
#
# slurm.conf:   Prolog=/etc/slurm/runwatch-prolog.sh
#               Epilog=/etc/slurm/runwatch-epilog.sh
# Environment:  KAFKA_BOOTSTRAP_SERVERS (and KAFKA_* TLS/SASL settings) in
#               /etc/default/runwatch (KEY=VALUE lines, as systemd's EnvironmentFile=),
#               read and exported below. RUNWATCH_EMIT_TIMEOUT: seconds the hook waits
#               for delivery (default 5; with the broker away the event spools and the
#               hook waits that long, plus the command's start-up of a second or two,
#               never failing the job).
set -u
trap 'exit 0' EXIT  # whatever goes wrong here, the job starts: a failing prolog drains the node
# the site's settings (KEY=VALUE lines, as systemd's EnvironmentFile=): exported, so that
# `runwatch emit` sees them (read without -a, they stayed the script's own variables)
DEFAULTS="${RUNWATCH_DEFAULTS_FILE:-/etc/default/runwatch}"
if [ -r "$DEFAULTS" ]; then set -a; . "$DEFAULTS"; set +a; fi
RUNWATCH=${RUNWATCH:-/opt/runwatch/bin/runwatch}
JOB_ID="${SLURM_JOB_ID:-}"
if [ -z "$JOB_ID" ] && [ -z "${RUNWATCH_RUN_ID:-}" ]; then
  echo "runwatch prolog: no SLURM_JOB_ID, nothing sent" >&2
  exit 0
fi
RUN_ID="${RUNWATCH_RUN_ID:-slurm-${SLURM_CLUSTER_NAME:-cluster}-${JOB_ID}}"
ALLOC_DIR=${RUNWATCH_ALLOC_DIR:-/run/runwatch}
mkdir -p "$ALLOC_DIR"

# GPUs of this job on this node (Slurm sets SLURM_JOB_GPUS / CUDA_VISIBLE_DEVICES): indices
# and ranges ("0,1,4-7"). Names (GPU-<uuid>, MIG-<uuid>) are no indices: the event then names
# the nodes only and the agent's allocation file no GPUs (samples reach the run by its
# processes' RUNWATCH_RUN_ID, which submit-example.sbatch exports); a list emit refuses would
# lose the event.
GPUS="${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}"
if [[ "$GPUS" =~ ^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$ ]]; then
  GPUS="$(python3 -c 'import sys
idx = set()
for part in sys.argv[1].split(","):
    lo, _, hi = part.partition("-")
    idx.update(range(int(lo), int(hi or lo) + 1))
print(",".join(map(str, sorted(idx))))' "$GPUS")"
else
  [ -n "$GPUS" ] && echo "runwatch prolog: GPU list '$GPUS' holds no indices, not sent" >&2
  GPUS=""
fi
if [ -n "$GPUS" ] && [ -n "$JOB_ID" ]; then
  # written whole or not at all: a hook killed mid-write leaves no half file to merge
  python3 - "$ALLOC_DIR/slurm-$JOB_ID.json" "$RUN_ID" "$GPUS" <<'PY'
import json, os, sys
path, run, gpus = sys.argv[1], sys.argv[2], sys.argv[3]
tmp = f"{path}.{os.getpid()}.tmp"
with open(tmp, "w") as f:
    json.dump([{"run_id": run, "gpus": [int(g) for g in gpus.split(",")]}], f)
os.replace(tmp, path)
PY
fi
# the agent reads one file: merge every job's entries on this node (a file that cannot be
# read is left out and named, not the end of every later job's attribution)
python3 - "$ALLOC_DIR" <<'PY'
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

# The prolog runs on every node of the job: each sends the whole allocation (every node,
# from the job's node list, a hostlist emit expands) and the same event id, so the copies
# are one event downstream; naming only its own node, each would replace the others'.
# Without a node list in the environment the event names this node, under an id of its own.
# JobEvent.attempt is 1-based; Slurm counts restarts from 0 (the prolog's variable is
# SLURM_JOB_RESTART_COUNT; SLURM_RESTART_COUNT is the job step's).
RESTARTS="${SLURM_JOB_RESTART_COUNT:-${SLURM_RESTART_COUNT:-0}}"
[[ "$RESTARTS" =~ ^[0-9]+$ ]] || RESTARTS=0
ATTEMPT=$(( RESTARTS + 1 ))
NODES="${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-}}"
EVENT_ID="$RUN_ID-scheduled-$ATTEMPT"
if [ -z "$NODES" ]; then
  NODES="$(hostname -s)"
  EVENT_ID="$EVENT_ID-$NODES"
fi
ARGS=(--run-id "$RUN_ID" --state scheduled --attempt "$ATTEMPT" --nodes "$NODES"
      --event-id "$EVENT_ID" --timeout "${RUNWATCH_EMIT_TIMEOUT:-5}")
[ -n "${SLURM_JOB_PARTITION:-}" ] && ARGS+=(--queue "$SLURM_JOB_PARTITION")
[ -n "$GPUS" ] && ARGS+=(--gpus "$GPUS")
# never fail the job because telemetry is unreachable: emit spools locally
"$RUNWATCH" emit job-state "${ARGS[@]}" >/dev/null 2>&1 || true
exit 0
