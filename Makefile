# megatrain: one Makefile.
#   make            build/megatrain (with the CUDA backend when nvcc and a GPU are there; CUDA=1 or
#                   CUDA=0 decides instead)
#   make test       every test (Criterion), then all of them again built with ASan+UBSan (the command
#                   they drive too), then the engine's, the ranks' and the tokenizer's concurrency programs under TSan
#   make demo       train the demo model on the demo corpus and sample from it
# The first rule below is a template object's: `make` alone builds `all` all the same.
.DEFAULT_GOAL := all
CC       ?= cc
CUDA_HOME ?= /usr/local/cuda
NVCC     ?= $(CUDA_HOME)/bin/nvcc
BUILD    ?= build
CUDA     ?= $(shell [ -x $(NVCC) ] && nvidia-smi -L >/dev/null 2>&1 && echo 1 || echo 0)
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -fopenmp -Iinclude -Isrc -MMD -MP
# OpenBLAS built on OpenMP shares our OpenMP threads instead of spinning a second pool (Debian:
# libopenblas-openmp-dev); the default OpenBLAS is used where that variant is absent.
OPENBLAS_OMP := /usr/lib/x86_64-linux-gnu/openblas-openmp
ifneq ($(wildcard $(OPENBLAS_OMP)/libopenblas.so),)
LDLIBS   += -L$(OPENBLAS_OMP) -Wl,-rpath,$(OPENBLAS_OMP)
endif
LDLIBS   += -lopenblas -ljansson -lxxhash -lpcre2-8 -lutf8proc -lyaml -lm -lpthread
# The sanitizer builds are CPU-only whatever CUDA says.
SAN_LDLIBS := $(LDLIBS)
# Machine code for every GPU generation the CUDA backend runs on (compute capability 8.0 and up:
# Ampere sm_80/sm_86, Ada sm_89, Hopper sm_90a, and Blackwell sm_100/sm_120 where this nvcc knows
# them) and PTX of the newest, which a later GPU's driver JIT-compiles. sm_86 and sm_89 share
# compute_80's front end (one cicc run, ptxas per target: the same machine code as their own
# compute_86/89, in two thirds of the time). scripts/check-fatbin.sh checks the built binary.
comma        := ,
NV_GPU_CODES := $(if $(filter 1,$(CUDA)),$(shell $(NVCC) --list-gpu-code 2>/dev/null))
NV_BLACKWELL := $(filter sm_100 sm_120,$(NV_GPU_CODES))
NV_NEWEST    := $(or $(lastword $(sort $(NV_BLACKWELL))),sm_90a)
NV_ARCHS     := -gencode=arch=compute_80,code=[sm_80,sm_86,sm_89] \
                $(foreach sm,sm_90a $(NV_BLACKWELL),-gencode=arch=compute_$(sm:sm_%=%),code=[$(sm)$(if $(filter $(sm),$(NV_NEWEST)),$(comma)compute_$(sm:sm_%=%))])
NVFLAGS  ?= -O2 $(NV_ARCHS)
SAN_CFLAGS := $(CFLAGS)
NVFLAGS  += -std=c++17 -Iinclude -Isrc -Xcompiler -fopenmp -MMD -MP

LIB_C    := $(shell find src -name '*.c' -not -path 'src/cli/*' -not -path 'src/backend/cuda/*' | sort)
CLI_C    := $(sort $(wildcard src/cli/*.c))
CUDA_CU  := $(sort $(shell find src/backend/cuda -name '*.cu' 2>/dev/null))
TEST_C   := $(sort $(wildcard tests/*.c))

ifeq ($(CUDA),1)
# The CUDA backend: its .cu kernels (nvcc) and its host .c files (cc, with the CUDA headers).
CFLAGS   += -DMT_WITH_CUDA -I$(CUDA_HOME)/include
LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublasLt -lcublas -lcudnn -lnccl -lstdc++
CUDA_HOST_C := $(sort $(wildcard src/backend/cuda/*.c))
CUDA_TEST_C := $(sort $(wildcard tests/cuda/*.c))
LIB_OBJ_CU := $(CUDA_CU:%.cu=$(BUILD)/%.o) $(CUDA_HOST_C:%.c=$(BUILD)/%.o)
endif

# The chat templates megatrain knows, built into chat_known.o (.incbin).
CHAT_TEMPLATES := $(wildcard src/tokenizer/templates/*.jinja)
$(foreach b,$(BUILD) $(BUILD)/asan $(BUILD)/tsan,$(b)/src/tokenizer/chat_known.o): $(CHAT_TEMPLATES)

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
	$(CC) $(SAN_CFLAGS) -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -c $< -o $@
# TSan cannot see inside libgomp, so the TSan build runs the OpenMP loops serially.
$(BUILD)/tsan/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -fopenmp,$(SAN_CFLAGS)) -O1 -fsanitize=thread -c $< -o $@
$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(BUILD)/megatrain: $(call objs,$(BUILD),$(LIB_C) $(CLI_C)) $(LIB_OBJ_CU)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/run-tests: $(call objs,$(BUILD),$(LIB_C) $(TEST_C)) $(LIB_OBJ_CU)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) -lcriterion
$(BUILD)/asan/megatrain: $(call objs,$(BUILD)/asan,$(LIB_C) $(CLI_C))
	$(CC) $(SAN_CFLAGS) -fsanitize=address,undefined $^ -o $@ $(SAN_LDLIBS)
$(BUILD)/asan/run-tests: $(call objs,$(BUILD)/asan,$(LIB_C) $(TEST_C))
	$(CC) $(SAN_CFLAGS) -fsanitize=address,undefined $^ -o $@ $(SAN_LDLIBS) -lcriterion
# Criterion cannot run under TSan, so the engine's concurrency test there is a plain program.
$(BUILD)/tsan/engine-tsan: $(call objs,$(BUILD)/tsan,$(LIB_C) tests/tsan/engine_tsan.c)
	$(CC) $(filter-out -fopenmp,$(SAN_CFLAGS)) -fsanitize=thread $^ -o $@ $(SAN_LDLIBS)
$(BUILD)/tsan/ranks-tsan: $(call objs,$(BUILD)/tsan,$(LIB_C) tests/tsan/ranks_tsan.c)
	$(CC) $(filter-out -fopenmp,$(SAN_CFLAGS)) -fsanitize=thread $^ -o $@ $(SAN_LDLIBS)
$(BUILD)/tsan/tokenize-tsan: $(call objs,$(BUILD)/tsan,$(LIB_C) tests/tsan/tokenize_tsan.c)
	$(CC) $(filter-out -fopenmp,$(SAN_CFLAGS)) -fsanitize=thread $^ -o $@ $(SAN_LDLIBS)

# The GPU tests (Criterion suite cuda): a separate binary, built only with CUDA=1.
$(BUILD)/cuda_tests: $(call objs,$(BUILD),$(LIB_C) $(CUDA_TEST_C) tests/tiny_model.c tests/ops_table.c tests/ops_moe.c tests/ops_runner.c tests/ops_check.c) $(LIB_OBJ_CU)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) -lcriterion
cuda-tests: $(BUILD)/cuda_tests

# The CUDA backend's attention at long sequences (bench/attention/run.sh adds PyTorch's SDPA).
bench-attention: $(BUILD)/bench/attention/bench_attention
$(BUILD)/bench/attention/bench_attention: $(call objs,$(BUILD),$(LIB_C) bench/attention/bench_attention.c) $(LIB_OBJ_CU)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# The mixture-of-experts grouped GEMMs, each way the CUDA backend can run them (bench/moe_gemm/run.sh
# adds PyTorch's torch._grouped_mm); its inputs made and results compared on the GPU (bench_device.cu).
bench-moe-gemm: $(BUILD)/bench/moe_gemm/bench_moe_gemm
$(BUILD)/bench/moe_gemm/bench_moe_gemm: $(call objs,$(BUILD),$(LIB_C) bench/moe_gemm/bench_moe_gemm.c) \
		$(BUILD)/bench/moe_gemm/bench_device.o $(LIB_OBJ_CU)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# CPU AdamW against the host's memory bandwidth (bench/adamw/run.sh adds PyTorch's fused AdamW).
bench-adamw: $(BUILD)/bench/adamw/bench_adamw
$(BUILD)/bench/adamw/bench_adamw: $(call objs,$(BUILD),$(LIB_C) bench/adamw/bench_adamw.c) $(LIB_OBJ_CU)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
# The masters' pass beside the device's copies of what it writes (CUDA=1 builds only).
bench-after-norm: $(BUILD)/bench/adamw/bench_after_norm
$(BUILD)/bench/adamw/bench_after_norm: $(call objs,$(BUILD),$(LIB_C) bench/adamw/bench_after_norm.c) $(LIB_OBJ_CU)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# The real tokenizer files the tokenizer tests compare against, kept xz-compressed in the
# repository (tests/data/tokenizers/<name>/tokenizer.json.xz), unpacked here beside their
# tokenizer_config.json; the tests read them from $MT_TOKENIZER_DATA.
TOKENIZER_DATA := $(patsubst tests/data/tokenizers/%/tokenizer.json.xz,$(BUILD)/tokenizers/%,$(wildcard tests/data/tokenizers/*/tokenizer.json.xz))
$(BUILD)/tokenizers/%/tokenizer.json: tests/data/tokenizers/%/tokenizer.json.xz
	@mkdir -p $(dir $@)
	xz -dc $< > $@.tmp && mv $@.tmp $@
$(BUILD)/tokenizers/%/tokenizer_config.json: tests/data/tokenizers/%/tokenizer_config.json
	@mkdir -p $(dir $@)
	cp $< $@
tokenizer-data: $(TOKENIZER_DATA:%=%/tokenizer.json) $(TOKENIZER_DATA:%=%/tokenizer_config.json)

# The test command the README names. Criterion prints its own summary line per run.
test: data/kjv.txt tokenizer-data $(BUILD)/megatrain $(BUILD)/run-tests $(BUILD)/asan/megatrain $(BUILD)/asan/run-tests $(BUILD)/tsan/engine-tsan $(BUILD)/tsan/ranks-tsan $(BUILD)/tsan/tokenize-tsan
	MT_TOKENIZER_DATA=$(BUILD)/tokenizers MT_BIN=$(BUILD)/megatrain $(BUILD)/run-tests --jobs 1
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 MT_TOKENIZER_DATA=$(BUILD)/tokenizers MT_BIN=$(BUILD)/asan/megatrain $(BUILD)/asan/run-tests --jobs 1
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 OPENBLAS_NUM_THREADS=1 $(BUILD)/tsan/engine-tsan
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 OPENBLAS_NUM_THREADS=1 $(BUILD)/tsan/ranks-tsan
	TSAN_OPTIONS=halt_on_error=1 MT_LOG_LEVEL=warn $(BUILD)/tsan/tokenize-tsan
	tests/quickstart.sh

# libFuzzer harnesses (tests/fuzz/fuzz_*.c) over the parsers of files users bring: each is built
# with clang over the library sources it needs and runs FUZZ_SECONDS over its seed corpus
# (tests/fuzz/corpus/<harness>, read only; what it finds goes to $(BUILD)/fuzz/corpus).
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_FLAGS   := -std=c11 -D_GNU_SOURCE -O1 -g -Iinclude -Isrc -Itests/fuzz \
                -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
# The model (src/model: the families, the layer spec, the layout and each block kind's tensors,
# parameters and FLOPs), which config.c and io/hf_config.c read.
MODEL_C      := $(sort $(wildcard src/model/*.c src/model/families/*.c src/model/kinds/*.c))
FUZZ_LIB_C   := src/util/status.c src/util/log.c $(MODEL_C) src/util/json_fields.c src/io/checkpoint.c \
                src/io/hf_config.c src/io/safetensors.c src/io/tokens.c src/io/masked_tokens.c \
                tests/fuzz/tmp_file.c $(wildcard src/tokenizer/*.c) src/util/fs.c src/util/json_kind.c \
                src/util/stop_signal.c src/util/foreign_format.c
FUZZ_HARNESS := $(sort $(basename $(notdir $(wildcard tests/fuzz/fuzz_*.c))))

$(BUILD)/fuzz/%: tests/fuzz/%.c $(FUZZ_LIB_C) $(CHAT_TEMPLATES)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(filter %.c,$^) -o $@ -ljansson -lxxhash -lpcre2-8 -lutf8proc -lm -lpthread

fuzz: $(FUZZ_HARNESS:%=$(BUILD)/fuzz/%)
	set -e; for h in $(FUZZ_HARNESS); do \
	  mkdir -p $(BUILD)/fuzz/corpus/$$h; \
	  MT_LOG_LEVEL=error $(BUILD)/fuzz/$$h -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    -artifact_prefix=$(BUILD)/fuzz/$$h- $(BUILD)/fuzz/corpus/$$h tests/fuzz/corpus/$$h; \
	done

# The long campaign: an hour per harness by default, all harnesses at once, then the new inputs
# that add coverage are merged into the repository's seed corpus (commit them), where every later
# `make fuzz` replays them as regression seeds. A harness that found a crash fails the target.
FUZZ_LONG_SECONDS ?= 3600
fuzz-long: $(FUZZ_HARNESS:%=$(BUILD)/fuzz/%)
	set -e; pids=; for h in $(FUZZ_HARNESS); do \
	  mkdir -p $(BUILD)/fuzz/long/$$h; \
	  MT_LOG_LEVEL=error $(BUILD)/fuzz/$$h -max_total_time=$(FUZZ_LONG_SECONDS) -print_final_stats=1 \
	    -artifact_prefix=$(BUILD)/fuzz/$$h- $(BUILD)/fuzz/long/$$h tests/fuzz/corpus/$$h \
	    > $(BUILD)/fuzz/$$h-long.log 2>&1 & pids="$$pids $$!"; \
	done; fail=0; for p in $$pids; do wait $$p || fail=1; done; exit $$fail
	set -e; for h in $(FUZZ_HARNESS); do \
	  MT_LOG_LEVEL=error $(BUILD)/fuzz/$$h -merge=1 tests/fuzz/corpus/$$h $(BUILD)/fuzz/long/$$h \
	    >> $(BUILD)/fuzz/$$h-long.log 2>&1; \
	  tail -n 12 $(BUILD)/fuzz/$$h-long.log; \
	done

# The demo corpus: the King James Bible as bytes (Debian's bible-kjv packages).
data/kjv.txt: scripts/make-demo-corpus.sh
	scripts/make-demo-corpus.sh $@

demo: $(BUILD)/megatrain data/kjv.txt
	$(BUILD)/megatrain train --preset demo --data data/kjv.txt --out runs/demo --resume
	$(BUILD)/megatrain sample runs/demo --prompt "And God said" --tokens 300

clean:
	rm -rf $(BUILD)

.PHONY: all test demo clean cuda-tests bench-adamw bench-after-norm bench-attention bench-moe-gemm fuzz fuzz-long tokenizer-data
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
