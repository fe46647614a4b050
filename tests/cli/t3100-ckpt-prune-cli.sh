#!/bin/sh
test_description='ckpt-prune: command-line conventions, options and bad input

The checks t0002 makes of the C tools (help, version, usage errors, a full
stdout), plus the option values and checkpoint roots ckpt-prune refuses.'
. "$(dirname "$0")/lib.sh"

version=$(sed -n 's/^VERSION := //p' "$GK_TOP/Makefile")

test_expect_success '--help prints usage on stdout, exit 0' '
	ckpt-prune --help >out 2>err &&
	test_must_be_empty err &&
	grep "^usage: ckpt-prune --keep-last N" out &&
	ckpt-prune -h >out2 && test_cmp out out2
'

test_expect_success '--version matches the Makefile VERSION' '
	test -n "$version" &&
	echo "ckpt-prune (gpukit) $version" >expect &&
	ckpt-prune --version >actual &&
	test_cmp expect actual
'

test_expect_success 'unknown option exits 2 with the message and usage on stderr' '
	test_expect_code 2 ckpt-prune --no-such-option >out 2>err &&
	test_must_be_empty out &&
	head -n 1 err >first &&
	echo "ckpt-prune: unrecognized option '\''--no-such-option'\''" >expect &&
	test_cmp expect first &&
	grep "^usage: " err
'

test_expect_success 'a full stdout is an error (exit 1)' '
	test_expect_code 1 ckpt-prune --help >/dev/full 2>err &&
	echo "ckpt-prune: write standard output: No space left on device" >expect &&
	test_cmp expect err
'

mkdir ckpt
# usage_error MESSAGE ARGS...: exit 2, exactly MESSAGE, then the usage
usage_error() {
	msg=$1 && shift &&
	test_expect_code 2 ckpt-prune "$@" >out 2>err &&
	test_must_be_empty out &&
	head -n 1 err >first &&
	echo "ckpt-prune: $msg" >expect &&
	test_cmp expect first &&
	grep "^usage: " err
}

test_expect_success '--keep-last is required' '
	usage_error "--keep-last is required" ckpt
'
test_expect_success '--keep-last 0 is refused (the newest is always kept: say 1)' '
	usage_error "--keep-last '\''0'\'': out of range [1, 1000000000]" --keep-last 0 ckpt
'
test_expect_success 'negative and absurd counts are out of range' '
	usage_error "--keep-last '\''-3'\'': out of range [1, 1000000000]" \
		--keep-last -3 ckpt &&
	usage_error "--keep-last '\''99999999999999999999999'\'': out of range [1, 1000000000]" \
		--keep-last 99999999999999999999999 ckpt &&
	usage_error "--keep-every '\''0'\'': out of range [1, 1000000000]" \
		--keep-last 1 --keep-every 0 ckpt
'
test_expect_success 'counts that are not numbers' '
	usage_error "--keep-last '\''3x'\'': not an integer" --keep-last 3x ckpt &&
	usage_error "--keep-last '\'''\'': not an integer" --keep-last "" ckpt &&
	usage_error "--keep-every '\''1e3'\'': not an integer" --keep-last 1 --keep-every 1e3 ckpt
'
test_expect_success '--grace takes seconds or s/m/h/d and nothing else' '
	usage_error "--grace '\''1y'\'': not a duration (seconds, or a number with s, m, h or d)" \
		--keep-last 1 --grace 1y ckpt &&
	usage_error "--grace '\''-5'\'': not a duration (seconds, or a number with s, m, h or d)" \
		--keep-last 1 --grace -5 ckpt &&
	usage_error "--grace '\''99999999999999999999d'\'': out of range [0, 36500d]" \
		--keep-last 1 --grace 99999999999999999999d ckpt &&
	usage_error "--grace '\''36501d'\'': out of range [0, 36500d]" \
		--keep-last 1 --grace 36501d ckpt &&
	ckpt-prune --keep-last 1 --grace 36500d ckpt &&
	ckpt-prune --keep-last 1 --grace 90m ckpt &&
	ckpt-prune --keep-last 1 --grace 0 ckpt
'
test_expect_success 'a missing argument to an option' '
	test_expect_code 2 ckpt-prune ckpt --keep-last 2>err &&
	head -n 1 err >first &&
	echo "ckpt-prune: option '\''--keep-last'\'' requires an argument: --keep-last N" >expect &&
	test_cmp expect first
'
test_expect_success 'exactly one checkpoint directory' '
	usage_error "missing the checkpoint directory" --keep-last 1 &&
	usage_error "unexpected argument '\''ckpt2'\''" --keep-last 1 ckpt ckpt2
'
test_expect_success 'options may follow DIR and take --opt=VALUE' '
	ckpt-prune ckpt --keep-last=2 --grace=1h -v >out &&
	echo "removed 0, kept 0, freed 0.0 KiB" >expect &&
	test_cmp expect out
'

# runtime_error MESSAGE ARGS...: exit 1, exactly MESSAGE, nothing on stdout
runtime_error() {
	msg=$1 && shift &&
	test_expect_code 1 ckpt-prune "$@" >out 2>err &&
	test_must_be_empty out &&
	echo "ckpt-prune: $msg" >expect &&
	test_cmp expect err
}

test_expect_success 'DIR missing' '
	runtime_error "open '\''nope'\'': No such file or directory" --keep-last 1 nope
'
test_expect_success 'DIR is a file' '
	echo x >file &&
	runtime_error "open '\''file'\'': Not a directory" --keep-last 1 file
'
test_expect_success 'DIR is a dangling symbolic link' '
	ln -s nowhere dangling &&
	runtime_error "open '\''dangling'\'': No such file or directory" --keep-last 1 dangling
'
test_expect_success 'an empty DIR is nothing to do (exit 0, silent)' '
	mkdir empty &&
	ckpt-prune --keep-last 1 empty >out 2>err &&
	test_must_be_empty out &&
	test_must_be_empty err
'
test_expect_success 'DIR named "-", or with spaces and a newline' '
	odd="odd dir
with newline" &&
	for d in - "$odd"; do
		mkdir -p "./$d/step-00000001" "./$d/step-00000002" &&
		: >"./$d/step-00000001/COMMIT" && : >"./$d/step-00000002/COMMIT" &&
		ckpt-prune --keep-last 1 -q -- "$d" &&
		! test -e "./$d/step-00000001" &&
		test -d "./$d/step-00000002" || return 1
	done
'

# t0003 runs make install; here, that the Makefile installs the tool and
# that an installed copy needs nothing from the source tree.
test_expect_success 'installed as a user tool, and runs from a copy' '
	make -s -n -C "$GK_TOP" ${GK_MAKEVARS:-} install DESTDIR=/nonexistent >install.log &&
	grep "install -m 755 .*bin/ckpt-prune" install.log &&
	mkdir -p copy copy-root/step-00000001 copy-root/step-00000002 &&
	: >copy-root/step-00000001/COMMIT && : >copy-root/step-00000002/COMMIT &&
	cp "$GK_TOP/bin/ckpt-prune" copy/ &&
	echo "ckpt-prune (gpukit) $version" >expect &&
	(cd copy && env PATH=/usr/bin:/bin ./ckpt-prune --version) >actual &&
	test_cmp expect actual &&
	env PATH=/usr/bin:/bin copy/ckpt-prune --keep-last 1 -q copy-root &&
	! test -e copy-root/step-00000001
'

test_expect_success 'the option table, --help and ckpt-prune(1) name the same options' '
	# --help is the table (bin/ckpt-prune.c): every name at the start of its
	# option lines, "-n, --dry-run" giving -n and --dry-run; the man
	# page: every Fl of an .It line of OPTIONS ("Fl Fl name")
	ckpt-prune --help >help &&
	test_help_options help >in-help &&
	test_man_options "$GK_TOP/man/man1/ckpt-prune.1" >in-man &&
	test $(wc -l <in-help) -gt 8 &&
	test_cmp in-help in-man &&
	# and getopt takes an argument exactly for the rows whose help line
	# shows one
	test_options_take_args help ckpt-prune
'

test_done
