# lib-slurm.sh - a one-node Slurm for tests (scripts/slurm-local), sourced by
# tests/cli/t91*.sh after lib.sh.
#
#   slurm_start     start munged, slurmctld and slurmd in a scratch directory
#                   and export SLURM_CONF; skip_all with the reason when they
#                   cannot start (not root, packages missing). Stopped at exit.
#   slurm_wait JOB  wait until the job has left the queue (timeout 300 s)

SLURM_DIR=

slurm_stop() {
	[ -n "$SLURM_DIR" ] || return 0
	scancel --full -u root >/dev/null 2>&1
	"$GK_TOP/scripts/slurm-local" stop "$SLURM_DIR"
	# Slurm's own logs stay with the test's (a failed test keeps its trash
	# directory): a job that failed to launch says why only there.
	cp -r "$SLURM_DIR/log" slurm-log 2>/dev/null
	rm -rf "$SLURM_DIR"
	SLURM_DIR=
}

slurm_start() {
	if [ "$(id -u)" -ne 0 ]; then
		skip_all="a local Slurm needs root"
		test_done
	fi
	if ! "$GK_TOP/scripts/slurm-local" check; then
		skip_all="slurm-wlm and munge are not installed (scripts/install-deps)"
		test_done
	fi
	# No spaces in Slurm's paths (sharness' trash directory has one).
	SLURM_DIR=$(mktemp -d /tmp/gk-slurm-XXXXXX)
	trap 'slurm_stop' EXIT
	trap 'slurm_stop; exit 130' INT
	trap 'slurm_stop; exit 143' TERM
	if ! out=$("$GK_TOP/scripts/slurm-local" start "$SLURM_DIR" 2>&1); then
		skip_all="the local Slurm did not start: $(echo "$out" | tail -n 1)"
		test_done
	fi
	eval "$out"
	# Jobs run the freshly built tools.
	PATH="$GK_TOP/bin:$PATH"
	export PATH
}

slurm_wait() {
	i=0
	while squeue -h -j "$1" 2>/dev/null | grep -q .; do
		i=$((i + 1))
		[ "$i" -lt 600 ] || { echo "slurm_wait: job $1 still queued after 300 s" >&2; return 1; }
		sleep 0.5
	done
}
