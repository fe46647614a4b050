# lib-prune.sh - checkpoint trees for the ckpt-prune tests (sourced after lib.sh).


# commit ROOT STEP [BYTES]: a committed checkpoint with a model of BYTES
# random bytes (random, so no file system compresses or dedups it away)
commit() {
	d=$1/$(printf 'step-%08d' "$2") &&
	mkdir -p "$d" &&
	head -c "${3:-4096}" /dev/urandom >"$d/model.safetensors" &&
	printf '{"step": %d, "files": ["model.safetensors"]}\n' "$2" >"$d/COMMIT"
}

# listing ROOT: every name in ROOT, one a line, dot-names too
listing() { (cd "$1" && find . -mindepth 1 -maxdepth 1 | LC_ALL=C sort); }
