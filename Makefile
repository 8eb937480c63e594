# The two commands of the README: `make demo` and `make test`.
# Both install what the machine lacks (Scripts/install-deps.sh), then build.
# The tests run with a private PostgreSQL cluster (Scripts/with-postgres.sh starts it, names
# it in ASSETCAT_TEST_POSTGRESQL_URL, and stops and removes it afterwards, even on failure).
SWIFT ?= swift
# Arguments of ScaleBenchmarks in `make bench`, e.g. SCALE="--assets 10000000 --files 1000000".
SCALE ?=
# Seconds each fuzz target runs in `make fuzz` (CI runs 30).
FUZZ_SECONDS ?= 1800

.PHONY: deps build demo demo-persistence test sanitize sanitize-address fuzz bench lint format

deps:
	@./Scripts/install-deps.sh

build: deps
	$(SWIFT) build

demo: build
	./Scripts/demo.sh

demo-persistence: build
	$(SWIFT) run --skip-build PersistenceDemo

test: deps
	$(SWIFT) build --build-tests
	./Scripts/with-postgres.sh $(SWIFT) test --skip-build

# The whole suite under AddressSanitizer, then ThreadSanitizer; fails on any report.
sanitize: deps
	SWIFT=$(SWIFT) ./Scripts/with-postgres.sh ./Scripts/sanitize.sh

# AddressSanitizer only: what CI runs after `make test` (both sanitizers do not fit its time).
sanitize-address: deps
	SWIFT=$(SWIFT) ./Scripts/with-postgres.sh ./Scripts/sanitize.sh --asan-only

# The libFuzzer targets of Fuzz/ (our parsers of hostile input), FUZZ_SECONDS each; a finding
# is written to Fuzz/crashes/<target>/ and fails the run.
fuzz: deps
	SWIFT=$(SWIFT) FUZZ_SECONDS=$(FUZZ_SECONDS) ./Scripts/fuzz.sh

bench: deps
	$(SWIFT) build -c release --scratch-path .build-bench --product assetcat
	$(SWIFT) run -c release --package-path Benchmarks PersistenceBenchmarks
	$(SWIFT) run -c release --package-path Benchmarks ArchiveBenchmarks
	ASSETCAT=$(CURDIR)/.build-bench/release/assetcat $(SWIFT) run -c release --package-path Benchmarks CatalogBenchmarks
	ASSETCAT=$(CURDIR)/.build-bench/release/assetcat $(SWIFT) run -c release --package-path Benchmarks BundleBenchmarks
	$(SWIFT) run -c release --package-path Benchmarks JobBenchmarks
	ASSETCAT=$(CURDIR)/.build-bench/release/assetcat $(SWIFT) run -c release --package-path Benchmarks ScaleBenchmarks $(SCALE)

lint:
	$(SWIFT) format lint -r --strict Sources Tests Package.swift

format:
	$(SWIFT) format format -i -r Sources Tests Package.swift
