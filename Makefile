# megatrain: one Makefile.
#   make            build/megatrain (CPU backend; CUDA=1 adds the CUDA backend)
#   make test       the unit, gradient and reference tests (Criterion), then ASan+UBSan and TSan runs
#   make demo       train the demo model on the demo corpus and sample from it
CC       ?= cc
NVCC     ?= nvcc
BUILD    ?= build
CUDA     ?= 0
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -fopenmp -Iinclude -Isrc -MMD -MP
# OpenBLAS built on OpenMP shares our OpenMP threads instead of spinning a second pool (Debian:
# libopenblas-openmp-dev); the default OpenBLAS is used where that variant is absent.
OPENBLAS_OMP := /usr/lib/x86_64-linux-gnu/openblas-openmp
ifneq ($(wildcard $(OPENBLAS_OMP)/libopenblas.so),)
LDLIBS   += -L$(OPENBLAS_OMP) -Wl,-rpath,$(OPENBLAS_OMP)
endif
LDLIBS   += -lopenblas -ljansson -lxxhash -lm -lpthread
NVFLAGS  ?= -O2 -gencode=arch=compute_90a,code=sm_90a
NVFLAGS  += -std=c++17 -Iinclude -Isrc -Xcompiler -fopenmp -MMD -MP

LIB_C    := $(shell find src -name '*.c' -not -path 'src/cli/*' -not -path 'src/backend/cuda/*' | sort)
CLI_C    := $(sort $(wildcard src/cli/*.c))
CUDA_CU  := $(sort $(shell find src/backend/cuda -name '*.cu' 2>/dev/null))
TEST_C   := $(sort $(wildcard tests/*.c))

ifeq ($(CUDA),1)
# The CUDA backend: its .cu kernels (nvcc) and its host .c files (cc, with the CUDA headers).
CUDA_HOME ?= /usr/local/cuda
CFLAGS   += -DMT_WITH_CUDA -I$(CUDA_HOME)/include
LDLIBS   += -L$(CUDA_HOME)/lib64 -lcudart -lcublasLt -lcublas -lstdc++
CUDA_HOST_C := $(sort $(wildcard src/backend/cuda/*.c))
CUDA_TEST_C := $(sort $(wildcard tests/cuda/*.c))
LIB_OBJ_CU := $(CUDA_CU:%.cu=$(BUILD)/%.o) $(CUDA_HOST_C:%.c=$(BUILD)/%.o)
endif

define objs
$(patsubst %.c,$(1)/%.o,$(2))
endef

all: $(BUILD)/megatrain

# Three builds of the same sources: plain, ASan+UBSan, TSan.
$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@
$(BUILD)/asan/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -c $< -o $@
# TSan cannot see inside libgomp, so the TSan build runs the OpenMP loops serially.
$(BUILD)/tsan/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -fopenmp,$(CFLAGS)) -O1 -fsanitize=thread -c $< -o $@
$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(BUILD)/megatrain: $(call objs,$(BUILD),$(LIB_C) $(CLI_C)) $(LIB_OBJ_CU)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/run-tests: $(call objs,$(BUILD),$(LIB_C) $(TEST_C)) $(LIB_OBJ_CU)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) -lcriterion
$(BUILD)/asan/run-tests: $(call objs,$(BUILD)/asan,$(LIB_C) $(TEST_C))
	$(CC) $(CFLAGS) -fsanitize=address,undefined $^ -o $@ $(filter-out -lcudart -lcublasLt -lcublas,$(LDLIBS)) -lcriterion
$(BUILD)/tsan/run-tests: $(call objs,$(BUILD)/tsan,$(LIB_C) $(TEST_C))
	$(CC) $(filter-out -fopenmp,$(CFLAGS)) -fsanitize=thread $^ -o $@ $(filter-out -lcudart -lcublasLt -lcublas,$(LDLIBS)) -lcriterion

# The GPU tests (Criterion suite cuda): a separate binary, built only with CUDA=1.
$(BUILD)/cuda_tests: $(call objs,$(BUILD),$(LIB_C) $(CUDA_TEST_C) tests/tiny_model.c) $(LIB_OBJ_CU)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) -lcriterion
cuda-tests: $(BUILD)/cuda_tests

# CPU AdamW against the host's memory bandwidth (bench/adamw/run.sh adds PyTorch's fused AdamW).
bench-adamw: $(BUILD)/bench/adamw/bench_adamw
$(BUILD)/bench/adamw/bench_adamw: $(call objs,$(BUILD),$(LIB_C) bench/adamw/bench_adamw.c) $(LIB_OBJ_CU)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# The test command the README names. Criterion prints its own summary line per run.
test: $(BUILD)/megatrain $(BUILD)/run-tests $(BUILD)/asan/run-tests $(BUILD)/tsan/run-tests
	MT_BIN=$(BUILD)/megatrain $(BUILD)/run-tests --jobs 1
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 MT_BIN=$(BUILD)/megatrain $(BUILD)/asan/run-tests --jobs 1 --filter '!(slow|engine)/*'
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 OPENBLAS_NUM_THREADS=1 $(BUILD)/tsan/run-tests --jobs 1 --filter 'engine/*'

demo: $(BUILD)/megatrain
	$(BUILD)/megatrain train --preset demo --out runs/demo
	$(BUILD)/megatrain sample runs/demo --prompt "And God said" --tokens 200

clean:
	rm -rf $(BUILD)

.PHONY: all test demo clean cuda-tests bench-adamw
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
