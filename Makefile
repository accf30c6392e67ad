# campaign: bulk APNs campaigns over the HTTP/2 provider API and the binary interface.
#   make test    install what is missing, build, run every test
#   make demo    certificates, simulator, plan | send, report (out/demo/)
#   make nightly (feedback →) plan → send for one campaign, from cron (scripts/nightly.sh)

SWIFT        ?= swift
# What building and running campaign needs (GNU parallel sends plan parts;
# tzdata: the zones of scheduled campaigns, read from /usr/share/zoneinfo)…
RUNTIME_APT_PACKAGES := libssl-dev libcsv-dev zlib1g-dev libnghttp2-dev pkg-config parallel tzdata
# …and what only the tests and the bench start (tinyproxy: a real HTTP proxy in front of the simulator, for --proxy).
APT_PACKAGES := $(RUNTIME_APT_PACKAGES) nghttp2-client curl tinyproxy
# Offline validation of deploy/k8s against Kubernetes' schemas (it carries
# them); a Python HTTP/2 client (httpx with h2) for the simulator's tests and the bench;
# scipy and statsmodels, the peers `campaign results`' statistics are checked against.
PIP_PACKAGES := kubernetes-validate==1.37.0 httpx[http2]==0.28.1 scipy==1.17.1 statsmodels==0.15.0
SUDO         := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
RELEASE_BIN  := .build/release/campaign

PREFIX       ?= /usr/local

.PHONY: deps deps-runtime build release install test bench demo nightly nightly-build sanitize fuzz clean

# Installs only the Debian packages that are missing; a machine that has them
# all runs no apt command at all.
define install_missing
	@missing=""; \
	for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "Installing:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi
endef

# What a build and a nightly run need: Debian packages only, nothing from PyPI.
deps-runtime:
	$(call install_missing,$(RUNTIME_APT_PACKAGES))

deps:
	$(call install_missing,$(APT_PACKAGES))
	@python3 -c 'import kubernetes_validate, httpx, h2, scipy, statsmodels' 2>/dev/null || python3 -m pip install -q $(if $(SUDO),--user) $(PIP_PACKAGES)

build: deps-runtime
	$(SWIFT) build

release: deps-runtime
	$(SWIFT) build -c release

# The release binary into $(PREFIX)/bin (make install PREFIX=$$HOME/.local for no root).
install: release
	install -d "$(PREFIX)/bin"
	install -m 0755 $(RELEASE_BIN) "$(PREFIX)/bin/campaign"
	@echo "installed $(PREFIX)/bin/campaign"

# The suite runs in three phases, so that no test judged by the wall clock
# shares the machine with the rest of the suite:
#   1. everything else, TEST_WIDTH tests at a time: these wait for events (a
#      record count, a journal record, a phase), and their time bounds are
#      backstops. Most of them spend their time waiting (for a moment a minute
#      away, a hostile server's timeouts), hence 8 a core: the CPU they use
#      at once stays near the core count.
#   2. the tests listed in Tests/wall-clock-tests (each asserts a real-time
#      bound the product promises, such as a send ending within 10 s of its
#      first signal), WALL_CLOCK_WIDTH at a time: they too mostly wait (for a
#      signal's moment, a rate-limited send, a minute's wave), using a fraction
#      of a core between them, so nothing CPU-bound shares the machine with them;
#      REAL_WAVE, the minute-long real wave among them, starts at once beside
#      the rest (from the test bundle itself: `swift test` holds the build
#      folder's lock), so that its minute overlaps theirs;
#   3. QUIET_TESTS, alone: the pool sizer judges each step by the send rate it
#      measured, and the campaign throttle is judged per 10-second window by
#      when the simulator received each notification; any other load on the
#      same cores makes noise of those rates (a simulator starved for a second
#      records a second's arrivals in the next window).
# Widths follow the core count; the suites that wait do so on threads of
# their own (`.ownThreads`, Tests/CampaignTestSupport), not the cooperative pool's.
CORES        ?= $(shell nproc 2>/dev/null || echo 2)
TEST_WIDTH   ?= $(shell echo $$(( $(CORES) * 8 )))
WALL_CLOCK_WIDTH ?= $(shell echo $$(( $(CORES) * 4 )))
QUIET_TESTS  := ConnectionPoolTests/(onLoopbackThePoolStaysSmall|farAwayThePoolGrowsWithinItsMaximum)|ScaleOutTests/aThrottleHoldsTheCampaignsRateOverItsPartsThroughAKillAndAResume
REAL_WAVE    := ScheduledWaveRealTimeTests
# Tests/wall-clock-tests as one filter: its lines, comments and blanks left out.
WALL_CLOCK_TESTS := $(shell sed -e 's/\#.*//' -e 's/[[:space:]]*$$//' -e '/^$$/d' Tests/wall-clock-tests | paste -sd'|')

# Under a sanitizer every test runs several times slower: fewer at once, so
# that a loaded machine does not make a healthy gateway look dead.
SANITIZE_WIDTH ?= 2

# The three phases; fails when any failed. $(1): `swift test` options;
# $(2): the first phase's width; $(3): environment; $(4): the second phase's width.
define run_suite
	@status=0; \
	echo "phase 1 of 3: all but the wall-clock tests, $(2) at a time"; \
	$(3) SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=$(2) $(SWIFT) test --skip-build $(1) --skip '$(QUIET_TESTS)|$(WALL_CLOCK_TESTS)' || status=1; \
	echo "phase 2 of 3: the tests of Tests/wall-clock-tests, $(4) at a time"; \
	bundle="$$($(SWIFT) build $(1) --show-bin-path)/campaignPackageTests.xctest"; wave_log=$$(mktemp); \
	$(3) "$$bundle" --testing-library swift-testing --filter '$(REAL_WAVE)' > $$wave_log 2>&1 & wave=$$!; \
	$(3) SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=$(4) $(SWIFT) test --skip-build $(1) --filter '$(WALL_CLOCK_TESTS)' --skip '$(QUIET_TESTS)|$(REAL_WAVE)' || status=1; \
	wait $$wave || status=1; echo "$(REAL_WAVE), beside them:"; cat $$wave_log; rm -f $$wave_log; \
	echo "phase 3 of 3: $(QUIET_TESTS), alone"; \
	$(3) SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=1 $(SWIFT) test --skip-build $(1) --filter '$(QUIET_TESTS)' || status=1; \
	exit $$status
endef

test: deps
	$(SWIFT) build --build-tests
	$(call run_suite,,$(TEST_WIDTH),,$(WALL_CLOCK_WIDTH))
	bash deploy/k8s/validate.sh
	python3 scripts/check_products.py

# Throughput and memory of plan and send beside their limits (release builds,
# medians of 3 runs); results in out/bench/results.json. Not part of `make test`.
# Needs GNU time for peak RSS. ROWS, BIG_ROWS and RUNS may be set. The last
# step sends over HTTP/2 from an emulated distance (round trips of 0, 50 and
# 150 ms: out/bench/distance.json; DISTANCE_SECONDS caps each run, 30; each
# count runs DISTANCE_REPEATS times, 3, and the table gives medians).
bench: deps
	@command -v /usr/bin/time >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq time; }
	$(SWIFT) build -c release --product campaign
	$(SWIFT) build -c release --product campaign-bench
	python3 scripts/bench.py
	.build/release/campaign-bench simulator --notifications 2000000 --runs 3 --connections 1 --record
	python3 scripts/bench_h2.py
	.build/release/campaign-bench h2-sessions --requests 500000 --streams 100
	python3 scripts/bench_distance.py

# The tests under ThreadSanitizer and AddressSanitizer (separate build folders),
# then the credential loaders in a release build under AddressSanitizer (only
# release builds release an array after its last use: scripts/sanitize-credentials.sh).
# Leak detection at exit is off for ASan: the test runner's Foundation.Process
# and XCTest leave allocations LeakSanitizer reports (see docs/reliability notes).
sanitize: deps
	$(SWIFT) build --build-tests --sanitize=thread --scratch-path .build-tsan
	$(call run_suite,--sanitize=thread --scratch-path .build-tsan,$(SANITIZE_WIDTH),,$(SANITIZE_WIDTH))
	$(SWIFT) build --build-tests --sanitize=address --scratch-path .build-asan
	$(call run_suite,--sanitize=address --scratch-path .build-asan,$(SANITIZE_WIDTH),ASAN_OPTIONS=detect_leaks=0,$(SANITIZE_WIDTH))
	$(SWIFT) build -c release --product campaign --sanitize=address --scratch-path .build-asan-release
	bash scripts/sanitize-credentials.sh .build-asan-release/release/campaign

# libFuzzer on each parser of untrusted input (campaign-fuzz targets: wire,
# csv, ndjson, job, plan), FUZZ_SECONDS each, from the seeds and regressions in
# Tests/Corpus/fuzz/. New corpus entries go to out/fuzz/corpus/, crashes to
# out/fuzz/crashes/ (copy each into Tests/Corpus/fuzz/TARGET/ once fixed: the
# tests replay that folder). AddressSanitizer is on; leak detection is off,
# since Swift keeps enum tags in the spare bits of heap pointers, which hides
# live objects from LeakSanitizer's scan (docs/reliability.md).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= wire csv ndjson job plan
fuzz: deps
	$(SWIFT) build -c release --scratch-path .build-fuzz --product campaign-fuzz \
	  -Xswiftc -sanitize=fuzzer,address -Xswiftc -DCAMPAIGN_FUZZING -Xswiftc -use-ld=lld
	@mkdir -p out/fuzz/crashes
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p out/fuzz/corpus/$$t; \
	  echo "fuzz $$t: $(FUZZ_SECONDS) s"; \
	  SWIFT_BACKTRACE=enable=no ASAN_OPTIONS=detect_leaks=0 .build-fuzz/release/campaign-fuzz $$t -max_total_time=$(FUZZ_SECONDS) \
	    -detect_leaks=0 -rss_limit_mb=2048 -max_len=16384 -timeout=10 -print_final_stats=1 \
	    -artifact_prefix=out/fuzz/crashes/$$t- out/fuzz/corpus/$$t Tests/Corpus/fuzz/$$t \
	    > out/fuzz/$$t.log 2>&1 || { tail -40 out/fuzz/$$t.log; exit 1; }; \
	  grep -E "^stat::number_of_executed_units|^#.*DONE" out/fuzz/$$t.log | sed "s/^/  /"; \
	done

# The whole pipeline against the simulator on 127.0.0.1; outputs under out/demo/.
demo: deps
	$(SWIFT) build -c release --product campaign
	bash scripts/demo.sh

# (feedback →) plan → send for one campaign; see scripts/nightly.sh for the
# variables (LEDGER=DIR: the app's send ledger, README "Campaign rules"; PARTS=N: the plan in N parts, sent by deploy/parallel.sh, JOBS at
# a time). With BIN=/path/to/campaign (an installed binary) nothing is built or
# installed: it runs under cron's bare environment without a Swift toolchain.
nightly: $(if $(BIN),,nightly-build)
	BIN="$(or $(BIN),$(RELEASE_BIN))" bash scripts/nightly.sh

nightly-build: deps-runtime
	$(SWIFT) build -c release --product campaign

clean:
	rm -rf .build out
