#!/bin/sh
test_description='ckpt-prune: which checkpoints are kept and which removed

Real checkpoint roots laid out as gpukit-ckpt(5) says: step-NNNNNNNN
directories with a COMMIT written last and latest -> step-NNNNNNNN.
Expected survivors are computed here from the rules, independently of
the script.'
. "$(dirname "$0")/lib.sh"
. "$GK_TOP/tests/cli/lib-prune.sh"


test_expect_success 'keep-last N keeps the N newest committed, logs each removal with its size' '
	for s in 100 200 300 400 500; do commit r1 $s 1048576 || return 1; done &&
	ln -s step-00000500 r1/latest &&
	ckpt-prune --keep-last 2 r1 >out 2>err &&
	test_must_be_empty err &&
	cat >expect <<-\EOF &&
	removed step-00000100 (1.0 MiB)
	removed step-00000200 (1.0 MiB)
	removed step-00000300 (1.0 MiB)
	EOF
	test_cmp expect out &&
	printf "./%s\n" .ckpt-prune.lock latest step-00000400 step-00000500 >expect &&
	listing r1 >actual &&
	test_cmp expect actual
'

test_expect_success 'the size in the log is what du reports' '
	commit r1b 1 3000000 && commit r1b 2 &&
	kib=$(du -sk r1b/step-00000001 | cut -f1) &&
	want=$(awk -v k=$kib "BEGIN { printf \"%.1f MiB\", k / 1024 }") &&
	ckpt-prune --keep-last 1 r1b >out &&
	echo "removed step-00000001 ($want)" >expect &&
	test_cmp expect out
'

test_expect_success 'latest pointing to an older step is kept, and so is the newest' '
	for s in 100 200 300 400 500; do commit r2 $s || return 1; done &&
	ln -s step-00000200 r2/latest &&
	ckpt-prune --keep-last 1 -q r2 &&
	printf "./%s\n" .ckpt-prune.lock latest step-00000200 step-00000500 >expect &&
	listing r2 >actual &&
	test_cmp expect actual
'

test_expect_success 'latest as an absolute or ./ path still protects its target' '
	for s in 1 2 3; do commit r3 $s || return 1; done &&
	ln -s "$PWD/r3/step-00000001" r3/latest &&
	ckpt-prune --keep-last 1 -q r3 &&
	test -d r3/step-00000001 && ! test -e r3/step-00000002 &&
	rm r3/latest && ln -s ./step-00000003/ r3/latest && commit r3 4 &&
	ckpt-prune --keep-last 1 -q r3 &&
	printf "./%s\n" .ckpt-prune.lock latest step-00000003 step-00000004 >expect &&
	listing r3 >actual &&
	test_cmp expect actual
'

test_expect_success 'the newest committed is kept though a newer one is being written' '
	commit r4 100 1048576 && commit r4 200 &&
	mkdir r4/step-00000300 && echo partial >r4/step-00000300/model.safetensors &&
	ckpt-prune --keep-last 1 -v r4 >out &&
	cat >expect <<-\EOF &&
	removed step-00000100 (1.0 MiB)
	kept step-00000200 (newest, keep-last 1)
	kept step-00000300 (no COMMIT, changed 0s ago, grace 1h)
	removed 1, kept 2, freed 1.0 MiB
	EOF
	sed "s/changed [0-9]s ago/changed 0s ago/" out >actual &&
	test_cmp expect actual
'

test_expect_success 'keep-every K keeps multiples of K (step 0 and 900: no octal)' '
	for s in $(seq 0 100 1000); do commit r5 $s || return 1; done &&
	ckpt-prune --keep-last 2 --keep-every 300 -q r5 &&
	for s in $(seq 0 100 1000); do
		if test $((s % 300)) -eq 0 || test $s -ge 900; then
			printf "./step-%08d\n" $s
		fi
	done >expect &&
	echo ./.ckpt-prune.lock >>expect &&
	LC_ALL=C sort expect >expect.sorted &&
	listing r5 >actual &&
	test_cmp expect.sorted actual
'

test_expect_success '-v says why each is kept' '
	for s in 1000 2000 3000 4000 5000; do commit r6 $s 1048576 || return 1; done &&
	ln -s step-00002000 r6/latest &&
	ckpt-prune -v -n --keep-last 2 --keep-every 3000 r6 >out &&
	cat >expect <<-\EOF &&
	would remove step-00001000 (1.0 MiB)
	kept step-00002000 (latest)
	kept step-00003000 (keep-every 3000)
	kept step-00004000 (keep-last 2)
	kept step-00005000 (newest, keep-last 2)
	would remove 1, keep 4, free 1.0 MiB
	EOF
	test_cmp expect out
'

test_expect_success 'keep-last larger than the number of checkpoints removes nothing' '
	commit r7 1 && commit r7 2 &&
	ckpt-prune --keep-last 1000000000 r7 >out &&
	test_must_be_empty out &&
	test -d r7/step-00000001
'

test_expect_success 'dry-run removes nothing, creates nothing, and predicts the real run' '
	for s in 1 2 3 4 5 6; do commit r8 $s || return 1; done &&
	mkdir r8/.deleting-step-00000009.77 r8/step-00000007 &&
	touch -d "2 days ago" r8/step-00000007 &&
	ln -s step-00000004 r8/latest &&
	(cd r8 && find . | LC_ALL=C sort) >before &&
	ckpt-prune -n --keep-last 2 --keep-every 3 --grace 0 r8 >dry &&
	(cd r8 && find . | LC_ALL=C sort) >after &&
	test_cmp before after &&
	ckpt-prune --keep-last 2 --keep-every 3 --grace 0 r8 >real.out &&
	# the age of step-00000007 (its ctime is now) may tick between the runs
	sed "s/^would remove /removed /; s/unchanged for [0-9]*s/unchanged for Ns/" dry >expect &&
	sed "s/unchanged for [0-9]*s/unchanged for Ns/" real.out >real &&
	test_cmp expect real &&
	grep -c . real >count && echo 4 >four && test_cmp four count
'

test_expect_success 'junk names are untouched, whatever the policy' '
	commit r9 10 1048576 && commit r9 20 &&
	mkdir "r9/step-00000001 copy" r9/step-1 r9/step-000000001 r9/Step-00000001 \
		"r9/step-0000000
1" r9/step-00000001.bak r9/.step-00000001 r9/.step-junk.tmp-1 &&
	: >"r9/step-00000001 copy/COMMIT" && : >r9/step-1/COMMIT &&
	: >r9/step-00000001.bak/COMMIT && echo notes >r9/notes.txt &&
	touch -d "1 year ago" r9/* &&
	listing r9 >before &&
	ckpt-prune --keep-last 1 --grace 0 r9 >out 2>err &&
	echo "removed step-00000010 (1.0 MiB)" >expect &&
	test_cmp expect out &&
	test_must_be_empty err &&
	grep -v -e step-00000010 -e ckpt-prune.lock before >expect &&
	listing r9 | grep -v ckpt-prune.lock >actual &&
	test_cmp expect actual
'

test_expect_success 'a step-NNNNNNNN symlink is not followed, deleted through, or counted' '
	commit outside 50 &&
	commit r10 100 1048576 && commit r10 200 &&
	ln -s ../outside/step-00000050 r10/step-00000030 &&
	ln -s ../outside/step-00000050 r10/step-00000300 &&
	ckpt-prune --keep-last 1 --grace 0 r10 >out 2>err &&
	echo "removed step-00000100 (1.0 MiB)" >expect &&
	test_cmp expect out &&
	cat >expect <<-\EOF &&
	ckpt-prune: warning: skipping '\''step-00000030'\'': a symbolic link, not a checkpoint directory
	ckpt-prune: warning: skipping '\''step-00000300'\'': a symbolic link, not a checkpoint directory
	EOF
	test_cmp expect err &&
	test -L r10/step-00000030 && test -L r10/step-00000300 &&
	test -d r10/step-00000200 &&
	test -f outside/step-00000050/COMMIT &&
	test -f outside/step-00000050/model.safetensors
'

test_expect_success 'a symlink inside a removed checkpoint is removed, not its target' '
	echo precious >precious &&
	mkdir outdir && echo precious >outdir/file &&
	commit r11 1 && commit r11 2 &&
	ln -s ../../precious r11/step-00000001/link &&
	ln -s ../../outdir r11/step-00000001/dirlink &&
	ckpt-prune --keep-last 1 -q r11 &&
	! test -e r11/step-00000001 &&
	echo precious >expect &&
	test_cmp expect precious &&
	test_cmp expect outdir/file
'

test_expect_success 'latest outside the root or dangling: a warning, nothing outside touched' '
	commit r12 1 && commit r12 2 && commit r12 3 &&
	ln -s ../outside/step-00000050 r12/latest &&
	ckpt-prune --keep-last 1 r12 >out 2>err &&
	echo "ckpt-prune: warning: '\''latest'\'' points to '\''../outside/step-00000050'\'', not a checkpoint directory in '\''r12'\''" >expect &&
	test_cmp expect err &&
	test -f outside/step-00000050/COMMIT &&
	rm r12/latest && ln -s step-00000099 r12/latest &&
	ckpt-prune --keep-last 1 r12 >out 2>err &&
	echo "ckpt-prune: warning: '\''latest'\'' points to '\''step-00000099'\'', not a checkpoint directory in '\''r12'\''" >expect &&
	test_cmp expect err &&
	printf "./%s\n" .ckpt-prune.lock latest step-00000003 >expect &&
	listing r12 >actual &&
	test_cmp expect actual
'

test_expect_success 'latest pointing to an uncommitted directory keeps it, with a warning' '
	commit r13 1 1048576 && commit r13 2 &&
	mkdir r13/step-00000003 && touch -d "1 year ago" r13/step-00000003 &&
	ln -s step-00000003 r13/latest &&
	ckpt-prune --keep-last 1 --grace 0 r13 >out 2>err &&
	echo "removed step-00000001 (1.0 MiB)" >expect &&
	test_cmp expect out &&
	echo "ckpt-prune: warning: '\''latest'\'' points to '\''step-00000003'\'', which has no COMMIT; keeping it" >expect &&
	test_cmp expect err &&
	test -d r13/step-00000003
'

test_expect_success 'a latest that is not a symbolic link protects nothing, and says so' '
	commit r16 1 && commit r16 2 && echo step-00000001 >r16/latest &&
	ckpt-prune --keep-last 1 r16 >out 2>err &&
	echo "ckpt-prune: warning: '\''latest'\'' is not a symbolic link; ignoring it" >expect &&
	test_cmp expect err &&
	! test -e r16/step-00000001 && test -f r16/latest
'

test_expect_success 'a step-NNNNNNNN that is a file is skipped with a warning' '
	commit r14 1 && commit r14 2 && echo x >r14/step-00000000 &&
	ckpt-prune --keep-last 1 -q r14 >out 2>err &&
	test_must_be_empty out && test_must_be_empty err &&
	ckpt-prune --keep-last 1 r14 2>err &&
	echo "ckpt-prune: warning: skipping '\''step-00000000'\'': not a directory" >expect &&
	test_cmp expect err &&
	test -f r14/step-00000000
'

test_expect_success 'a full stdout during a run is an error (exit 1)' '
	commit r15 1 && commit r15 2 &&
	test_expect_code 1 ckpt-prune --keep-last 1 r15 >/dev/full 2>err &&
	echo "ckpt-prune: write standard output: No space left on device" >expect &&
	test_cmp expect err
'

test_expect_success 'steps from 10^8 on (nine digits) are checkpoints too' '
	for s in 99999999 100000000 100000001 200000000; do commit r17 $s || return 1; done &&
	ckpt-prune --keep-last 2 r17 >out &&
	cat >expect <<-\EOF &&
	removed step-99999999 (4.0 KiB)
	removed step-100000000 (4.0 KiB)
	EOF
	sed "s/(.*)/(4.0 KiB)/" out >actual &&
	test_cmp expect actual &&
	printf "./%s\n" .ckpt-prune.lock step-100000001 step-200000000 >expect &&
	listing r17 >actual &&
	test_cmp expect actual
'

test_expect_success 'latest means the same step to ckpt-merge and ckpt-prune' '
	ck="$GK_TOP/tests/data/ckpt" &&
	for s in 99999999 100000000 100000001; do
		d=r18/step-$s && mkdir -p $d &&
		cp "$ck/expect-a.safetensors" $d/model.safetensors &&
		test_commit $d $s || return 1
	done &&
	cp "$ck/expect.safetensors" r18/step-100000000/model.safetensors &&
	test_commit r18/step-100000000 100000000 &&
	ln -s "$PWD/r18/step-100000000/" r18/latest &&
	ckpt-merge --list r18 >list &&
	grep "^b .* r18/step-100000000/model.safetensors$" list &&
	ckpt-prune --keep-last 1 -v r18 >out &&
	cat >expect <<-\EOF &&
	removed step-99999999 (8.0 KiB)
	kept step-100000000 (latest)
	kept step-100000001 (newest, keep-last 1)
	removed 1, kept 2, freed 8.0 KiB
	EOF
	sed "s/([0-9.]* KiB)/(8.0 KiB)/; s/freed .*/freed 8.0 KiB/" out >actual &&
	test_cmp expect actual
'

test_expect_success 'a latest that is not a step name of the writer protects nothing' '
	commit r19 1 && commit r19 2 && mkdir r19/step-000000001 &&
	: >r19/step-000000001/COMMIT && ln -s step-000000001 r19/latest &&
	touch -d "1 year ago" r19/step-000000001 &&
	ckpt-prune --keep-last 1 --grace 0 r19 >out 2>err &&
	echo "ckpt-prune: warning: '\''latest'\'' points to '\''step-000000001'\'', not a checkpoint directory in '\''r19'\''" >expect &&
	test_cmp expect err &&
	echo "removed step-00000001 (4.0 KiB)" >expect &&
	sed "s/(.*)/(4.0 KiB)/" out >actual &&
	test_cmp expect actual &&
	test -d r19/step-000000001
'

# promtool (the prometheus package) is installed by scripts/install-deps,
# so it is required here: without it this case fails rather than passing
# without the check.
test_expect_success '--metrics writes the run in Prometheus text format, which promtool accepts' '
	commit r20 1 1048576 && commit r20 2 && mkdir r20/step-00000003 &&
	before=$(date +%s) &&
	ckpt-prune -q --keep-last 1 --metrics r20.prom r20 &&
	after=$(date +%s) &&
	sed -n "s/^gpukit_ckpt_prune_last_run_timestamp_seconds{run=\"r20\",root=\"r20\"} //p" r20.prom >t &&
	test "$(cat t)" -ge $before && test "$(cat t)" -le $after &&
	grep -v "^gpukit_ckpt_prune_last_run_timestamp_seconds" r20.prom >actual &&
	freed=$(sed -n "s/^gpukit_ckpt_prune_freed_bytes{run=\"r20\",root=\"r20\"} //p" r20.prom) &&
	test "$freed" -ge 1048576 && test "$freed" -le 1114112 &&
	cat >expect <<-EOF &&
	# HELP gpukit_ckpt_prune_removed Checkpoints the last run removed (would remove, with --dry-run).
	# TYPE gpukit_ckpt_prune_removed gauge
	gpukit_ckpt_prune_removed{run="r20",root="r20"} 1
	# HELP gpukit_ckpt_prune_kept Checkpoints and directories in progress the last run kept.
	# TYPE gpukit_ckpt_prune_kept gauge
	gpukit_ckpt_prune_kept{run="r20",root="r20"} 2
	# HELP gpukit_ckpt_prune_failed Removals that failed in the last run.
	# TYPE gpukit_ckpt_prune_failed gauge
	gpukit_ckpt_prune_failed{run="r20",root="r20"} 0
	# HELP gpukit_ckpt_prune_freed_bytes Disk space the last run freed (would free, with --dry-run).
	# TYPE gpukit_ckpt_prune_freed_bytes gauge
	gpukit_ckpt_prune_freed_bytes{run="r20",root="r20"} $freed
	# HELP gpukit_ckpt_prune_success 1 when the last run did all it had to, else 0.
	# TYPE gpukit_ckpt_prune_success gauge
	gpukit_ckpt_prune_success{run="r20",root="r20"} 1
	# HELP gpukit_ckpt_prune_dry_run 1 when the last run was --dry-run: it removed nothing.
	# TYPE gpukit_ckpt_prune_dry_run gauge
	gpukit_ckpt_prune_dry_run{run="r20",root="r20"} 0
	# HELP gpukit_ckpt_prune_last_run_timestamp_seconds When the last run ended, in Unix time.
	# TYPE gpukit_ckpt_prune_last_run_timestamp_seconds gauge
	EOF
	test_cmp expect actual &&
	promtool check metrics <r20.prom &&
	test_expect_code 1 ckpt-prune -q --keep-last 1 --metrics r20.prom nope 2>err &&
	grep "^gpukit_ckpt_prune_success{run=\"r20\",root=\"nope\"} 0$" r20.prom
'

# A dry run wrote the same samples as a real one: a dashboard could not
# tell "freed 1 MiB" from "would free 1 MiB".
test_expect_success '--dry-run --metrics says it was a dry run' '
	commit r22 1 1048576 && commit r22 2 &&
	ckpt-prune -q -n --keep-last 1 --metrics r22.prom r22 &&
	test -d r22/step-00000001 &&
	grep "^gpukit_ckpt_prune_dry_run{run=\"r22\",root=\"r22\"} 1$" r22.prom &&
	grep "^gpukit_ckpt_prune_removed{run=\"r22\",root=\"r22\"} 1$" r22.prom
'

test_expect_success '--metrics naming a file that is not metrics: refused before any removal' '
	commit r21 1 && commit r21 2 && commit r21 3 &&
	echo "keep" >r21/step-00000003/notes &&
	test_expect_code 1 ckpt-prune -q --keep-last 1 --metrics r21/step-00000003/notes r21 2>err &&
	grep "^ckpt-prune: metrics file .*notes. exists and holds something else" err &&
	test -d r21/step-00000001 && test -d r21/step-00000002 &&
	test "$(cat r21/step-00000003/notes)" = keep
'

test_done
