# Thin wrapper over CMake. The two commands a fresh machine needs:
#   make run    build and run the demo (opreg demo)
#   make test   build and run every test suite (ctest)
# Others: make bench, make install [PREFIX=/usr/local], make asan, make clang, make clean.

BUILD ?= build
PREFIX ?= /usr/local
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all setup configure build run test bench install asan tsan fuzz clang clean

all: build

setup:
	@sh scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/tools/opreg demo

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench:
	@sh scripts/setup.sh bench
	@cmake -S . -B $(BUILD)-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPREG_BUILD_TESTS=OFF >/dev/null
	@cmake --build $(BUILD)-bench -j $(JOBS) --target bench

install: build
	cmake --install $(BUILD)

# The suites under ASan + UBSan, benchmarks aside. Not the ROCm plugin: no test here can
# run it, and `make test` compiles it already (a third of a build's time).
asan:
	$(MAKE) test BUILD=$(BUILD)-asan CMAKE_FLAGS="-DOPREG_SANITIZE=ON -DOPREG_BUILD_BENCH=OFF -DOPREG_BUILD_ROCM=OFF"

# ThreadSanitizer build, in Release (-O3, where gcc's flow warnings appear) so that it
# also shows the whole project builds warning-free there: the threads suite, the
# autograd suite and the hostile-input suites, with OpenMP and OpenBLAS on one thread
# (tests/CMakeLists.txt says why). No GPU plugins, no emulation.
tsan:
	@sh scripts/setup.sh
	@cmake -S . -B $(BUILD)-tsan -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-g -DOPREG_TSAN=ON \
		-DOPREG_BUILD_BENCH=OFF -DOPREG_BUILD_CUDA=OFF -DOPREG_BUILD_ROCM=OFF -DOPREG_BUILD_GPU_EMU=OFF >/dev/null
	@cmake --build $(BUILD)-tsan -j $(JOBS)
	cd $(BUILD)-tsan && ctest --output-on-failure -j $(JOBS) -R '^(test_threads|test_autograd|test_hostile|test_misuse|test_yaml|test_core)$$'

# libFuzzer harnesses (tests/fuzz) in a clang build with ASan + UBSan, GPU plugins off:
# the whole project is built (so clang sees it warning-free), the committed regression
# inputs and the seeds are replayed, then each harness fuzzes for FUZZ_SECONDS
# (FUZZ_SEED fixes libFuzzer's seed; empty: a random one).
FUZZ_SECONDS ?= 600
FUZZ_SEED ?=
fuzz:
	@sh scripts/setup.sh fuzz
	@CC=clang CXX=clang++ cmake -S . -B $(BUILD)-fuzz -G Ninja -DOPREG_FUZZ=ON -DOPREG_BUILD_BENCH=OFF \
		-DOPREG_BUILD_CUDA=OFF -DOPREG_BUILD_ROCM=OFF -DOPREG_BUILD_GPU_EMU=OFF >/dev/null
	@cmake --build $(BUILD)-fuzz -j $(JOBS)
	cd $(BUILD)-fuzz && ctest --output-on-failure -L fuzz
	FUZZ_BUILD=$(BUILD)-fuzz FUZZ_SEED=$(FUZZ_SEED) sh tests/fuzz/run.sh $(FUZZ_SECONDS)

# The whole project with its default options, benchmarks aside (gcc builds those), built by
# clang (warning-free, as with gcc: -Werror), then only the suites of the emulated CUDA plugin, whose C++ is where
# the compilers differ most (half types); the rest is tested by the gcc builds. Not the ROCm
# plugin: hipcc is clang already, and the default build compiles it (a third of a build's time).
clang:
	@sh scripts/setup.sh fuzz
	@CC=clang CXX=clang++ cmake -S . -B $(BUILD)-clang -G Ninja -DOPREG_BUILD_BENCH=OFF -DOPREG_BUILD_ROCM=OFF >/dev/null
	@cmake --build $(BUILD)-clang -j $(JOBS)
	cd $(BUILD)-clang && ctest --output-on-failure -j $(JOBS) -R '^(test_gpu_emu|cuda_check_emu)$$'

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-bench $(BUILD)-tsan $(BUILD)-fuzz $(BUILD)-clang
