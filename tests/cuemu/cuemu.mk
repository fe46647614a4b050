# cuemu.mk - the CUDA backend on the CPU (tests/cuemu; doc/DESIGN.md,
# "Running the CUDA backend without a GPU"), included by the Makefile.
#
#   make check-cuemu    the device unit tests against the emulation, with
#                       blocks and threads in forward, reverse and shuffled
#                       order (see "The orders" below; SAN=1: forward only;
#                       the sanitizers look for memory errors, which the
#                       order does not change, at 3x the time)
#
# The .cu files are compiled as host C++ by g++ after launch-rewrite has
# turned their <<<>>> launches into calls; the rest of the library is this
# configuration's own objects. The tests link libcuemu.so (the fake CUDA
# runtime, cuBLASLt and NCCL, and the kernel executor) in place of the
# static cudart; libcuda.so.1, libcublasLt.so.12 and .13 (the library
# loads its toolkit's major) and libnccl.so.2 are links to it next to it, which the library's dlopen calls find through
# the tests' run path. Needs a CUDA build (CUDA=1: the toolkit's headers).

CUEMU_B := $(B)/cuemu
CUEMU_LIBDIR := $(CUEMU_B)/lib
CUEMU_SO := $(CUEMU_LIBDIR)/libcuemu.so
CUEMU_LINKS := $(addprefix $(CUEMU_LIBDIR)/,libcuda.so.1 libcublasLt.so.12 libcublasLt.so.13 libnccl.so.2)
CUEMU_LIB := $(CUEMU_B)/libgpukit.a
# The unit tests with device parts: they skip those without a GPU, and
# run them here.
CUEMU_TESTS := nn_cuda nn_xent nn_flash cuda_core cuda_launch nn_cuda_launch core_half comm_cuda cuda_reduce
# nn_cuda again at odd shapes, and the emulation's own test of the
# defects it must catch
CUEMU_UNIT := $(addprefix $(CUEMU_B)/tests/unit/,$(CUEMU_TESTS)) \
	$(CUEMU_B)/tests/unit/nn_cuda_odd $(CUEMU_B)/tests/cuemu/selftest
CUEMU_SRC := $(wildcard tests/cuemu/*.cc)
# DT_RPATH, not DT_RUNPATH: the library's dlopen calls come through
# ASan's interceptor under SAN=1, and only an RPATH of the executable
# applies to those
CUEMU_RPATH := -Wl,--disable-new-dtags,-rpath,$(abspath $(CUEMU_LIBDIR))
CUEMU_PROVE = $(subst GK_BUILD=$(abspath $(B)) GK_BINDIR=$(abspath $(TOOLDIR)),GK_BUILD=$(abspath $(CUEMU_B)) GK_BINDIR=$(abspath $(CUEMU_B)/bin),$(PROVE))
CUEMU_CXX ?= g++
CUEMU_INC := -I$(CUDA_HOME)/include -I$(NCCL_HOME)/include
CUEMU_CXXFLAGS := -std=c++17 $(WARN) -D_GNU_SOURCE -ffp-contract=off $(CFLAGS) \
	$(if $(filter 1,$(SAN)),$(SANFLAGS))
ifeq ($(WERROR),1)
CUEMU_CXXFLAGS += -Werror
endif
# the emulation's cuda_runtime.h first: it includes the toolkit's
CUEMU_KFLAGS := $(CUEMU_CXXFLAGS) -Itests/cuemu/include -Ilib $(CUEMU_INC) -DGK_HAVE_CUDA=1 \
	-DGK_HAVE_NCCL=$(or $(HAVE_NCCL),0)
CUEMU_KOBJ := $(patsubst %.cu,$(CUEMU_B)/%.cu.o,$(wildcard lib/*/*.cu))

$(CUEMU_B)/%.cu.cc: %.cu tests/cuemu/launch-rewrite
	@mkdir -p $(@D)
	$(call quiet,GEN,$@)tests/cuemu/launch-rewrite $< > $@.tmp && mv $@.tmp $@

$(CUEMU_B)/%.cu.o: $(CUEMU_B)/%.cu.cc tests/cuemu/cuemu.h tests/cuemu/include/cuda_runtime.h $(FLAGS_STAMP)
	$(call quiet,CXX,$@)$(CUEMU_CXX) $(CUEMU_KFLAGS) -MMD -MP -c -o $@ $<

$(CUEMU_SO): $(CUEMU_SRC) tests/cuemu/cuemu.h tests/cuemu/internal.h $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(call quiet,CXX,$@)$(CUEMU_CXX) $(CUEMU_CXXFLAGS) $(CUEMU_INC) -fPIC -shared -Wl,-soname,libcuemu.so \
		-o $@ $(CUEMU_SRC) -ldl

$(CUEMU_LINKS): $(CUEMU_SO)
	@ln -sf libcuemu.so $@

$(CUEMU_LIB): $(filter-out %.cu.o,$(LIB_OBJ)) $(CUEMU_KOBJ)
	@rm -f $@
	$(QUIET_AR)$(AR) rcs $@ $^

$(CUEMU_B)/tests/unit/%: $(B)/tests/unit/%.o $(CUEMU_LIB) $(CUEMU_SO) | $(CUEMU_LINKS)
	@mkdir -p $(@D)
	$(QUIET_LD)$(CC) $(ALL_LDFLAGS) -o $@ $< $(CUEMU_LIB) -L$(CUEMU_LIBDIR) -lcuemu \
		$(CUEMU_RPATH) $(filter-out -lcudart_static,$(GK_LIBS))

$(CUEMU_B)/tests/unit/nn_cuda_odd.o: tests/unit/nn_cuda.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(QUIET_CC)$(CC) $(ALL_CFLAGS) -DGK_TEST_ODD_SHAPES -MMD -MP -c -o $@ $<
$(CUEMU_B)/tests/unit/nn_cuda_odd: $(CUEMU_B)/tests/unit/nn_cuda_odd.o $(CUEMU_LIB) $(CUEMU_SO) | $(CUEMU_LINKS)
	$(QUIET_LD)$(CC) $(ALL_LDFLAGS) -o $@ $< $(CUEMU_LIB) -L$(CUEMU_LIBDIR) -lcuemu \
		$(CUEMU_RPATH) $(filter-out -lcudart_static,$(GK_LIBS))

$(CUEMU_B)/tests/cuemu/selftest.cu.o: CUEMU_KFLAGS += -Itests/unit
$(CUEMU_B)/tests/cuemu/selftest: $(CUEMU_B)/tests/cuemu/selftest.cu.o $(CUEMU_SO) | $(CUEMU_LINKS)
	$(QUIET_LD)$(CUEMU_CXX) $(CUEMU_CXXFLAGS) -o $@ $< -L$(CUEMU_LIBDIR) -lcuemu \
		$(CUEMU_RPATH)

# nn_flash against the fused attention with a defect planted, a barrier
# taken out: the block's barrier before a tile of K and V is
# overwritten, and the warp's between writing a tile's p and reading
# them, in the scalar (lib/nn/flash.cu) and in the tensor cores' kernels
# (lib/nn/flash_tc.cu). nn_flash must fail on each, in each order
# (check-cuemu), or its comparisons could not see such a defect. The
# line is found by its comment; exactly one must go, or the rule fails.
CUEMU_PLANTS := syncthreads syncwarp tcsyncwarp tcsyncthreads
CUEMU_PLANT_syncthreads := __syncthreads\(\); /\* the last tile
CUEMU_PLANT_syncwarp := __syncwarp\(\); /\* sp holds every p
CUEMU_PLANT_FILE_syncthreads := lib/nn/flash.cu
CUEMU_PLANT_FILE_syncwarp := lib/nn/flash.cu
# the tensor cores' kernels: the warp's barrier between writing a tile's
# p and its rescaling and reading them, the block's before the tiles
# overwrite the rows Q was staged in
CUEMU_PLANT_tcsyncwarp := __syncwarp\(\); /\* P and scorr hold
CUEMU_PLANT_tcsyncthreads := __syncthreads\(\); /\* Q.s fragments loaded
CUEMU_PLANT_FILE_tcsyncwarp := lib/nn/flash_tc.cu
CUEMU_PLANT_FILE_tcsyncthreads := lib/nn/flash_tc.cu
CUEMU_PLANT_BIN := $(addprefix $(CUEMU_B)/plant/,$(addsuffix /nn_flash,$(CUEMU_PLANTS)))

$(CUEMU_B)/plant/%/planted.cu: lib/nn/flash.cu lib/nn/flash_tc.cu tests/cuemu/cuemu.mk
	@mkdir -p $(@D)
	$(call quiet,GEN,$@)perl -e '$$re = shift; $$n = 0; while (<>) { if (/$$re/) { $$n++; next } print } exit($$n == 1 ? 0 : 1)' \
		'$(CUEMU_PLANT_$*)' $(CUEMU_PLANT_FILE_$*) > $@.tmp && mv $@.tmp $@
$(CUEMU_B)/plant/%/planted.cu.cc: $(CUEMU_B)/plant/%/planted.cu tests/cuemu/launch-rewrite
	$(call quiet,GEN,$@)tests/cuemu/launch-rewrite $< > $@.tmp && mv $@.tmp $@
$(CUEMU_B)/plant/%/planted.cu.o: $(CUEMU_B)/plant/%/planted.cu.cc tests/cuemu/cuemu.h lib/nn/flash.cuh $(FLAGS_STAMP)
	$(call quiet,CXX,$@)$(CUEMU_CXX) $(CUEMU_KFLAGS) -c -o $@ $<
# the planted object first: the archive's object of the same file is
# then never pulled in
$(CUEMU_B)/plant/%/nn_flash: $(CUEMU_B)/plant/%/planted.cu.o $(B)/tests/unit/nn_flash.o $(CUEMU_LIB) $(CUEMU_SO) | $(CUEMU_LINKS)
	$(QUIET_LD)$(CC) $(ALL_LDFLAGS) -o $@ $(B)/tests/unit/nn_flash.o $< $(CUEMU_LIB) -L$(CUEMU_LIBDIR) -lcuemu \
		$(CUEMU_RPATH) $(filter-out -lcudart_static,$(GK_LIBS))
CUEMU_PLANT_RUN = for t in $(CUEMU_PLANT_BIN); do \
		if PATH=$(abspath tests/cuemu/bin):$$PATH CUEMU_ORDER=$(1) $$t >$$t.$(1).out 2>&1; then \
			echo "check-cuemu: $$t passed in $(1) order with a barrier taken out of the fused attention: nn_flash cannot see that defect" >&2; \
			exit 1; \
		fi; \
	done

# The tools on the emulation, for the CLI tests of the device paths
# (allreduce-bench over NCCL, gpu-train on the CUDA backend): run
# with GK_BUILD=$(CUEMU_B) (its config.mk is this build's) and
# tests/cuemu/bin first on PATH (an nvidia-smi that lists the device).
CUEMU_TOOLS := $(patsubst bin/%.c,$(CUEMU_B)/bin/%,$(wildcard bin/*.c))
CUEMU_CLI := $(wildcard tests/cli/t6002-*.sh) tests/cli/t7106-gpu-train-device.sh \
	tests/cli/t7119-gpu-train-zero3-device.sh \
	tests/cli/t7123-gpu-train-pp-device.sh \
	tests/cli/t7124-gpu-train-tp-device.sh \
	tests/cli/t7127-gpu-train-tp-sp-device.sh \
	tests/cli/t7109-gpu-train-roofline.sh

$(CUEMU_B)/bin/%: $(B)/bin/%.o $(CUEMU_LIB) $(CUEMU_SO) | $(CUEMU_LINKS)
	@mkdir -p $(@D)
	$(QUIET_LD)$(CC) $(ALL_LDFLAGS) -o $@ $< $(CUEMU_LIB) -L$(CUEMU_LIBDIR) -lcuemu \
		$(CUEMU_RPATH) $(filter-out -lcudart_static,$(GK_LIBS))

$(CUEMU_B)/config.mk: $(CONFIG)
	@mkdir -p $(@D)
	@cp $< $@

-include $(CUEMU_KOBJ:.o=.d) $(CUEMU_B)/tests/cuemu/selftest.cu.d $(CUEMU_B)/tests/unit/nn_cuda_odd.d

.PHONY: check-cuemu
# comm_cuda starts Open MPI (the nccl backend's bootstrap), whose leaks
# the sanitizer's leak checker would report (tests/cli/lib.sh turns it
# off for the same reason): it runs without the leak checker
CUEMU_MPI := $(CUEMU_B)/tests/unit/comm_cuda
# Two emulated devices (CUEMU_GPUS), so that the CLI tests' cases for
# two GPUs run their two ranks over the fake NCCL; GK_CUEMU tells the
# tests they run on the emulation (smaller sizes, its faults on demand).
#
# The orders (CUEMU_ORDER): forward runs everything. Reverse runs the
# unit tests, the ones that compare every kernel with its CPU
# counterpart: with forward, every pair of blocks and every pair of
# threads between two barriers has run both ways round, so a result
# that depends on one such pair's order differs in one of the two
# passes, for certain. Shuffled order (a permutation of blocks and
# threads drawn per launch, streams interleaved one operation at a time
# and run early at random, see tests/cuemu/runtime.cc) runs what is
# between streams and processes: comm_cuda and the CLI cases (gpu-train
# with its model and communication streams on one and two ranks); what
# reverse order showed of them, its kernels, the unit tests show, and
# of their streams, the shuffle draws both orders of two streams many
# times a run. A seed per run, printed; CUEMU_SEED=N replays one (the
# host's choices; the progress thread of NCCL's ranks keeps its timing).
# So the CLI cases run once, shuffled: forward order would add nothing
# the two unit passes and the shuffle do not show, for a minute and a
# half of make check. Under SAN=1, which has no reverse or shuffled
# pass, they run in forward order.
ifeq ($(CUEMU_SEED),)
CUEMU_SEED := $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
endif
CUEMU_ENV = PATH=$(abspath tests/cuemu/bin):$$PATH CUEMU_GPUS=2 GK_CUEMU=1 CUEMU_SEED=$(CUEMU_SEED)
CUEMU_RUN_UNIT = $(CUEMU_ENV) CUEMU_ORDER=$(1) $(CUEMU_PROVE) \
	$(filter-out $(CUEMU_MPI),$(CUEMU_UNIT))
CUEMU_RUN_CLI = $(CUEMU_ENV) CUEMU_ORDER=$(1) \
	ASAN_OPTIONS=$${ASAN_OPTIONS:-detect_leaks=0} $(CUEMU_PROVE) $(CUEMU_MPI) $(CUEMU_CLI)
ifeq ($(HAVE_CUDA),1)
check-cuemu: $(CUEMU_UNIT) $(CUEMU_LINKS) $(CUEMU_TOOLS) $(CUEMU_B)/config.mk $(CUEMU_PLANT_BIN)
	@echo "check-cuemu: CUEMU_SEED=$(CUEMU_SEED) (make check-cuemu CUEMU_SEED=$(CUEMU_SEED) replays this run's shuffled orders)"
ifeq ($(SAN),1)
	$(call quiet,PROVE,$(words $(CUEMU_UNIT) $(CUEMU_CLI)) emulated device tests in forward order)$(call CUEMU_RUN_UNIT,forward) && $(call CUEMU_RUN_CLI,forward)
	$(call quiet,PLANT,$(words $(CUEMU_PLANT_BIN)) defects planted in the fused attention caught in forward order)$(call CUEMU_PLANT_RUN,forward)
else
	$(call quiet,PROVE,$(words $(filter-out $(CUEMU_MPI),$(CUEMU_UNIT))) emulated unit tests in forward order)$(call CUEMU_RUN_UNIT,forward)
	$(call quiet,PLANT,$(words $(CUEMU_PLANT_BIN)) defects planted in the fused attention caught in forward order)$(call CUEMU_PLANT_RUN,forward)
	$(call quiet,PROVE,$(words $(filter-out $(CUEMU_MPI),$(CUEMU_UNIT))) emulated unit tests in reverse order)$(call CUEMU_RUN_UNIT,reverse)
	$(call quiet,PLANT,$(words $(CUEMU_PLANT_BIN)) defects planted in the fused attention caught in reverse order)$(call CUEMU_PLANT_RUN,reverse)
	$(call quiet,PROVE,$(words $(CUEMU_MPI) $(CUEMU_CLI)) emulated device tests across streams and ranks in shuffled order (CUEMU_SEED=$(CUEMU_SEED)))$(call CUEMU_RUN_CLI,shuffle)
endif
else
check-cuemu:
	@echo "check-cuemu: skipped: this configuration is built without CUDA (the emulation needs its headers)"
endif
