# The two commands of the README: `make demo` and `make test`.
# Both install what the machine lacks (Scripts/install-deps.sh), then build.
# The tests run with a private PostgreSQL cluster (Scripts/with-postgres.sh starts it, names
# it in ASSETCAT_TEST_POSTGRESQL_URL, and stops and removes it afterwards, even on failure).
SWIFT ?= swift
# Arguments of ScaleBenchmarks in `make bench`, e.g. SCALE="--assets 10000000 --files 1000000".
SCALE ?=
# Seconds each fuzz target runs in `make fuzz` (CI runs 30).
FUZZ_SECONDS ?= 1800
# 1: the fuzz targets run at once rather than one after the other (CI).
FUZZ_PARALLEL ?= 0
# Where `make install` puts assetcat, its man page and completions (DESTDIR is prepended).
PREFIX ?= /usr/local
# Tests the test runner runs at once. Unbounded, every test starts at once on a pool of two
# threads and wait on each other's starved tasks: the suite takes 1.5x as long (ASan: 464 s
# against 310 s) and waits bounded at five minutes can run out.
export SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH ?= 16
# The build `make install` installs; `make install-check CONFIGURATION=debug` reuses make test's.
CONFIGURATION ?= release
# A release build links the Swift runtime and Foundation into the binary: every command starts
# 7–9 ms sooner (no dynamic loading and relocation of them; Benchmarks/README.md, Start-up).
STATIC = $(if $(filter release,$(CONFIGURATION)),--static-swift-stdlib,)

.PHONY: deps build demo demo-persistence test test-browser sanitize sanitize-address fuzz bench bench-postgresql lint format install install-check docs

deps:
	@./Scripts/install-deps.sh

build: deps
	$(SWIFT) build

demo: build
	./Scripts/demo.sh

demo-persistence: build
	$(SWIFT) run --skip-build PersistenceDemo

# The build fails on a compiler warning in Sources/ or Tests/ (Scripts/build-without-warnings.sh).
# Then the Swift tests, then the multi-host suites again behind pgbouncer (session mode), then
# `assetcat serve` in headless Chromium (Tests/Browser/browse.py). The browser's packages, and
# PostgreSQL's and pgbouncer's, are installed in the background while the build runs (a first
# cluster started and stopped; its log is .build/postgresql-install.log).
test: deps
	./Scripts/install-browser.sh --background
	mkdir -p .build && { ./Scripts/with-postgres.sh true >.build/postgresql-install.log 2>&1 & }
	./Scripts/build-without-warnings.sh $(SWIFT) build --build-tests
	./Scripts/with-postgres.sh $(SWIFT) test --skip-build
	./Scripts/with-postgres.sh ./Scripts/test-behind-pgbouncer.sh $(SWIFT)
	$(MAKE) --no-print-directory test-browser

# The browser test alone, with the assetcat of the last build: screenshots in .build/browser-screenshots/.
test-browser:
	./Scripts/install-browser.sh --wait
	ASSETCAT="$$($(SWIFT) build --show-bin-path)/assetcat" python3 Tests/Browser/browse.py

# The whole suite under AddressSanitizer, then ThreadSanitizer; fails on any report.
sanitize: deps
	SWIFT=$(SWIFT) ./Scripts/with-postgres.sh ./Scripts/sanitize.sh

# AddressSanitizer only: the quicker half of `make sanitize`.
sanitize-address: deps
	SWIFT=$(SWIFT) ./Scripts/with-postgres.sh ./Scripts/sanitize.sh --asan-only

# The libFuzzer targets of Fuzz/ (our parsers of hostile input), FUZZ_SECONDS each; a finding
# is written to Fuzz/crashes/<target>/ and fails the run.
fuzz: deps
	SWIFT=$(SWIFT) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_PARALLEL=$(FUZZ_PARALLEL) ./Scripts/fuzz.sh

bench: deps
	$(SWIFT) build -c release --static-swift-stdlib --scratch-path .build-bench --product assetcat
	$(SWIFT) run -c release --package-path Benchmarks PersistenceBenchmarks
	$(SWIFT) run -c release --package-path Benchmarks ArchiveBenchmarks
	ASSETCAT=$(CURDIR)/.build-bench/release/assetcat $(SWIFT) run -c release --package-path Benchmarks CatalogBenchmarks
	ASSETCAT=$(CURDIR)/.build-bench/release/assetcat $(SWIFT) run -c release --package-path Benchmarks BundleBenchmarks
	$(SWIFT) run -c release --package-path Benchmarks JobBenchmarks
	ASSETCAT=$(CURDIR)/.build-bench/release/assetcat $(SWIFT) run -c release --package-path Benchmarks ScaleBenchmarks $(SCALE)

# Several hosts on one PostgreSQL catalog (Benchmarks/README.md), each suite with a private server.
bench-postgresql: deps
	$(SWIFT) build -c release --static-swift-stdlib --scratch-path .build-bench --product assetcat
	ASSETCAT=$(CURDIR)/.build-bench/release/assetcat ./Scripts/with-postgres.sh $(SWIFT) run -c release --package-path Benchmarks IngestBenchmarks
	ASSETCAT_POSTGRESQL_DURABLE=1 ./Scripts/with-postgres.sh $(SWIFT) run -c release --package-path Benchmarks JobBenchmarks --postgresql --workers 4 --repeat 3
	$(SWIFT) run -c release --package-path Benchmarks JobBenchmarks --workers 4 --repeat 3 --only throughput,workers
	ASSETCAT=$(CURDIR)/.build-bench/release/assetcat ./Scripts/with-postgres.sh $(SWIFT) run -c release --package-path Benchmarks ScaleBenchmarks --postgresql --assets 1000000

install: deps
	$(SWIFT) build -c $(CONFIGURATION) $(STATIC) --product assetcat
	SWIFT=$(SWIFT) BUILD_FLAGS="$(STATIC)" ./Scripts/install.sh $(CONFIGURATION) "$(DESTDIR)$(PREFIX)"

# `make install` into a temporary DESTDIR, then checks the binary, man page and completions.
install-check: deps
	$(SWIFT) build -c $(CONFIGURATION) $(STATIC) --product assetcat
	SWIFT=$(SWIFT) BUILD_FLAGS="$(STATIC)" ./Scripts/check-install.sh $(CONFIGURATION) "$(PREFIX)"

# The DocC documentation of every library module, failing on a DocC warning.
docs: deps
	SWIFT=$(SWIFT) ./Scripts/docs.sh

lint:
	$(SWIFT) format lint -r --strict Sources Tests Package.swift

format:
	$(SWIFT) format format -i -r Sources Tests Package.swift
