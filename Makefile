# outboxd: plain Makefile.  `make` builds the daemon and outboxctl,
# `make check` sets up the local servers and runs every test,
# `make demo` shows the relay at work.  SANITIZER=address,undefined
# builds into build/san/ with the sanitizers.

CC ?= cc
# Install locations (make install, and debian/rules with PREFIX=/usr).
PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
DATADIR ?= $(PREFIX)/share/outboxd
DOCDIR ?= $(PREFIX)/share/doc/outboxd
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions

BUILD := build
ifneq ($(SANITIZER),)
BUILD := build/san
SANFLAGS := -fsanitize=$(SANITIZER) -fno-omit-frame-pointer \
	-fno-sanitize-recover=all
endif

# Recursive (=) so that a fresh machine can run `make check`, which
# installs the libraries, before any pkg-config answers.  libcrypto is
# linked only for `outboxd -V` to name the OpenSSL that librabbitmq and
# libmariadb load (it is in the process already; libssl-dev has its .pc).
# libzstd opens MySQL 8's compressed transactions (binlog_payload.c).
PKGS = libevent libevent_pthreads librabbitmq yaml-0.1 mysqlclient libcrypto libzstd
WARN = -Wall -Wextra -Werror -Wshadow -Wpointer-arith -Wmissing-prototypes \
	-Wstrict-prototypes -Wformat=2 -Wno-format-nonliteral
# CPPFLAGS, CFLAGS and LDFLAGS are the builder's (dpkg-buildflags' hardening
# in the package), added after the project's own so that they win.
CFLAGS ?= -O2 -g
ALL_CFLAGS = -std=c11 -D_DEFAULT_SOURCE $(WARN) $(CPPFLAGS) $(CFLAGS) \
	$(SANFLAGS) -pthread -MMD -MP $(shell pkg-config --cflags $(PKGS))
LINK = $(CC) $(CFLAGS) $(SANFLAGS) $(LDFLAGS) -pthread
LIBS = $(shell pkg-config --libs $(PKGS)) -lm
TEST_LIBS = $(shell pkg-config --libs check)

DAEMON_SRCS := $(filter-out daemon/main.c daemon/outboxctl.c, \
	$(wildcard daemon/*.c))
# outboxctl's own files beside outboxctl.c, linked into it alone.
CTL_SRCS := $(wildcard daemon/outboxctl_*.c)
DAEMON_SRCS := $(filter-out $(CTL_SRCS), $(DAEMON_SRCS))
DAEMON_OBJS = $(DAEMON_SRCS:%.c=$(BUILD)/%.o)
UNIT_SRCS := $(wildcard tests/check_*.c)
IT_SRCS := $(wildcard tests/it_*.c) tests/itest.c tests/itproxy.c
UNIT_OBJS = $(UNIT_SRCS:%.c=$(BUILD)/%.o)
IT_OBJS = $(IT_SRCS:%.c=$(BUILD)/%.o)

.PHONY: all check check-build check-unit check-alerts check-integration \
	check-packaging \
	man setup demo install clean format valgrind bench fuzz fuzz-build \
	deb check-deb check-version

# Man pages: scdoc sources in docs/man/, generated into build/man/ (the
# same for every SANITIZER build).
MAN_PAGES := $(patsubst docs/man/%.scd,build/man/%,$(wildcard docs/man/*.scd))

all: $(BUILD)/outboxd $(BUILD)/outboxctl man

man: $(MAN_PAGES)

build/man/%: docs/man/%.scd
	@mkdir -p build/man
	scdoc <$< >$@

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Idaemon -c $< -o $@

$(BUILD)/outboxd: $(BUILD)/daemon/main.o $(DAEMON_OBJS)
	$(LINK) -o $@ $^ $(LIBS)

$(BUILD)/outboxctl: $(BUILD)/daemon/outboxctl.o $(DAEMON_OBJS)
	$(LINK) -o $@ $^ $(LIBS)

$(BUILD)/outboxctl: $(CTL_SRCS:%.c=$(BUILD)/%.o)

$(BUILD)/check_unit: $(UNIT_OBJS) $(DAEMON_OBJS)
	$(LINK) -o $@ $^ $(LIBS) $(TEST_LIBS)

$(BUILD)/check_integration: $(IT_OBJS) $(DAEMON_OBJS)
	$(LINK) -o $@ $^ $(LIBS) $(TEST_LIBS)

# The README's test command: servers first, the binaries built on every
# CPU, then every suite, one after the other (they share the servers).
NPROC := $(shell nproc 2>/dev/null || echo 1)

check:
	bash tests/servers.sh deps
	bash tests/servers.sh start
	$(MAKE) -j$(NPROC) check-build
	$(MAKE) check-unit check-alerts check-man check-outboxctl \
		check-layers check-version check-integration

# The bench is built too, so that a change the bench no longer compiles
# against fails here rather than at the next measurement.
check-build: all $(BUILD)/check_unit $(BUILD)/check_integration \
	$(BUILD)/outboxd-bench

# No call runs up the module map of docs/hacking.md (its table, read
# against each object's symbols).
.PHONY: check-layers
check-layers: all
	python3 scripts/check-layers.py $(BUILD)/daemon

check-unit: $(BUILD)/check_unit
	cd tests && ../$(BUILD)/check_unit

# outboxctl(8) and the bash completion name every command and option
# that outboxctl accepts (no servers needed).
.PHONY: check-outboxctl
check-outboxctl: $(BUILD)/outboxctl
	bash tests/man_outboxctl_test.sh $(BUILD)/outboxctl
	bash tests/completion_test.sh $(BUILD)/outboxctl

# The alerting rules: valid, and each alert fires when it should.  The
# dashboard: importable, its PromQL parses and names only metrics outboxd
# exports, and the check catches each way of breaking that (--self-test).
check-alerts:
	promtool check rules conf/outboxd-alerts.yml
	cd tests && promtool test rules alerts_test.yml
	python3 scripts/dashboard-check.py --self-test

# Each man page renders with no warning from groff (man --warnings) and
# has its NAME: what `man -l` and lintian see.
MAN_CHECK = LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l
.PHONY: check-man
check-man: man
	@set -e; for p in $(MAN_PAGES); do \
		echo "check-man: $(MAN_CHECK) $$p"; \
		out=$$($(MAN_CHECK) $$p 2>&1 >/dev/null); \
		[ -z "$$out" ] || { printf '%s\n' "$$out"; exit 1; }; \
		$(MAN_CHECK) $$p 2>/dev/null | grep -q '^NAME$$' || \
			{ echo "check-man: $$p renders no NAME section"; exit 1; }; \
	done

check-integration: all $(BUILD)/check_integration cloudevents-deps
	OUTBOXD_BIN=$(CURDIR)/$(BUILD)/outboxd \
	OUTBOXCTL_BIN=$(CURDIR)/$(BUILD)/outboxctl \
	OUTBOXD_SRC=$(CURDIR) $(BUILD)/check_integration

# tests/it_cloudevents.c's consumer: the CloudEvents SDK and amqplib from
# the npm registry, at the versions of its package-lock.json.
.PHONY: cloudevents-deps
cloudevents-deps: tests/cloudevents/node_modules/.package-lock.json
tests/cloudevents/node_modules/.package-lock.json: \
		tests/cloudevents/package-lock.json
	cd tests/cloudevents && npm ci --no-audit --no-fund

$(BUILD)/outboxd-bench: $(BUILD)/bench/bench.o $(BUILD)/bench/bench_tenants.o \
		$(BUILD)/bench/bench_cost.o $(BUILD)/bench/bench_reader.o \
		$(BUILD)/daemon/util.o $(BUILD)/daemon/log.o
	$(LINK) -o $@ $^ $(LIBS)

# docs/contract.md section 10: throughput as a ratio to the ceiling measured in the
# same run; BENCH_SENT_ROWS=1000000 adds the drain beside old SENT rows,
# BENCH_DELAYED_ROWS=1000000 (or BENCH_ONLY=delayed) beside delayed ones,
# BENCH_QUEUE_MODE=lazy declares the bench queue lazy, BENCH_ONLY=tenants
# measures one outboxd over BENCH_TENANTS schemas, BENCH_ONLY=cost the
# relay's statements and mariadbd CPU per event beside its producer's
# (see docs/performance.md).
bench:
	bash tests/servers.sh deps
	bash tests/servers.sh start
	$(MAKE) all $(BUILD)/outboxd-bench
	OUTBOXD_BIN=$(CURDIR)/$(BUILD)/outboxd OUTBOXD_SRC=$(CURDIR) \
		$(BUILD)/outboxd-bench

# The unit file and the Dockerfile, checked without systemd or Docker.
check-packaging: all
	bash scripts/systemd-check.sh $(BUILD)/outboxd
	bash scripts/docker-check.sh $(BUILD)/outboxd

# The image built and run as a sidecar against the local servers (root:
# installs and starts dockerd if none answers); needs no registry.
.PHONY: check-docker
check-docker:
	bash scripts/docker-run-check.sh

setup:
	bash tests/servers.sh deps
	bash tests/servers.sh start

demo:
	bash tests/servers.sh deps
	$(MAKE) all
	bash scripts/demo.sh

# Everything the Debian package ships, under $(DESTDIR)$(PREFIX): the unit's
# commands are pointed at $(BINDIR); the example config is not outboxd.yaml,
# so the service (ConditionPathExists) waits for a real one.
install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man5 \
		$(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(SYSCONFDIR)/outboxd \
		$(DESTDIR)$(DATADIR)/sql/migrations $(DESTDIR)$(DOCDIR) \
		$(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(SYSUSERSDIR) \
		$(DESTDIR)$(BASHCOMPDIR)
	install -m 755 $(BUILD)/outboxd $(BUILD)/outboxctl $(DESTDIR)$(BINDIR)
	install -m 644 $(filter %.5,$(MAN_PAGES)) $(DESTDIR)$(MANDIR)/man5
	install -m 644 $(filter %.8,$(MAN_PAGES)) $(DESTDIR)$(MANDIR)/man8
	install -m 644 conf/outboxd.yaml \
		$(DESTDIR)$(SYSCONFDIR)/outboxd/outboxd.yaml.example
	install -m 644 conf/outboxd-alerts.yml conf/outboxd-dashboard.json \
		$(DESTDIR)$(DATADIR)
	install -m 644 sql/*.sql $(DESTDIR)$(DATADIR)/sql
	install -m 644 sql/migrations/*.sql $(DESTDIR)$(DATADIR)/sql/migrations
	install -m 644 README.md $(wildcard NEWS.md) LICENSE docs/*.md \
		$(DESTDIR)$(DOCDIR)
	sed -e 's#^\(Exec[A-Za-z]*=\)/usr/bin/#\1$(BINDIR)/#' \
		-e 's#/etc/outboxd/#$(SYSCONFDIR)/outboxd/#g' \
		systemd/outboxd.service >$(BUILD)/outboxd.service
	install -m 644 $(BUILD)/outboxd.service $(DESTDIR)$(SYSTEMDUNITDIR)
	install -m 644 systemd/outboxd.sysusers \
		$(DESTDIR)$(SYSUSERSDIR)/outboxd.conf
	install -m 644 conf/bash-completion/outboxctl $(DESTDIR)$(BASHCOMPDIR)

# The Debian package, built by dpkg-buildpackage in a copy of the tree
# (build/deb/src): its outputs go to the parent directory, and debian/
# fills with build state, neither of which belongs in the repository.
# The .deb files are left in build/deb/.
DEB_DIR := build/deb
deb: check-version
	rm -rf $(DEB_DIR)
	mkdir -p $(DEB_DIR)/src
	tar -c --exclude=./build --exclude=./.git . | tar -x -C $(DEB_DIR)/src
	cd $(DEB_DIR)/src && dpkg-buildpackage -us -uc -b
	rm -rf $(DEB_DIR)/src
	@ls -l $(DEB_DIR)/*.deb

# The package: built, lintian-clean, installed, the demo run against the
# installed binaries, purged (scripts/deb-check.sh, run by CI as root).
check-deb:
	bash scripts/deb-check.sh

# One version: NEWS.md, debian/changelog, the image and the docs name
# the one the binaries report (scripts/check-version.sh).
.PHONY: check-version
check-version:
	bash scripts/check-version.sh

format:
	clang-format -i daemon/*.c daemon/*.h bench/*.c bench/*.h tests/*.c \
		tests/*.h tests/fuzz/*.c tests/fuzz/*.h

# valgrind: the unit tests, then one integration drain with the daemon
# under valgrind (tests/it_leaks.c: a few thousand events, SIGTERM, exit
# 0); any error or definite/indirect leak exits 99 and fails the run.
VALGRIND = valgrind --error-exitcode=99 --leak-check=full \
	--errors-for-leak-kinds=definite,indirect \
	--show-leak-kinds=definite,indirect --num-callers=30 \
	--suppressions=$(CURDIR)/tests/valgrind.supp

valgrind: all $(BUILD)/check_unit $(BUILD)/check_integration
ifneq ($(SANITIZER),)
	$(error valgrind cannot run sanitizer builds: drop SANITIZER)
endif
	cd tests && CK_FORK=no $(VALGRIND) -q ../$(BUILD)/check_unit
	OUTBOXD_WRAPPER="$(VALGRIND)" CK_RUN_SUITE=it_leaks \
	OUTBOXD_BIN=$(CURDIR)/$(BUILD)/outboxd \
	OUTBOXCTL_BIN=$(CURDIR)/$(BUILD)/outboxctl \
	OUTBOXD_SRC=$(CURDIR) $(BUILD)/check_integration

# fuzz: libFuzzer targets (clang with libclang-rt-14-dev) for everything
# that parses outside input, built with ASan and UBSan into build/fuzz/.
# Each runs FUZZ_SECONDS from its seeds in tests/fuzz/corpus/<target>/
# (new finds go to build/fuzz/corpus/); a crash stops the run and leaves
# its input in build/fuzz/<target>-crash-*.
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 30
FUZZ_BUILD := build/fuzz
FUZZ_SAN = -fsanitize=address,undefined -fno-sanitize-recover=all \
	-fno-omit-frame-pointer
FUZZ_CFLAGS = -std=c11 -D_DEFAULT_SOURCE $(WARN) -O1 -g $(FUZZ_SAN) \
	-fsanitize=fuzzer-no-link -pthread -MMD -MP \
	$(shell pkg-config --cflags $(PKGS)) -Idaemon -Itests/fuzz
FUZZ_TARGETS := $(basename $(notdir $(wildcard tests/fuzz/fuzz_*.c)))
FUZZ_OBJS = $(DAEMON_SRCS:%.c=$(FUZZ_BUILD)/%.o)

$(FUZZ_BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/tests/fuzz/fuzz_%.o $(FUZZ_OBJS)
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -pthread -o $@ $^ $(LIBS)

fuzz-build: $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/%)

fuzz: fuzz-build
	@set -e; for t in $(FUZZ_TARGETS); do \
		mkdir -p $(FUZZ_BUILD)/corpus/$$t; \
		dict=; [ ! -f tests/fuzz/$$t.dict ] || dict=-dict=tests/fuzz/$$t.dict; \
		echo "==> $$t for $(FUZZ_SECONDS)s"; \
		$(FUZZ_BUILD)/$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
			-print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/$$t- \
			$$dict $(FUZZ_BUILD)/corpus/$$t tests/fuzz/corpus/$$t \
			2>$(FUZZ_BUILD)/$$t.log || { tail -n 60 $(FUZZ_BUILD)/$$t.log; \
			exit 1; }; \
		grep -E '^stat::(number_of_executed_units|peak_rss_mb)|^#[0-9]+[[:space:]]+DONE' \
			$(FUZZ_BUILD)/$$t.log; \
	done

clean:
	rm -rf build

-include $(shell find build -name '*.d' 2>/dev/null)
