# Thin wrapper over CMake. The two commands a fresh machine needs:
#   make run    build and run the demo (opreg demo)
#   make test   build and run every test suite (ctest)
# Others: make bench, make install [PREFIX=/usr/local], make asan, make clean.

BUILD ?= build
PREFIX ?= /usr/local
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all setup configure build run test bench install asan clean

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

asan:
	$(MAKE) test BUILD=$(BUILD)-asan CMAKE_FLAGS="-DOPREG_SANITIZE=ON -DOPREG_BUILD_BENCH=OFF"

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-bench
