#!/bin/sh
test_description='lib/comm against MPI in worlds of 1 to 5 ranks

Runs the TAP program build/tests/unit/comm_world under
mpirun --oversubscribe -np N: every algorithm, dtype, op, in- and
out-of-place, odd, zero and smaller-than-world counts against
MPI_Allreduce; reduce-scatter, allgather, broadcast against MPI;
non-blocking requests; compressed allreduce within its bounds.'
. "$(dirname "$0")/lib.sh"

prog="$GK_BUILD/tests/unit/comm_world"
if ! command -v mpirun >/dev/null 2>&1; then
	skip_all="no mpirun"
	test_done
fi
if ! test -x "$prog"; then
	skip_all="build/tests/unit/comm_world is not built (make check builds it)"
	test_done
fi

for n in 1 2 3 4 5; do
	test_expect_success "world of $n: every check passes on every rank" "
		timeout 300 mpirun --oversubscribe -np $n '$prog' >out.$n 2>err.$n &&
		grep '^# backend mpi, world $n$' out.$n &&
		grep '^1\.\.[0-9]' out.$n &&
		! grep '^not ok' out.$n
	"
done

test_done
