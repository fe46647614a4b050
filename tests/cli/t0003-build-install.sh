#!/bin/sh
test_description='make install/uninstall with DESTDIR and PREFIX; binaries start without a GPU

The install test builds in a build directory of its own (make O=DIR), so it
never rewrites the flags stamp or relinks the binaries that the tests
running beside it under prove -j use; it starts from copies of their
objects.'
. "$(dirname "$0")/lib.sh"

# make cannot quote a DESTDIR with spaces (sharness's trash directory has one).
# The nested make gets the check's build variables (SAN=1 ...) but not its
# MAKEFLAGS, whose jobserver descriptors prove does not pass down.
unset MAKEFLAGS MFLAGS
stage=$(mktemp -d "${TMPDIR:-/tmp}/gk-install.XXXXXX")
make_top() { make -s -C "$GK_TOP" O="$stage/build" ${GK_MAKEVARS:-} "$@"; }

# The build directory starts with the tested configuration's objects,
# their times kept (tar): make archives, links and installs from them and
# compiles only what changed since, instead of the whole CUDA build over
# again (a minute of CPU, what CI's own builds already do).
test_expect_success 'make install DESTDIR PREFIX=/usr, built in its own O=' '
	mkdir -p "$stage/build" &&
	(cd "$GK_BUILD" && tar cf - config.mk config.args flags.stamp $(find lib bin -name "*.o")) |
		(cd "$stage/build" && tar xf -) &&
	make_top -j2 install DESTDIR="$stage/root" PREFIX=/usr >out &&
	for m in "$GK_TOP"/man/man*/*.[1-9]; do
		sec=$(basename "$(dirname "$m")") &&
		test -f "$stage/root/usr/share/man/$sec/$(basename "$m")" || return 1
	done &&
	for t in "$GK_TOP"/bin/*.c; do
		test -f "$t" || continue
		t=$(basename "$t" .c) &&
		test -x "$stage/root/usr/bin/$t" &&
		test -x "$stage/build/bin/$t" || return 1
	done &&
	test -f "$stage"/root/usr/share/man/man7/gpukit.7
'

# Commands run by name in bin/, the Slurm templates a user copies in
# share/gpukit/ (gpukit-slurm(7)); every one documented in an installed page.
test_expect_success 'install: plot-loss and slurm-local in bin, the Slurm templates in share/gpukit' '
	r=$stage/root/usr &&
	for s in plot-loss slurm-local; do
		test -x "$r/bin/$s" && cmp "$GK_TOP/scripts/$s" "$r/bin/$s" &&
		test -f "$r/share/man/man1/$s.1" || return 1
	done &&
	for s in sbatch-train sbatch-fabric-check; do
		test -x "$r/share/gpukit/$s" && cmp "$GK_TOP/scripts/$s" "$r/share/gpukit/$s" || return 1
	done &&
	test -f "$r/share/gpukit/scrontab-ckpt-prune" && ! test -x "$r/share/gpukit/scrontab-ckpt-prune" &&
	test -f "$r/share/man/man7/gpukit-slurm.7" &&
	for s in sbatch-train sbatch-fabric-check scrontab-ckpt-prune; do
		grep -q "share/gpukit/$s" "$r/share/man/man7/gpukit-slurm.7" || return 1
	done &&
	"$r/bin/plot-loss" --help | grep "^plot-loss: " &&
	"$r/bin/slurm-local" --help | grep "^slurm-local: "
'

test_expect_success 'the nested build left the tested configuration alone' '
	for t in "$GK_TOP"/bin/*.c; do
		test -f "$t" || continue
		t=$(basename "$t" .c) &&
		! test "$stage/build/bin/$t" -ef "$GK_BINDIR/$t" || return 1
	done &&
	test -f "$stage/build/flags.stamp" &&
	! test "$stage/build/flags.stamp" -ef "$GK_BUILD/flags.stamp"
'

test_expect_success 'make uninstall removes what install put there' '
	make_top uninstall DESTDIR="$stage/root" PREFIX=/usr >/dev/null &&
	find "$stage/root" -type f >left &&
	test_must_be_empty left
'

test_expect_success 'install-deps --check agrees that nothing is missing' '
	"$GK_TOP/scripts/install-deps" --check
'

# The commands the scripts run (sbatch-train binds ranks with numactl,
# plot-loss draws with gnuplot and jq): each one's package is installed
# by install-deps, not left for a user to find out on the cluster.
if command -v dpkg >/dev/null 2>&1; then
	test_set_prereq DPKG
fi
test_expect_success DPKG 'install-deps installs the commands the scripts need' '
	"$GK_TOP/scripts/install-deps" --list | tr " " "\n" >pkgs &&
	for c in numactl gnuplot jq srun sbatch munged; do
		p=$(command -v "$c" || echo "/usr/sbin/$c") &&
		pkg=$(dpkg -S "$(readlink -f "$p")" | sed "s/:.*//") &&
		# slurm-wlm brings slurm-client, slurmctld and slurmd
		case $pkg in slurm-client|slurmctld|slurmd) pkg=slurm-wlm ;; esac &&
		{ grep -Fx "$pkg" pkgs || { echo "$c ($pkg) is not in install-deps"; return 1; }; } || return 1
	done
'

test_expect_success 'every tool starts without a GPU' '
	for t in "$GK_TOP"/bin/*.c; do
		test -f "$t" || continue
		"$GK_BINDIR/$(basename "$t" .c)" --version >/dev/null || return 1
	done
'

# A GPU is there when the driver lists one: then the probe below succeeds
# and the test is skipped ("missing NO_GPU").
if ! ls /proc/driver/nvidia/gpus/* >/dev/null 2>&1 &&
   ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
	test_set_prereq NO_GPU
fi
if test "$(sed -n 's/^HAVE_CUDA := //p' "$GK_BUILD/config.mk")" = 1; then
	why="no usable GPU: "
else
	why="gpukit was built without CUDA"
fi

# allreduce-bench --backend nccl goes through the real probe: the CUDA
# runtime (static cudart looks for the driver only now), the device count,
# then libnccl. Without a GPU it must stop there and say so, exit 1, and
# neither crash nor fall back to another backend.
test_expect_success NO_GPU "allreduce-bench --backend nccl says why it cannot run here" '
	test_expect_code 1 allreduce-bench --backend nccl -b 8 -e 8 -n 1 -w 0 >out 2>err &&
	test_must_be_empty out &&
	test $(wc -l <err) = 1 &&
	grep -F "allreduce-bench: backend '\''nccl'\'': $why" err
'

rm -rf "$stage"
test_done
