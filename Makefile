# gpukit: one non-recursive Makefile.
#
#   make                 lib/libgpukit.a and every tool in bin/
#   make check           unit tests, CLI tests and man page lint through prove
#   make check SAN=1     the same under AddressSanitizer + UBSan
#   make SAN=thread O=build-tsan CUDA=0   the tools under ThreadSanitizer, to
#                        run a test file with (GK_BINDIR=build-tsan/bin;
#                        TSAN_OPTIONS=suppressions=tools/tsan.supp for
#                        Open MPI's own reports, log_path=DIR to keep the
#                        tests' stderr clean)
#   make check-quick     unit tests, man lint, conventions, fuzz replay only
#   make check-cuemu     the CUDA unit tests on the CPU's emulation of CUDA (in check)
#   make bench           benchmark drivers in tools/bench/ (slow, not in check)
#   make demo            the README's main job on built-in data, kept in
#                        ./gpukit-demo (DEMO_DIR=DIR DEMO_STEPS=N from the
#                        command line or the environment)
#   make install PREFIX=/usr/local DESTDIR=   (and uninstall, clean)
#
# Options: CUDA=0|1 MPI=0|1 (default: detect), CUDA_HOME, NCCL_HOME, MPI_HOME,
# CUDA_ARCH="80 90", SAN=1, WERROR=1, V=1 (full commands), O=DIR (build
# directory; see below), CC, CFLAGS, LDFLAGS, JOBS (parallel tests),
# NEED_VENV=1 (fail instead of skipping when the Python venv cannot be made).
# Sources are found by name, so a new module or tool needs no edit here:
#   lib/MOD/*.c               always built
#   lib/MOD/*_cuda.c, *.cu    only with CUDA    (*_nocuda.c only without)
#   lib/MOD/*_nccl.c          only with NCCL    (*_nonccl.c only without)
#   lib/MOD/*_mpi.c           only with MPI     (*_nompi.c only without)
#   bin/TOOL.c                the tool bin/TOOL
#   tests/unit/NAME.c         a TAP test program, run by prove
#   tests/cli/tNNNN-*.sh      a sharness test, run by prove
#   tools/bench/NAME.c        a benchmark helper; tools/bench/NAME.sh a driver
#   tools/fuzz/NAME.c         a fuzz target (LLVMFuzzerTestOneInput); check
#                             replays tools/fuzz/corpus/NAME/, `make fuzz`
#                             runs libFuzzer (clang) for FUZZ_SECONDS each

VERSION := 0.1.0

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
DOCDIR ?= $(PREFIX)/share/doc/gpukit
DATADIR ?= $(PREFIX)/share/gpukit
DESTDIR ?=

CUDA ?= auto
MPI ?= auto
SAN ?= 0
WERROR ?= 0
NEED_VENV ?= 0
V ?= 0
CUDA_HOME ?= /usr/local/cuda
NCCL_HOME ?= $(CUDA_HOME)
MPI_HOME ?=
CUDA_ARCH ?= 80 90
# The test files wait about half their time (Slurm's scheduling, the
# watchdog's and the checkpoints' timeouts, ranks waiting for each other):
# at -j2 on 2 cores prove kept 1.0 core busy on average (466 CPU-s in a
# 462 s pass), at -j4 the same CPU-s in 287 s.
JOBS ?= 4
export CUDA_HOME NCCL_HOME MPI_HOME

# O=DIR keeps a whole configuration in DIR (objects, probes, test programs,
# and then the library and tools too: DIR/lib/libgpukit.a, DIR/bin/TOOL),
# so several configurations can be built and tested side by side (CI does)
# without relinking each other's files. The default puts the library and
# tools next to their sources.
O ?= build
B := $(patsubst %/,%,$(O))
ifeq ($(B),build)
LIB := lib/libgpukit.a
TOOLDIR := bin
else
LIB := $(B)/lib/libgpukit.a
TOOLDIR := $(B)/bin
endif

# Short "  CC   lib/core/io.o" lines unless V=1 (Linux kernel and git style).
ifneq ($(V),1)
quiet = @printf '  %-5s %s\n' '$(1)' '$(patsubst $(B)/%,%,$(2))';
endif
QUIET_CC = $(call quiet,CC,$@)
QUIET_NVCC = $(call quiet,NVCC,$@)
QUIET_AR = $(call quiet,AR,$@)
QUIET_LD = $(call quiet,LD,$@)
QUIET_GEN = $(call quiet,GEN,$@)

# The probe reruns when what it was asked changes: CUDA=, MPI=, the *_HOMEs
# or the compiler (a new CUDA_HOME must not keep the old one's answer).
CONFIG := $(B)/config.mk
CONFIG_ARGS := $(B)/config.args
CONFIG_NOW := CUDA=$(CUDA) MPI=$(MPI) CUDA_HOME=$(CUDA_HOME) NCCL_HOME=$(NCCL_HOME) MPI_HOME=$(MPI_HOME) CC=$(CC)

# Targets that must not probe (or install) anything.
NOCONF_GOALS := clean uninstall help
ifneq ($(filter-out $(NOCONF_GOALS),$(or $(MAKECMDGOALS),all)),)
ifneq ($(CONFIG_NOW),$(file <$(CONFIG_ARGS)))
$(shell mkdir -p $(B))
$(file >$(CONFIG_ARGS),$(CONFIG_NOW))
endif
include $(CONFIG)
endif

.DEFAULT_GOAL := all
.DELETE_ON_ERROR:
.SUFFIXES:
# Keep objects that chained rules would otherwise delete as intermediate.
.SECONDARY:

$(CONFIG): scripts/configure scripts/install-deps $(CONFIG_ARGS)
	@mkdir -p $(B)
	$(QUIET_GEN)CC='$(CC)' scripts/configure $(CUDA) $(MPI) > $@.tmp && mv $@.tmp $@

ok = $(if $(filter 1,$(1)),✓,✗)
ifdef HAVE_CUDA
ifeq ($(MAKELEVEL),0)
$(info gpukit $(VERSION): $(call ok,$(HAVE_CUDA)) CUDA ($(CUDA_HOME))  $(call ok,$(HAVE_NCCL)) NCCL  $(call ok,$(HAVE_MPI)) MPI  $(if $(filter 1 thread,$(SAN)),✓,✗) sanitizers$(if $(filter-out build,$(B)),  in $(B)/))
endif
endif

# ---- flags ------------------------------------------------------------------

CFLAGS ?= -O2 -g
WARN := -Wall -Wextra -Wshadow -Wno-unused-parameter -Wformat=2 -Wvla
# -ffp-contract=off: no fused multiply-add behind the source's back, so
# the CPU path rounds as the CUDA kernels do (lib/comm/reduce.h).
GK_CFLAGS := -std=gnu11 $(WARN) -Ilib -D_GNU_SOURCE -DGK_VERSION='"$(VERSION)"' \
	-ffp-contract=off -fopenmp -pthread $(GK_CFLAGS_DEPS) \
	-DGK_HAVE_CUDA=$(or $(HAVE_CUDA),0) -DGK_HAVE_NCCL=$(or $(HAVE_NCCL),0) \
	-DGK_HAVE_MPI=$(or $(HAVE_MPI),0)
GK_LIBS := $(GK_LIBS_DEPS) -lm -fopenmp -pthread
# except in the CPU attention's matmul tiles, which fuse as OpenBLAS's
# kernels do (its per-element math is in ops_cpu.c)
$(B)/lib/nn/attention_cpu.o: GK_CFLAGS += -ffp-contract=fast
ifeq ($(WERROR),1)
GK_CFLAGS += -Werror
endif

ifeq ($(HAVE_MPI),1)
GK_CFLAGS += $(MPI_CFLAGS)
GK_LIBS += $(MPI_LIBS)
endif

NVCC := $(CUDA_HOME)/bin/nvcc
NVCCFLAGS ?= -O2 -g
# --fmad=false: as -ffp-contract=off on the host, no a*b+c fused behind
# the source's back, so lib/nn/math.h's functions round the same in a
# kernel as on the CPU (an fmaf written out is still one instruction).
GK_NVCCFLAGS := -std=c++17 -Ilib -DGK_HAVE_CUDA=1 -DGK_HAVE_NCCL=$(or $(HAVE_NCCL),0) --fmad=false \
	$(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
	-gencode arch=compute_$(lastword $(CUDA_ARCH)),code=compute_$(lastword $(CUDA_ARCH))
ifeq ($(HAVE_CUDA),1)
GK_CFLAGS += -I$(CUDA_HOME)/include -I$(NCCL_HOME)/include
# Static cudart: it finds the driver (libcuda.so.1) with dlopen when first
# used, so every binary starts on a machine with no GPU and no driver.
# NCCL is dlopen'ed by lib/comm for the same reason.
GK_LIBS += -L$(CUDA_HOME)/lib64 -lcudart_static -lstdc++ -ldl -lrt
endif

ifeq ($(SAN),1)
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
else ifeq ($(SAN),thread)
SANFLAGS := -fsanitize=thread -fno-omit-frame-pointer
endif
GK_CFLAGS += $(SANFLAGS)
GK_LIBS += $(SANFLAGS)

ALL_CFLAGS = $(GK_CFLAGS) $(CFLAGS) $(CPPFLAGS)
ALL_LDFLAGS = $(LDFLAGS)

# lib/nn's element loops: no floating-point trap is ever enabled and errno
# is never read after a math call there. Without these GCC neither
# vectorises sqrtf (AdamW ran scalar) nor if-converts the clamps of
# gk_nn_tanh. (A `#pragma GCC optimize` does not reach the target_clones
# copies for math-errno.) At -O2 GCC only vectorises a loop whose length
# it need not check (its "very cheap" cost model): the dynamic model also
# takes loops of any length, such as a softmax row's normalisation.
# GCC never reorders a floating-point sum without -ffast-math, so the
# values are the same bits either way.
NN_CFLAGS := -fno-math-errno -fno-trapping-math -fvect-cost-model=dynamic
$(B)/lib/nn/%.o: ALL_CFLAGS += $(NN_CFLAGS)

# Rebuild everything when the flags change (SAN=1 <-> SAN=0, CUDA=0 ...).
FLAGS_STAMP := $(B)/flags.stamp
FLAGS_NOW := $(ALL_CFLAGS) $(NN_CFLAGS) | $(GK_LIBS) | $(ALL_LDFLAGS) | $(NVCCFLAGS) $(GK_NVCCFLAGS)
ifneq ($(FLAGS_NOW),$(file <$(FLAGS_STAMP)))
$(shell mkdir -p $(B))
$(file >$(FLAGS_STAMP),$(FLAGS_NOW))
endif

# ---- sources ------------------------------------------------------------------

select = $(filter-out $(if $(filter 1,$(1)),%_no$(2).c,%_$(2).c),$(3))
LIB_SRC := $(wildcard lib/*/*.c)
LIB_SRC := $(call select,$(HAVE_CUDA),cuda,$(LIB_SRC))
LIB_SRC := $(call select,$(HAVE_NCCL),nccl,$(LIB_SRC))
LIB_SRC := $(call select,$(HAVE_MPI),mpi,$(LIB_SRC))
LIB_CU := $(if $(filter 1,$(HAVE_CUDA)),$(wildcard lib/*/*.cu))
LIB_OBJ := $(patsubst %.c,$(B)/%.o,$(LIB_SRC)) $(patsubst %.cu,$(B)/%.cu.o,$(LIB_CU))

TOOLS := $(patsubst bin/%.c,$(TOOLDIR)/%,$(wildcard bin/*.c))
UNIT := $(patsubst tests/unit/%.c,$(B)/tests/unit/%,$(wildcard tests/unit/*.c))
CLI := $(sort $(wildcard tests/cli/t[0-9]*.sh))
# The quick tier: man pages, the command-line conventions, fuzz replay and
# the test library's GPU decision against this build's config.mk (no interop
# venv, seconds): what CI runs in its extra configurations. Named file by
# file, not by number, so that a new test does not join it by its number
# and a renamed one fails here instead of dropping out.
CLI_QUICK := tests/cli/t0001-man-lint.sh tests/cli/t0002-conventions.sh \
	tests/cli/t0004-fuzz-replay.sh tests/cli/t0005-gpu-prereqs.sh
BENCH_BIN := $(patsubst tools/bench/%.c,$(B)/tools/bench/%,$(wildcard tools/bench/*.c))
# lib.sh is what the drivers source, not a driver
BENCH := $(sort $(filter-out tools/bench/lib.sh,$(wildcard tools/bench/*.sh)))
FUZZ_SRC := $(filter-out tools/fuzz/replay.c,$(wildcard tools/fuzz/*.c))
FUZZ_REPLAY := $(patsubst tools/fuzz/%.c,$(B)/tools/fuzz/%,$(FUZZ_SRC))
MAN := $(wildcard man/man1/*.1 man/man5/*.5 man/man7/*.7)

# ---- build --------------------------------------------------------------------

.PHONY: all
all: $(LIB) $(TOOLS)

$(B)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(QUIET_CC)$(CC) $(ALL_CFLAGS) -MMD -MP -c -o $@ $<

$(B)/%.cu.o: %.cu $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(QUIET_NVCC)$(NVCC) $(GK_NVCCFLAGS) $(NVCCFLAGS) -MMD -MP -c -o $@ $<

$(LIB): $(LIB_OBJ)
	@mkdir -p $(@D)
	@rm -f $@
	$(QUIET_AR)$(AR) rcs $@ $^

$(TOOLDIR)/%: $(B)/bin/%.o $(LIB)
	@mkdir -p $(@D)
	$(QUIET_LD)$(CC) $(ALL_LDFLAGS) -o $@ $< $(LIB) $(GK_LIBS)

$(B)/tests/unit/%: $(B)/tests/unit/%.o $(LIB)
	$(QUIET_LD)$(CC) $(ALL_LDFLAGS) -o $@ $< $(LIB) $(GK_LIBS)

$(B)/tools/bench/%: $(B)/tools/bench/%.o $(LIB)
	$(QUIET_LD)$(CC) $(ALL_LDFLAGS) -o $@ $< $(LIB) $(GK_LIBS)

$(B)/tools/fuzz/%: $(B)/tools/fuzz/%.o $(B)/tools/fuzz/replay.o $(LIB)
	$(QUIET_LD)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(GK_LIBS)

# The compilers' dependency files, one per object this configuration builds
# (not a find over $(B), which may hold other configurations and test trees).
ALL_OBJ := $(LIB_OBJ) $(patsubst bin/%.c,$(B)/bin/%.o,$(wildcard bin/*.c)) \
	$(addsuffix .o,$(UNIT) $(BENCH_BIN) $(FUZZ_REPLAY)) $(B)/tools/fuzz/replay.o
-include $(ALL_OBJ:.o=.d)

include tests/cuemu/cuemu.mk

# ---- check --------------------------------------------------------------------

# Unit tests are executables and CLI tests are shell scripts; prove runs
# both, through tests/prove, which runs each file directly, keeps its TAP
# and prints, after a failure, each failed test's TAP comments and log.
# GK_BUILD and GK_BINDIR tell the tests which configuration they test;
# --directives lists every skipped test with its reason (CI counts them).
PROVE = GK_BUILD=$(abspath $(B)) GK_BINDIR=$(abspath $(TOOLDIR)) \
	GK_MAKEVARS="SAN=$(SAN) CUDA=$(CUDA) MPI=$(MPI) WERROR=$(WERROR)" \
	tests/prove -j$(JOBS) --directives
.PHONY: check check-quick test-tools venv
check: all $(UNIT) $(FUZZ_REPLAY) test-tools
	@scripts/test-venv >/dev/null || \
	{ test "$(NEED_VENV)" = 1 && { echo "check: no Python venv (NEED_VENV=1)" >&2; exit 1; }; \
	  echo "check: no Python venv; interop tests will skip" >&2; }
	$(call quiet,PROVE,$(words $(UNIT) $(CLI)) test files)$(PROVE) $(UNIT) $(CLI)
	@$(MAKE) --no-print-directory check-cuemu

check-quick: all $(UNIT) $(FUZZ_REPLAY) test-tools
	$(call quiet,PROVE,$(words $(UNIT) $(CLI_QUICK)) test files)$(PROVE) $(UNIT) $(CLI_QUICK)

# The test suite's own tools are needed by the checks only, not to build.
test-tools:
	@scripts/configure --test-tools

venv:
	scripts/test-venv

.PHONY: bench
bench: all $(BENCH_BIN)
	@for b in $(BENCH); do echo "== $$b"; GK_BUILD=$(B) $$b || exit 1; done

# libFuzzer needs clang; build each target with the library's sources
# directly (CPU-only: no CUDA, NCCL or MPI objects).
FUZZ_SECONDS ?= 60
FUZZ_LIB_SRC := $(filter-out %_cuda.c %_nccl.c %_mpi.c,$(wildcard lib/*/*.c))
FUZZ_CFLAGS := $(filter-out -fopenmp -DGK_HAVE_%,$(GK_CFLAGS)) -DGK_HAVE_CUDA=0 \
	-DGK_HAVE_NCCL=0 -DGK_HAVE_MPI=0 -g -O1 -fsanitize=fuzzer,address,undefined
.PHONY: fuzz
fuzz:
	@for f in $(FUZZ_SRC); do \
		n=$$(basename $$f .c); mkdir -p $(B)/fuzz/corpus-$$n; \
		echo "== $$n ($(FUZZ_SECONDS)s)"; \
		clang $(FUZZ_CFLAGS) -o $(B)/fuzz/$$n $$f $(FUZZ_LIB_SRC) \
			$(filter-out -fopenmp,$(GK_LIBS_DEPS)) -lm -pthread || exit 1; \
		$(B)/fuzz/$$n -max_total_time=$(FUZZ_SECONDS) $(B)/fuzz/corpus-$$n \
			$$(test -d tools/fuzz/corpus/$$n && echo tools/fuzz/corpus/$$n) || exit 1; \
	done

.PHONY: demo
demo: all
	@scripts/demo

# ---- install --------------------------------------------------------------------

.PHONY: install uninstall clean help
# Scripts: the commands a user runs by name (plot-loss, slurm-local) go to
# BINDIR beside the tools; the Slurm job and scrontab templates are copied,
# edited and submitted, never run from PATH, so they are data, as git's
# contrib scripts are: DATADIR, PREFIX/share/gpukit (FHS: read-only,
# architecture-independent). gpukit-slurm(7) documents them there.
SCRIPTS_BIN := scripts/plot-loss scripts/slurm-local
SCRIPTS_DATA := scripts/sbatch-train scripts/sbatch-fabric-check
SCRIPTS_CONF := scripts/scrontab-ckpt-prune
# The demo's byte-level BPE tokenizer (data/tokenizer/README), for
# data-pack --tokenize and gpu-train --tokenizer: DATADIR/tokenizer.
TOKENIZER := data/tokenizer/vocab.json data/tokenizer/merges.txt data/tokenizer/README

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man7
	$(if $(TOOLS),install -m 755 $(TOOLS) $(DESTDIR)$(BINDIR))
	install -m 755 $(SCRIPTS_BIN) $(DESTDIR)$(BINDIR)
	install -d $(DESTDIR)$(DATADIR)
	install -m 755 $(SCRIPTS_DATA) $(DESTDIR)$(DATADIR)
	install -m 644 $(SCRIPTS_CONF) $(DESTDIR)$(DATADIR)
	install -d $(DESTDIR)$(DATADIR)/tokenizer
	install -m 644 $(TOKENIZER) $(DESTDIR)$(DATADIR)/tokenizer
	$(if $(filter %.1,$(MAN)),install -m 644 $(filter %.1,$(MAN)) $(DESTDIR)$(MANDIR)/man1)
	$(if $(filter %.5,$(MAN)),install -m 644 $(filter %.5,$(MAN)) $(DESTDIR)$(MANDIR)/man5)
	$(if $(filter %.7,$(MAN)),install -m 644 $(filter %.7,$(MAN)) $(DESTDIR)$(MANDIR)/man7)

uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(notdir $(TOOLS) $(SCRIPTS_BIN)))
	rm -f $(addprefix $(DESTDIR)$(DATADIR)/,$(notdir $(SCRIPTS_DATA) $(SCRIPTS_CONF)))
	rm -f $(addprefix $(DESTDIR)$(DATADIR)/tokenizer/,$(notdir $(TOKENIZER)))
	rmdir $(DESTDIR)$(DATADIR)/tokenizer 2>/dev/null || :
	rmdir $(DESTDIR)$(DATADIR) 2>/dev/null || :
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/,$(patsubst man/%,%,$(MAN)))

clean:
	rm -rf $(B) $(LIB) $(TOOLS)

help:
	@sed -n '2,26s/^# \{0,1\}//p' Makefile
