# vitddp: thin wrapper around CMake/CTest.
#   make deps   install Debian packages (Open MPI, HDF5, Catch2, ...)
#   make        build (build/vitddp and the test binaries)
#   make test   run every test this machine can run (GPU tests only where a GPU is visible)
#   make run    the main job: all local GPUs, ViT-L/32, batch 32 (CPU backend + vit_tiny without GPU)
# The CPU backend alone: make test BUILD=build-cpu CMAKE_FLAGS=-DVITDDP_GPU=OFF
BUILD ?= build
CMAKE_FLAGS ?=
export PATH := /usr/local/cuda/bin:$(PATH)
NGPUS := $(shell nvidia-smi -L 2>/dev/null | grep -c '^GPU')
MPIRUN := OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0
STAMP := $(shell date +%Y%m%d-%H%M%S)

.PHONY: all deps test run clean

all: $(BUILD)/build.ninja
	cmake --build $(BUILD)

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

deps:
	bash .ci/install-deps.sh

test: all
ifeq ($(NGPUS),0)
	@echo "no GPU visible: running every test but those labelled gpu"
	cd $(BUILD) && ctest --output-on-failure -LE gpu
else
	cd $(BUILD) && ctest --output-on-failure
endif

run: all
	mkdir -p results/runs
ifeq ($(NGPUS),0)
	@echo "no GPU visible: running the CPU backend with the small model vit_tiny on 2 ranks"
	NCCL_NVLS_ENABLE=0 $(MPIRUN) --oversubscribe -np 2 $(BUILD)/vitddp --backend cpu --model vit_tiny \
	  --batch-size 16 --warmup-steps 2 --steps 5 --out results/runs/cpu-vit_tiny-$(STAMP).h5
else
	NCCL_NVLS_ENABLE=0 $(MPIRUN) -np $(NGPUS) $(BUILD)/vitddp --model vit_l_32 --batch-size 32 \
	  --out results/runs/gpu-vit_l_32-np$(NGPUS)-$(STAMP).h5
endif

clean:
	rm -rf $(BUILD)
