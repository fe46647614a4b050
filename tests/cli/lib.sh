# lib.sh - sourced by every tests/cli/tNNNN-*.sh before sharness.
#
# Puts the freshly built tools first on PATH, keeps sharness's trash
# directories and each test's output (NAME.out, with what every test case
# ran and printed) under the build directory, and offers helpers:
#   test_need_python MODULE...   skip_all unless the test venv has them
#   GK_TOP, GK_PY                 the source tree, the venv's python
#   GK_BUILD, GK_BINDIR           the configuration under test: its build
#                                 directory (objects, test programs) and
#                                 the directory of its tools; `make check`
#                                 sets them (make O=DIR), by hand they
#                                 default to build/ and bin/
#   test_shared_dir NAME          ../shared/NAME, or skip_all when absent
#   test_help_options HELP        the options a --help output names
#   test_man_options PAGE [FROM]  the options a man page's .It lines name
#   test_options_take_args HELP TOOL [ARG...]  the rows --help shows with an
#                                 argument refuse to go without one
#   test_term_shim NAME           build term-shim.c (SIGTERM right after a
#                                 temp file named GK_TERM_AFTER is made) as
#                                 $term_shim, for LD_PRELOAD
#   test_commit DIR STEP          a COMMIT for step directory DIR (xxhsum)
#   test_wait_for SECS WHAT CMD...  wait for an event: CMD to succeed, at
#                                 most SECS, else say what was waited for
#   test_gpu_prereqs VAR          GPU (a GPU that nvidia-smi lists, with the
#                                 build's VAR, e.g. HAVE_CUDA, set to 1), GPUS
#                                 (two or more) or NOGPU; GK_GPUS the count

GK_TOP=$(cd "$(dirname "$0")/../.." && pwd)
GK_BUILD=${GK_BUILD:-$GK_TOP/build}
GK_BINDIR=${GK_BINDIR:-$GK_TOP/bin}
export GK_TOP GK_BUILD GK_BINDIR
SHARNESS_TEST_EXTENSION=sh
SHARNESS_TEST_DIRECTORY="$GK_BUILD/cli-tests"
SHARNESS_BUILD_DIRECTORY="$GK_BINDIR"
SHARNESS_TEST_SRCDIR="$GK_TOP/tests/cli"
export SHARNESS_TEST_DIRECTORY SHARNESS_BUILD_DIRECTORY SHARNESS_TEST_SRCDIR
mkdir -p "$SHARNESS_TEST_DIRECTORY"
# Tests see no launcher, whatever shell they were started from.
unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE SLURM_PROCID SLURM_NTASKS \
	RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE SLURM_JOB_NODELIST
# Open MPI as root (CI runs as root) and on 2 cores.
OMPI_ALLOW_RUN_AS_ROOT=1
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_rmaps_base_oversubscribe
# The venv lives outside the tree (scripts/test-venv says where). Resolve it
# now: sharness points HOME at the trash directory, and a venv found
# through that HOME would be built anew inside every test. Tests that use
# it call test_need_python first, which creates it when needed.
GK_PY=$("$GK_TOP/scripts/test-venv" --path)
GK_VENV=${GK_PY%/bin/python}
export GK_VENV
# Open MPI and the sanitizer's leak checker do not get along.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
export ASAN_OPTIONS

. /usr/share/sharness/sharness.sh

# Without --verbose sharness sends what the tests run print to /dev/null;
# keep it in NAME.out beside the trash directories instead, so that a test
# that failed under prove says why (tests/prove prints its part).
if test "$verbose" != t; then
	exec 3>"$SHARNESS_TEST_DIRECTORY/$this_test.out" 4>&3
fi

test_need_python() {
	if ! "$GK_TOP/scripts/test-venv" >/dev/null 2>&1; then
		skip_all="no Python venv for interop tests (scripts/test-venv failed)"
		test_done
	fi
	# one process for them all (importing torch takes seconds), one each
	# only to name the missing one
	"$GK_PY" -c "import $(echo "$@" | tr " " ",")" 2>/dev/null && return 0
	for m in "$@"; do
		if ! "$GK_PY" -c "import $m" 2>/dev/null; then
			skip_all="Python module '$m' is not in the test venv"
			test_done
		fi
	done
}

# The options --help's summary in file HELP names, one a line, sorted:
# every name at the start of its option lines ("-b, --batch B" giving -b
# and --batch). With test_man_options, what the checks that a tool's
# option table and its man page agree compare.
test_help_options() {
	grep "^  -" "$1" | sed "s/^  //; s/\(--[a-z0-9_-]*\).*/\1/" | tr -s ", " "\n\n" | sort -u
}

# The options the man page PAGE documents, one a line, sorted: every Fl
# of an .It line ("Fl Fl name", "Fl \-name", "Fl b") of OPTIONS, or of
# every section from FROM to ENVIRONMENT (a tool whose modes are in
# DESCRIPTION).
test_man_options() {
	if test -n "$2"; then
		set -- "$1" "/^\.Sh $2/,/^\.Sh ENVIRONMENT/p"
	else
		set -- "$1" "/^\.Sh OPTIONS/,/^\.Sh /p"
	fi
	sed -n "$2" "$1" | grep "^\.It" | sed "s/Fl Fl /Fl -/g; s/Fl \\\\-/Fl -/g" |
		grep -o "Fl -\{0,1\}[a-zA-Z0-9][a-zA-Z0-9_-]*" | sed "s/^Fl /-/" | sort -u
}

# getopt takes an argument for every row whose line in the --help output
# HELP shows one ("--batch B"): "TOOL ARG... --batch" exits 2 with
# "option '--batch' requires an argument".
test_options_take_args() {
	_help=$1
	shift
	for _o in $(sed -n "s/^  \(-[a-zA-Z], \)\{0,1\}\(--[a-z0-9_-]*\) [A-Z0-9].*/\2/p" "$_help"); do
		test_expect_code 2 "$@" $_o >opt-out 2>opt-err &&
		grep -q "^${1##*/}: option .$_o. requires an argument" opt-err || {
			echo "$* $_o: $(head -n 1 opt-err)"
			return 1
		}
	done
}

# LD_PRELOAD splits at spaces, and the trash directory's name has one: the
# shim goes beside it, NAME-term-shim.so.
test_term_shim() {
	term_shim=$SHARNESS_TEST_DIRECTORY/$1-term-shim.so
	${CC:-cc} -shared -fPIC -o "$term_shim" "$GK_TOP/tests/cli/term-shim.c" -ldl
}

test_shared_dir() {
	d="$GK_TOP/../shared/$1"
	if ! test -d "$d"; then
		skip_all="../shared/$1 is not here"
		test_done
	fi
	echo "$d"
}

# test_wait_for SECONDS WHAT CMD...: run CMD every 0.1 s until it succeeds;
# after SECONDS (a bound for a loaded machine, not a guess at how long it
# takes) say on stderr what was waited for and fail. Tests wait for an
# event (a file, a line, a process state) with it, never sleep and hope.
test_wait_for() {
	tw_secs=$1 tw_what=$2
	tw_end=$(($(date +%s) + tw_secs))
	shift 2
	until "$@"; do
		if [ "$(date +%s)" -ge "$tw_end" ]; then
			echo "test_wait_for: gave up after $tw_secs s waiting for $tw_what" >&2
			return 1
		fi
		sleep 0.1
	done
}

# test_commit DIR STEP: commit step directory DIR as gpu-train does, with a
# COMMIT listing every file in it, its size and its XXH3 (from xxhsum, an
# XXH3 independent of ours). File names without spaces or quotes.
test_commit() {
	(
		cd "$1" && rm -f COMMIT && sep= &&
		printf '{"step":%d,"files":{' "$2" >.commit &&
		for f in $(LC_ALL=C ls); do
			h=$(xxhsum -H3 "$f" | sed "s/.* = //") &&
			printf '%s"%s":{"bytes":%d,"xxh3":"%s"}' "$sep" "$f" \
				$(wc -c <"$f") "$h" >>.commit &&
			sep=, || exit 1
		done &&
		printf '}}\n' >>.commit &&
		mv .commit COMMIT
	)
}

# What to expect is decided up front, independently of the code under
# test: a GPU is there when the driver's own nvidia-smi lists one (and
# CUDA_VISIBLE_DEVICES does not hide them all) and the build has VAR.
test_gpu_prereqs() {
	GK_GPUS=0
	if command -v nvidia-smi >/dev/null 2>&1 && [ "${CUDA_VISIBLE_DEVICES-x}" != "" ]; then
		GK_GPUS=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU ") || GK_GPUS=0
	fi
	# The configuration of the build under test (scripts/configure
	# writes it there). With a GPU present, a build whose configuration
	# cannot be read is an error, not a reason to expect no GPU: that
	# would skip every GPU test and fail the no-GPU ones.
	cfg="$GK_BUILD/config.mk"
	have=$(sed -n "s/^$1 := //p" "$cfg" 2>/dev/null)
	case $have in
	0 | 1) ;;
	*)
		if [ "$GK_GPUS" -gt 0 ]; then
			echo "error: $cfg says nothing of $1: cannot tell whether to expect the GPU" >&2
			exit 1
		fi ;;
	esac
	if [ "$GK_GPUS" -gt 0 ] && [ "$have" = 1 ]; then
		test_set_prereq GPU
		[ "$GK_GPUS" -ge 2 ] && test_set_prereq GPUS
	else
		test_set_prereq NOGPU
	fi
	say "nvidia-smi GPUs: $GK_GPUS, build's $1: ${have:-unknown}"
}

# node_exporter_scrape DIR OUT: serve DIR through node_exporter's textfile
# collector on a free loopback port, write one scrape of /metrics to OUT,
# and stop it; fails when the exporter does not answer within 120 s or
# reports a file of DIR it could not read (node_textfile_scrape_error).
# Behind the NODE_EXPORTER prerequisite.
command -v prometheus-node-exporter >/dev/null 2>&1 && command -v curl >/dev/null 2>&1 &&
	test_set_prereq NODE_EXPORTER
node_exporter_scrape() {
	ne_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') ||
		return 1
	prometheus-node-exporter --collector.disable-defaults --collector.textfile \
		--collector.textfile.directory="$PWD/$1" \
		--web.listen-address=127.0.0.1:$ne_port >"$2.log" 2>&1 &
	ne_pid=$!
	for i in $(seq 600); do
		curl -sf http://127.0.0.1:$ne_port/metrics >"$2" && break
		kill -0 $ne_pid 2>/dev/null || break
		sleep 0.2
	done
	kill $ne_pid 2>/dev/null
	wait $ne_pid 2>/dev/null
	test -s "$2" || { echo "node_exporter did not answer on port $ne_port in 120 s"; cat "$2.log"; return 1; }
	grep "^node_textfile_scrape_error 0$" "$2"
}
