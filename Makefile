# The two set-up commands of the README.  Both install what is missing
# (Debian packages, when run as root), build with CMake and then either train
# the default model (demo) or run the whole test suite (test).
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= 2
DEPS = cmake gcc g++ make pkg-config libopenblas-openmp-dev libcmocka-dev zlib1g-dev libdnnl-dev libjemalloc-dev \
       dataset-fashion-mnist valgrind bible-kjv clang libclang-rt-14-dev libomp-dev openmpi-bin libopenmpi-dev \
       gnuplot-nox python3 python3-torch python3-pytest
FUZZ_BUILD ?= build-fuzz
# Seconds each fuzz target runs in `make test` (the long campaign: tests/fuzz/CMakeLists.txt).
FUZZ_SECONDS ?= 60
# The default text corpus: the King James Bible from Debian's bible-kjv, as
# plain text without verse references (see tools/make_kjv_corpus.sh).
KJV ?= $(BUILD)/data/kjv.txt

.PHONY: all deps build demo test test-asan test-fuzz clean corpus python

all: build

deps:
	@missing=""; for p in $(DEPS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else \
	    echo "missing Debian packages:$$missing"; echo "run as root, or: sudo apt-get install$$missing"; exit 1; \
	  fi; \
	fi

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j$(JOBS)

corpus: $(KJV)

$(KJV): tools/make_kjv_corpus.sh | deps
	bash tools/make_kjv_corpus.sh $@

# ResNet-20 on Fashion-MNIST under none and gact:4, the same short recipe:
# accuracy, context, peaks and speed side by side, and the plots
# (build/demo/report.md).
demo: build
	rm -rf $(BUILD)/demo
	./$(BUILD)/actc bench --suite demo --out $(BUILD)/demo

# The PyTorch package (python/, see python/README.md): builds the library and
# checks that Debian's python3 loads it through the package; use it with
# PYTHONPATH=python, or pip install ./python.
python: build
	ACTC_LIBRARY=$(abspath $(BUILD)) PYTHONPATH=$(CURDIR)/python /usr/bin/python3 -c \
	  'import actc, actc.torch; print("actc", actc.__version__, "for PyTorch", actc.torch.torch.__version__, "on", actc.library_path)'
	@echo "use it: PYTHONPATH=$(CURDIR)/python python3 train.py   (or: pip install ./python)"

# The release suite, then the unit tests again under AddressSanitizer and
# UndefinedBehaviorSanitizer (the long CLI training runs and the MPI tests,
# whose allocations are Open MPI's, are left to the first), then every fuzz
# target for FUZZ_SECONDS (libFuzzer, clang).
test: build $(KJV)
	cd $(BUILD) && ctest --output-on-failure
	$(MAKE) test-asan
	$(MAKE) test-fuzz

test-asan: deps $(KJV)
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DACTC_SANITIZE=ON -DACTC_TEXT_CORPUS=$(abspath $(KJV))
	cmake --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -LE 'cli|mpi|python'

test-fuzz: deps
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DACTC_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug -DACTC_FUZZ_SECONDS=$(FUZZ_SECONDS)
	cmake --build $(FUZZ_BUILD) -j$(JOBS)
	cd $(FUZZ_BUILD) && ctest --output-on-failure -L fuzz -j$(JOBS)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
