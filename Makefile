# kvserve: one-command entry points. `make test` and `make serve` work on a fresh Debian 12.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
ARGS ?=

.PHONY: setup configure build test serve bench format clean

setup:
	./scripts/setup.sh
	@if [ -x tests/tokenizer_reference/setup.sh ]; then tests/tokenizer_reference/setup.sh; fi
	@if [ -x tests/openai/setup.sh ]; then tests/openai/setup.sh; fi
	@if [ -x tests/constraint/validator/setup.sh ]; then tests/constraint/validator/setup.sh; fi

configure: setup
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

serve: build
	./scripts/serve.sh $(BUILD_DIR) $(ARGS)

bench: build
	cmake --build $(BUILD_DIR) -j $(JOBS) --target kvserve_benchmarks
	./scripts/bench.sh $(BUILD_DIR)

format:
	git ls-files -co --exclude-standard -- '*.h' '*.cc' | xargs clang-format -i

# ASan+UBSan and TSan builds (build-asan, build-tsan), tests, e2e and a soak under each; not
# part of `make test`. e.g. make sanitize SANITIZE_ARGS="--only thread --soak-minutes 10"
SANITIZE_ARGS ?=

.PHONY: sanitize
sanitize: setup
	./scripts/sanitize.sh $(SANITIZE_ARGS)

clean:
	rm -rf $(BUILD_DIR)
