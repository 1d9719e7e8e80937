# Sourced by a CPU benchmark script (`source "$(dirname "$0")/bench_env.sh"`): strict mode, the
# repository root as the working folder, a scratch folder $work removed on exit, one OpenMP and
# BLAS thread per rank, and $tessera, the binary to run (TESSERA, else build/tessera).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tessera=${TESSERA:-build/tessera}
