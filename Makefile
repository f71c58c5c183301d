# redis-ratelimit: build, run and test the Redis module.
#
#   make run    build the module and start redis-server in the foreground on 127.0.0.1:6379
#   make test   unit, property and integration tests (against real redis-server processes),
#               and the client examples and HTTP service under examples/
#   make dist   the release tarball, dist/redis-ratelimit-<version>-<os>-<arch>.tar.gz
#   make test-servers  the module's integration tests against the newest Redis 8.0, Redis 8,
#               Valkey 8 and Valkey 9, built from Debian's source packages (cached under
#               target/servers/); the client packages' suites run once, in make test
#   make servers  only builds those servers (.ci/run builds them while make lint runs)
#   make lint   rustfmt check, clippy with warnings as errors (the module, the Rust crate and
#               examples; the crate's docs and `cargo publish --dry-run`), luacheck, and ruff,
#               eslint and prettier on the client packages; javac's -Xlint -Werror and Spotless
#               (google-java-format) on the Java packages; go vet and golangci-lint on the Go ones
#   make stress longer fuzzing, differential and soak runs (minutes)
#   make bench  the module against INCR, SET ... PX and Lua scripts, in three setups (a replica
#               attached, alone, an AOF): tables printed, and target/bench/BENCHMARKS.md
#   make bench-update  the same, rewriting the tracked BENCHMARKS.md and bench/chart.svg
#               (BASELINE=<commit> measures that earlier build too, in the same run)
#   make valgrind  the module's integration tests with every server under valgrind's memcheck
#
# System packages come from Debian's archive: as root they are installed with apt-get,
# otherwise the target stops and names them.

CARGO ?= cargo
MODULE := $(CURDIR)/target/release/libredis_ratelimit.so

# The release tarball: dist/redis-ratelimit-<version>-<os>-<arch>.tar.gz.
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
DIST_NAME := redis-ratelimit-$(VERSION)-$(shell uname -s | tr A-Z a-z)-$(shell uname -m)
DIST_TARBALL := $(CURDIR)/dist/$(DIST_NAME).tar.gz
DIST_TIME := $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

# What building needs: a C toolchain and libclang for the SDK's bindgen.
BUILD_PACKAGES := build-essential libclang-dev
# What running and testing need besides.
SERVER_PACKAGES := redis-server redis-tools
# nginx with its Lua module, lua-resty-redis and cjson, for the Lua package's tests, and
# luarocks, which installs the package from the tarball (Debian's packages; lua-nginx-redis
# pulls in nginx-extras). Installed without starting a system nginx.
NGINX_PACKAGES := nginx libnginx-mod-http-lua lua-nginx-redis lua-cjson luarocks
# The Lua package's linter (luacheck), for `make lint`; wrk, for `make bench`.
LINT_PACKAGES := lua-check
BENCH_PACKAGES := wrk

# The examples' clients: the client packages, redis-py in a virtualenv, ioredis from npm.
EXAMPLES_VENV := $(CURDIR)/target/examples-venv
EXAMPLES_PYTHON := $(EXAMPLES_VENV)/bin/python
# The client packages' tests: their frameworks (slowapi, Flask-Limiter, FastAPI; Express,
# NestJS), pinned, in a virtualenv and clients/node/node_modules.
CLIENTS_VENV := $(CURDIR)/target/clients-venv
CLIENTS_PYTHON := $(CLIENTS_VENV)/bin/python
# limits' own tests, unpacked from its source distribution.
LIMITS_VERSION := $(shell sed -n 's/^limits==//p' clients/python/requirements-test.txt)
LIMITS_SUITE := $(CURDIR)/target/framework-tests/limits-$(LIMITS_VERSION)
# Where the Rust crate under clients/rust and the Rust example build.
RUST_CLIENTS_TARGET := $(CURDIR)/target/rust-clients
# The client packages' own version (clients/python/pyproject.toml, clients/node/package.json).
CLIENTS_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' clients/python/pyproject.toml)

# golangci-lint, for `make lint`, built from the Go module proxy into target/go-tools (defined
# before `lint`, whose prerequisites make expands as it reads them).
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(CURDIR)/target/go-tools/golangci-lint

# The other servers test-servers runs the suite against: package:version, the newest release
# whose version starts with that (a major, or major.minor) in Debian's sid, experimental or
# trixie. Redis 8.0 is the line Debian 13 ships; redis:8 is the newest 8.x.
OTHER_SERVERS := redis:8.0 redis:8 valkey:8 valkey:9

.PHONY: all build run test test-servers servers dist lint bench bench-update deps-bench stress valgrind deps-build deps-server deps-nginx deps-examples deps-java deps-go examples-deps clients-deps rust-clients java-clients go-clients clean

all: build

build: deps-build
	$(CARGO) build --release

run: deps-server build
	redis-server redis.conf

test: deps-server deps-nginx build examples-deps clients-deps dist
	RATELIMIT_MODULE=$(MODULE) RATELIMIT_DIST=$(DIST_TARBALL) EXAMPLES_PYTHON=$(EXAMPLES_PYTHON) \
	  CLIENTS_PYTHON=$(CLIENTS_PYTHON) LIMITS_SUITE=$(LIMITS_SUITE) $(CARGO) test --release

# The integration tests (not the unit tests, which involve no server) against each of
# OTHER_SERVERS, built by tests/servers/build.sh on the first run. The client packages' own
# suites in their frameworks (tests/clients.rs), the examples' and the release tarball's, and
# the layering test (the sources alone) run once, in `make test`: what they check of the server
# is the module's replies, which every test here checks on each server.
SERVER_TESTS := $(filter-out clients examples dist layering,$(basename $(notdir $(wildcard tests/*.rs))))

test-servers: deps-server deps-nginx build examples-deps clients-deps servers
	@for spec in $(OTHER_SERVERS); do \
	  server=$$(tests/servers/build.sh $${spec%%:*} $${spec##*:}) || exit 1; \
	  echo "== the integration tests against $$server ($$($$server --version | cut -d' ' -f1-3))"; \
	  REDIS_SERVER=$$server RATELIMIT_MODULE=$(MODULE) EXAMPLES_PYTHON=$(EXAMPLES_PYTHON) \
	    CLIENTS_PYTHON=$(CLIENTS_PYTHON) $(CARGO) test --release $(addprefix --test ,$(SERVER_TESTS)) \
	    || exit 1; \
	done

# OTHER_SERVERS built (or found in target/servers/, where a second run only looks each version
# up). Apart from test-servers so that CI can build them while other targets run: .ci/run
# starts it in the background before make lint.
servers: deps-build
	@for spec in $(OTHER_SERVERS); do \
	  tests/servers/build.sh $${spec%%:*} $${spec##*:} || exit 1; \
	done

# The release tarball: the module, README, docs, examples, the client packages (the Python wheel,
# the npm tarball, the Lua package with its rockspec), LICENSE, CHANGELOG and their SHA-256 sums,
# with a checksum file beside it. Reproducible: sorted, owned by root, dated by the last commit.
dist: build examples-deps
	@rm -rf dist/$(DIST_NAME) && mkdir -p dist/$(DIST_NAME)
	cp $(MODULE) README.md LICENSE CHANGELOG.md BENCHMARKS.md dist/$(DIST_NAME)/
	SOURCE_DATE_EPOCH=$(DIST_TIME) $(EXAMPLES_PYTHON) -m pip wheel --quiet --no-deps \
	  --disable-pip-version-check -w dist clients/python
	cd dist && npm pack --silent ../clients/node >/dev/null
	cp dist/redis_ratelimit_module-$(CLIENTS_VERSION)-py3-none-any.whl \
	  dist/redis-ratelimit-module-$(CLIENTS_VERSION).tgz dist/$(DIST_NAME)/
	cp -r docs dist/$(DIST_NAME)/
	mkdir -p dist/$(DIST_NAME)/clients && cp -r clients/lua dist/$(DIST_NAME)/clients/
	tar -cf - --exclude=node_modules --exclude=__pycache__ examples | tar -xf - -C dist/$(DIST_NAME)
	cd dist/$(DIST_NAME) && find . -type f ! -name SHA256SUMS | sort | sed 's|^\./||' \
	  | xargs sha256sum > SHA256SUMS
	tar -C dist --sort=name --owner=0 --group=0 --numeric-owner --mtime=@$(DIST_TIME) \
	  -czf $(DIST_TARBALL) $(DIST_NAME)
	cd dist && sha256sum $(DIST_NAME).tar.gz > $(DIST_NAME).tar.gz.sha256
	@rm -rf dist/$(DIST_NAME)
	@echo "dist/$(DIST_NAME).tar.gz"

# Instructions (callgrind), speed and memory. Reports; never gates anything. With
# BASELINE=<commit> (or BASELINE="<commit> <commit>"), each commit is built too (in a worktree
# under target/baseline/) and measured in the same run, its Lua package in nginx as well, for
# a table of changes against each.
BASELINE ?=
BASELINE_MODULES := $(foreach commit,$(BASELINE),$(CURDIR)/target/baseline/$(commit)/target/release/libredis_ratelimit.so)
BASELINE_ARGS := $(foreach commit,$(BASELINE),--baseline $(CURDIR)/target/baseline/$(commit)/target/release/libredis_ratelimit.so --baseline-name $(commit))

# The commit the measured module is built from, read as make starts, before the build: an edit
# made while the bench builds or runs does not mark the build it measures "dirty".
BUILT_FROM := $(shell git describe --always --dirty 2>/dev/null)

bench: deps-server build deps-bench clients-deps $(BASELINE_MODULES)
	BUILT_FROM=$(BUILT_FROM) python3 bench/run.py $(BASELINE_ARGS)

bench-update: deps-server build deps-bench clients-deps $(BASELINE_MODULES)
	BUILT_FROM=$(BUILT_FROM) python3 bench/run.py --write $(BASELINE_ARGS)

$(CURDIR)/target/baseline/%/target/release/libredis_ratelimit.so:
	git worktree add --force --detach $(CURDIR)/target/baseline/$* $*
	cd $(CURDIR)/target/baseline/$* && $(CARGO) build --release

deps-bench: deps-nginx deps-go java-clients
	@command -v python3 >/dev/null 2>&1 || { missing=" python3"; $(install_missing); }
	@command -v valgrind >/dev/null 2>&1 || { missing=" valgrind"; $(install_missing); }
	@$(call ensure_packages,$(BENCH_PACKAGES))
	CARGO_TARGET_DIR=$(RUST_CLIENTS_TARGET) $(CARGO) build --release --quiet --example bench \
	  --example layer_bench --manifest-path clients/rust/Cargo.toml
	CARGO_TARGET_DIR=$(CURDIR)/target/loadgen $(CARGO) build --release --quiet \
	  --manifest-path bench/loadgen/Cargo.toml
	npm ci --prefix bench/shapes --no-audit --no-fund --loglevel=error
	cd clients/go/compat && go build -o $(CURDIR)/target/go-bench/shape ./shape
	mvn -B -q -o -f clients/java/pom.xml dependency:build-classpath \
	  -Dmdep.outputFile=target/classpath.txt -pl bench-servlet,bench-gateway

# Far more fuzzing, differential calls and soak than `make test`, each with its own seed.
stress: deps-server build
	FUZZ_INVOCATIONS=2000000 FUZZ_SEED=$$(date +%s) RATELIMIT_MODULE=$(MODULE) $(CARGO) test --release --test fuzz
	DIFF_CALLS=200000 DIFF_SEED=$$(date +%s) RATELIMIT_MODULE=$(MODULE) $(CARGO) test --release --test differential
	SOAK_KEYS=10000000 RATELIMIT_MODULE=$(MODULE) $(CARGO) test --release --test soak
	FORGED_ROUNDS=1000000 FORGED_SEED=$$(date +%s) RATELIMIT_MODULE=$(MODULE) $(CARGO) test --release --test forged

# Every server the integration tests start runs under memcheck; a test fails on any invalid
# access, uninitialised read or definite leak in the module. Shorter fuzzing, differential
# runs, soak and refusals through RL.TOP; not the Cluster, the clients and the examples (the
# same module code, many more servers), nor the tests that measure a key's memory (valgrind's
# allocator is not jemalloc). CI runs it (.ci/run).
VALGRIND_TESTS := acl all atomicity differential faults forged fuzz guard introspection leases loading log notifications options persistence propagation replication shortfall soak throttle top window
valgrind: deps-server build
	@command -v valgrind >/dev/null 2>&1 || { missing=" valgrind"; $(install_missing); }
	RATELIMIT_VALGRIND=1 FUZZ_INVOCATIONS=20000 DIFF_CALLS=2000 SOAK_KEYS=20000 TOP_REFUSALS=20000 \
	  FORGED_ROUNDS=3000 \
	  RATELIMIT_MODULE=$(MODULE) $(CARGO) test --release --no-fail-fast \
	  $(addprefix --test ,$(VALGRIND_TESTS))

lint: deps-build clients-deps $(GOLANGCI_LINT)
	@$(call ensure_packages,$(LINT_PACKAGES))
	$(CARGO) fmt --check
	$(CARGO) clippy --release --all-targets -- -D warnings
	luacheck --config clients/lua/.luacheckrc clients/lua/lib examples/nginx/lua
	cd clients/python && $(CLIENTS_PYTHON) -m ruff check . && $(CLIENTS_PYTHON) -m ruff format --check .
	npm run lint --silent --prefix clients/node
	cd clients/rust && CARGO_TARGET_DIR=$(RUST_CLIENTS_TARGET) $(CARGO) fmt --check && \
	  CARGO_TARGET_DIR=$(RUST_CLIENTS_TARGET) $(CARGO) clippy --all-targets -- -D warnings && \
	  CARGO_TARGET_DIR=$(RUST_CLIENTS_TARGET) $(CARGO) clippy --no-default-features -- -D warnings && \
	  CARGO_TARGET_DIR=$(RUST_CLIENTS_TARGET) RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --quiet && \
	  CARGO_TARGET_DIR=$(RUST_CLIENTS_TARGET) $(CARGO) publish --dry-run --quiet --allow-dirty
	cd examples/rust && CARGO_TARGET_DIR=$(RUST_CLIENTS_TARGET) $(CARGO) fmt --check && \
	  CARGO_TARGET_DIR=$(RUST_CLIENTS_TARGET) $(CARGO) clippy --all-targets -- -D warnings
	mvn -B -q -f clients/java/pom.xml spotless:check
	cd clients/go && go vet ./... && $(GOLANGCI_LINT) run ./...
	cd clients/go/compat && go vet ./... && $(GOLANGCI_LINT) run --config ../.golangci.yml ./...
	cd bench/loadgen && $(CARGO) fmt --check && \
	  CARGO_TARGET_DIR=$(CURDIR)/target/loadgen $(CARGO) clippy -- -D warnings

deps-build:
	@$(call ensure_packages,$(BUILD_PACKAGES))

deps-server: deps-build
	@$(call ensure_packages,$(SERVER_PACKAGES))

# Debian starts a service it installs; a policy-rc.d that says no keeps a system nginx off
# port 80 (made only for the install, and only when the machine has none of its own).
deps-nginx:
	@if [ "$$(id -u)" = 0 ] && [ ! -e /usr/sbin/policy-rc.d ]; then \
	  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d; \
	  made=1; \
	fi; \
	status=0; ( $(call ensure_packages,$(NGINX_PACKAGES)) ) || status=$$?; \
	if [ -n "$$made" ]; then rm -f /usr/sbin/policy-rc.d; fi; \
	exit $$status

# Python with venv and Node.js with npm, as commands: a Node.js from elsewhere (NodeSource)
# is as good as Debian's packages, which would conflict with it.
deps-examples:
	@missing=""; \
	python3 -c 'import venv, ensurepip' 2>/dev/null || missing="$$missing python3 python3-venv"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing nodejs npm"; \
	$(install_missing)

examples-deps: deps-examples $(EXAMPLES_VENV)/installed examples/node/node_modules/.package-lock.json

$(EXAMPLES_VENV)/installed: examples/python/requirements.txt clients/python/pyproject.toml \
		$(wildcard clients/python/src/ratelimit_module/*.py)
	python3 -m venv $(EXAMPLES_VENV)
	$(EXAMPLES_PYTHON) -m pip install --quiet --disable-pip-version-check --force-reinstall \
	  -r $<
	touch $@

examples/node/node_modules/.package-lock.json: examples/node/package-lock.json \
		$(wildcard clients/node/*.js)
	npm ci --prefix examples/node --no-audit --no-fund --loglevel=error

# The client packages and, pinned, the frameworks their tests run in; and limits' own tests,
# from its source distribution (not kept in the repository), which tests/clients.rs runs
# against the package's storages.
clients-deps: deps-examples $(CLIENTS_VENV)/installed clients/node/node_modules/.package-lock.json \
		$(LIMITS_SUITE)/pytest.ini rust-clients java-clients go-clients

# The Java packages (clients/java, Maven, Java 17), built and installed in the local
# repository with every dependency their tests and the lint need, so that tests/clients.rs runs
# them offline (`mvn -o test`). A JDK and Maven come from Debian's packages when missing.
JAVA_SOURCES := $(shell find clients/java -name pom.xml -o -path '*/src/*' -type f 2>/dev/null)

java-clients: deps-java $(CURDIR)/target/java-clients.stamp

$(CURDIR)/target/java-clients.stamp: $(JAVA_SOURCES)
	mvn -B -q -f clients/java/pom.xml install -DskipTests
	mvn -B -q -f clients/java/pom.xml dependency:resolve-plugins dependency:resolve -DincludeScope=test
	mvn -B -q -f clients/java/pom.xml test -Dtest=NoSuchTest -Dsurefire.failIfNoSpecifiedTests=false
	mkdir -p $(dir $@) && touch $@

deps-java:
	@missing=""; \
	command -v javac >/dev/null 2>&1 || missing="$$missing openjdk-17-jdk-headless"; \
	command -v mvn >/dev/null 2>&1 || missing="$$missing maven"; \
	$(install_missing)

# The Go packages (clients/go and its compat/ module, the tests that need the libraries it
# replaces): their modules downloaded from the module proxy and their tests built with the race
# detector, for tests/clients.rs; golangci-lint, for `make lint`, built from the proxy too into
# target/go-tools. A Go 1.21 or newer fetches the 1.26 toolchain go.mod asks for by itself.
GO_SOURCES := $(shell find clients/go -name '*.go' -o -name 'go.*' 2>/dev/null)

go-clients: deps-go $(CURDIR)/target/go-clients.stamp

$(CURDIR)/target/go-clients.stamp: $(GO_SOURCES)
	cd clients/go && go mod download && go test -race -count=1 -run '^$$' ./... >/dev/null
	cd clients/go/compat && go mod download && go test -race -count=1 -run '^$$' ./... >/dev/null
	mkdir -p $(dir $@) && touch $@

$(GOLANGCI_LINT):
	GOBIN=$(dir $@) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

deps-go:
	@command -v go >/dev/null 2>&1 || { \
	  echo "Go is missing: install Go 1.21 or newer (https://go.dev/dl/), which fetches the toolchain clients/go asks for" >&2; \
	  exit 1; }

# The Rust crate's tests and the Rust example, built (tests/clients.rs and tests/examples.rs
# run them), in a target directory of their own.
rust-clients:
	CARGO_TARGET_DIR=$(RUST_CLIENTS_TARGET) $(CARGO) test --no-run --quiet \
	  --manifest-path clients/rust/Cargo.toml
	CARGO_TARGET_DIR=$(RUST_CLIENTS_TARGET) $(CARGO) build --quiet \
	  --manifest-path examples/rust/Cargo.toml

$(LIMITS_SUITE)/pytest.ini: clients/python/requirements-test.txt | $(CLIENTS_VENV)/installed
	rm -rf $(LIMITS_SUITE) && mkdir -p $(dir $(LIMITS_SUITE))
	$(CLIENTS_PYTHON) -m pip download --quiet --disable-pip-version-check --no-deps \
	  --no-binary :all: -d $(dir $(LIMITS_SUITE)) limits==$(LIMITS_VERSION)
	tar -xzf $(dir $(LIMITS_SUITE))limits-$(LIMITS_VERSION).tar.gz -C $(dir $(LIMITS_SUITE))
	touch $@

$(CLIENTS_VENV)/installed: clients/python/requirements-test.txt clients/python/pyproject.toml \
		$(wildcard clients/python/src/ratelimit_module/*.py)
	python3 -m venv $(CLIENTS_VENV)
	$(CLIENTS_PYTHON) -m pip install --quiet --disable-pip-version-check \
	  -r clients/python/requirements-test.txt
	$(CLIENTS_PYTHON) -m pip install --quiet --disable-pip-version-check --no-deps \
	  --force-reinstall ./clients/python
	touch $@

clients/node/node_modules/.package-lock.json: clients/node/package-lock.json
	npm ci --prefix clients/node --no-audit --no-fund --loglevel=error

clean:
	$(CARGO) clean
	rm -rf examples/node/node_modules clients/node/node_modules dist

# Installs the Debian packages in $(1) that are missing (as root), or stops naming them.
# Without dpkg (not Debian), only the commands they provide are looked for.
define ensure_packages
missing=""; \
for package in $(1); do \
  if command -v dpkg-query >/dev/null 2>&1; then \
    dpkg-query -W -f='$${Status}' $$package 2>/dev/null | grep -q "ok installed" || missing="$$missing $$package"; \
  else \
    case $$package in \
      redis-server) command -v redis-server >/dev/null 2>&1 || missing="$$missing $$package" ;; \
      redis-tools) command -v redis-cli >/dev/null 2>&1 || missing="$$missing $$package" ;; \
      nginx) command -v nginx >/dev/null 2>&1 || missing="$$missing $$package" ;; \
      lua-check) command -v luacheck >/dev/null 2>&1 || missing="$$missing $$package" ;; \
      wrk) command -v wrk >/dev/null 2>&1 || missing="$$missing $$package" ;; \
      build-essential) command -v cc >/dev/null 2>&1 || missing="$$missing $$package" ;; \
    esac; \
  fi; \
done; \
$(install_missing)
endef

# Installs the Debian packages in $$missing (as root, with apt-get), or stops naming them.
define install_missing
if [ -n "$$missing" ]; then \
  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
    echo "Installing system packages:$$missing"; \
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; \
  else \
    echo "Missing system packages:$$missing" >&2; \
    echo "Install them (Debian/Ubuntu): sudo apt-get install -y$$missing" >&2; \
    exit 1; \
  fi; \
fi
endef
