# The README's two commands. Both install what is missing and build first.
.PHONY: setup demo test fuzz

setup:
	scripts/setup.sh

# The demo needs the binary alone, about half of the whole build.
demo:
	scripts/setup.sh tessera
	./build/tessera train

test: setup
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ctest --test-dir build --output-on-failure --timeout 900 -j $$(nproc)

# The libFuzzer targets of the parsers, 10 seconds each (Clang build in build-fuzz/).
fuzz: setup
	scripts/fuzz.sh 10
