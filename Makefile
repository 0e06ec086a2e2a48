# outboxd: plain Makefile.  `make` builds the daemon and outboxctl,
# `make check` sets up the local servers and runs every test,
# `make demo` shows the relay at work.  SANITIZER=address,undefined
# builds into build/san/ with the sanitizers.

CC ?= cc
PREFIX ?= /usr/local
SYSCONFDIR ?= /etc

BUILD := build
ifneq ($(SANITIZER),)
BUILD := build/san
SANFLAGS := -fsanitize=$(SANITIZER) -fno-omit-frame-pointer \
	-fno-sanitize-recover=all
endif

# Recursive (=) so that a fresh machine can run `make check`, which
# installs the libraries, before any pkg-config answers.
PKGS = libevent libevent_pthreads librabbitmq yaml-0.1 mysqlclient
WARN = -Wall -Wextra -Werror -Wshadow -Wpointer-arith -Wmissing-prototypes \
	-Wstrict-prototypes -Wformat=2 -Wno-format-nonliteral
CFLAGS ?= -O2 -g
ALL_CFLAGS = -std=c11 -D_DEFAULT_SOURCE $(WARN) $(CFLAGS) $(SANFLAGS) \
	-pthread -MMD -MP $(shell pkg-config --cflags $(PKGS))
LIBS = $(shell pkg-config --libs $(PKGS)) -lm
TEST_LIBS = $(shell pkg-config --libs check)

DAEMON_SRCS := $(filter-out daemon/main.c daemon/outboxctl.c, \
	$(wildcard daemon/*.c))
DAEMON_OBJS = $(DAEMON_SRCS:%.c=$(BUILD)/%.o)
UNIT_SRCS := $(wildcard tests/check_*.c)
IT_SRCS := $(wildcard tests/it_*.c) tests/itest.c
UNIT_OBJS = $(UNIT_SRCS:%.c=$(BUILD)/%.o)
IT_OBJS = $(IT_SRCS:%.c=$(BUILD)/%.o)

.PHONY: all check check-unit check-integration setup demo install clean \
	format valgrind bench

all: $(BUILD)/outboxd $(BUILD)/outboxctl

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Idaemon -c $< -o $@

$(BUILD)/outboxd: $(BUILD)/daemon/main.o $(DAEMON_OBJS)
	$(CC) $(SANFLAGS) -pthread -o $@ $^ $(LIBS)

$(BUILD)/outboxctl: $(BUILD)/daemon/outboxctl.o $(DAEMON_OBJS)
	$(CC) $(SANFLAGS) -pthread -o $@ $^ $(LIBS)

$(BUILD)/check_unit: $(UNIT_OBJS) $(DAEMON_OBJS)
	$(CC) $(SANFLAGS) -pthread -o $@ $^ $(LIBS) $(TEST_LIBS)

$(BUILD)/check_integration: $(IT_OBJS) $(DAEMON_OBJS)
	$(CC) $(SANFLAGS) -pthread -o $@ $^ $(LIBS) $(TEST_LIBS)

# The README's test command: servers first, then every suite.
check:
	bash tests/servers.sh deps
	bash tests/servers.sh start
	$(MAKE) check-unit check-integration

check-unit: $(BUILD)/check_unit
	cd tests && ../$(BUILD)/check_unit

check-integration: all $(BUILD)/check_integration
	OUTBOXD_BIN=$(CURDIR)/$(BUILD)/outboxd \
	OUTBOXCTL_BIN=$(CURDIR)/$(BUILD)/outboxctl \
	OUTBOXD_SRC=$(CURDIR) $(BUILD)/check_integration

$(BUILD)/outboxd-bench: $(BUILD)/bench/bench.o
	$(CC) $(SANFLAGS) -pthread -o $@ $^ $(LIBS)

# SPEC section 10: throughput as a ratio to the ceiling measured in the
# same run; BENCH_SENT_ROWS=1000000 adds the drain beside old SENT rows.
bench:
	bash tests/servers.sh deps
	bash tests/servers.sh start
	$(MAKE) all $(BUILD)/outboxd-bench
	OUTBOXD_BIN=$(CURDIR)/$(BUILD)/outboxd OUTBOXD_SRC=$(CURDIR) \
		$(BUILD)/outboxd-bench

setup:
	bash tests/servers.sh deps
	bash tests/servers.sh start

demo:
	bash tests/servers.sh deps
	$(MAKE) all
	bash scripts/demo.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(SYSCONFDIR)/outboxd
	install -m 755 $(BUILD)/outboxd $(BUILD)/outboxctl $(DESTDIR)$(PREFIX)/bin
	install -m 640 conf/outboxd.yaml $(DESTDIR)$(SYSCONFDIR)/outboxd/outboxd.yaml.example

format:
	clang-format -i daemon/*.c daemon/*.h tests/*.c tests/*.h

clean:
	rm -rf build

-include $(shell find build -name '*.d' 2>/dev/null)
