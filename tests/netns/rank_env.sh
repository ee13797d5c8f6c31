#!/usr/bin/env bash
# rank_env.sh: turns the numbering chorus-run gives a rank (its host's job: CHORUS_RANK =
# CHORUS_LOCAL_RANK, CHORUS_NRANKS = ranks of this host, a secret of its own) into the numbering
# of the whole multi-host job, then runs the program:
#
#   CHORUS_RANK       = CHORUS_NETNS_RANK_OFFSET + CHORUS_LOCAL_RANK
#   CHORUS_NRANKS     = CHORUS_NETNS_NRANKS
#   CHORUS_JOB_SECRET = CHORUS_NETNS_JOB_SECRET (one secret for every host)
#
# CHORUS_ROOT (--root-host/--port), CHORUS_LOCAL_RANK and CHORUS_LOCAL_NRANKS are already right.
# run_job.sh starts it as `chorus-run -n R -- rank_env.sh prog args...`; it is needed only until
# chorus-run can be told a rank offset, the job's size and its secret (see README.md).
set -euo pipefail
: "${CHORUS_LOCAL_RANK:?rank_env.sh runs under chorus-run}"
export CHORUS_RANK=$((CHORUS_NETNS_RANK_OFFSET + CHORUS_LOCAL_RANK))
export CHORUS_NRANKS=$CHORUS_NETNS_NRANKS
export CHORUS_JOB_SECRET=$CHORUS_NETNS_JOB_SECRET
exec "$@"
