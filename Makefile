# The two commands the README starts with: `make demo` and `make test`.
BUILD ?= build
JOBS ?= $(shell nproc)
PY := /usr/bin/python3
DEMO := $(BUILD)/demo

.PHONY: all deps configure build test demo clean

all: build

deps:
	@sh scripts/deps.sh $(BUILD)

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

configure: deps $(BUILD)/build.ninja

build: configure
	ninja -C $(BUILD) -j$(JOBS)

# ctest lists the tests that skipped (the GPU tests on a machine without one)
# after its summary; the summary is repeated so that it is the closing line.
test: build
	cd $(BUILD) && { ctest --output-on-failure --no-label-summary -j$(JOBS); echo $$? > ctest.rc; } 2>&1 | tee ctest.log; \
	  grep -E '^[0-9]+% tests passed' ctest.log | tail -1; exit $$(cat ctest.rc)

demo: build
	sh scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD)
