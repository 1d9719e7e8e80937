#!/bin/sh
# Runs mpirun ("$@") with a session directory base of its own, removed afterwards. Open MPI's
# default one, /tmp/ompi.<host>.<uid>, is shared by every job and created and removed by each:
# under `ctest -j2` one job can remove it while another creates its own, which then fails to
# start ("orte_session_dir failed", open-mpi/ompi#8510).
dir=$(mktemp -d /tmp/tessera-mpi-XXXXXX) || exit 1
OMPI_MCA_orte_tmpdir_base=$dir "$@"
status=$?
rm -rf "$dir"
exit $status
