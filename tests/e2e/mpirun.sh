#!/bin/sh
# Runs an MPI program quietly on one machine, as root or not:
#   tests/e2e/mpirun.sh -np N prog args...
# Oversubscribes (tests use more ranks than cores) and keeps Open MPI to the
# shared-memory and self transports, so no network probing or warnings.
#
# Each launch gets a session directory of its own. Open MPI 4.1 puts every
# job's under one shared $TMPDIR/ompi.HOST.UID, which the last job out
# removes; when two jobs start while it is missing, one's mkdir finds it
# made by the other ("A call to mkdir was unable to create the desired
# directory ... File exists", orte_init failed) and the launch fails
# before the program runs: the e2e suite's occasional start-up failures
# under parallel load (8 lanes of concurrent launches: 1 in ~1,800 failed
# so, 0 in 800 with a directory each). The directory is made under
# OMPI_MCA_orte_tmpdir_base when set (tests/e2e/run.sh gives each script
# one and removes it after), else $TMPDIR or /tmp, where empty ones left
# by earlier launches are removed. mpirun is exec'd (tests find the ranks
# as its children), so nothing runs after it here to remove its own.
set -e
# the transports, hwloc, yielding (tests/e2e/mpi_env.sh)
. "$(dirname "$0")/mpi_env.sh"
export OMPI_MCA_rmaps_base_oversubscribe=1
parent=${OMPI_MCA_orte_tmpdir_base:-${TMPDIR:-/tmp}}
# empty ones over a minute old: a launch fills its own within a second
# (a job killed leaves its files: those stay, as Open MPI's own would)
find "$parent" -mindepth 1 -maxdepth 1 -type d -name 'netc-mpi.*' -empty -mmin +1 -exec rmdir {} + 2>/dev/null || true
OMPI_MCA_orte_tmpdir_base=$(mktemp -d "$parent/netc-mpi.XXXXXX")
export OMPI_MCA_orte_tmpdir_base
exec mpirun --oversubscribe "$@"
