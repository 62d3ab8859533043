# keyorder: every target needs only Go; modules come from the Go module proxy.
# The examples and the database tests are modules of their own
# (examples/go.mod, dbtest/go.mod), joined to the library's by go.work, so
# that a user of the library never gets their dependencies (SQLite, pgx);
# every target covers the three modules. The PostgreSQL tests need
# Debian's postgresql package (.ci/run installs it) and skip without it.

GO            ?= go
PKGS          := ./... ./examples/... ./dbtest/...
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCH         ?= .
BENCHCOUNT    ?= 6
BENCHTIME     ?= 1s

.PHONY: test run bench lint fuzz

## test: no tracked file over 1 MiB, vet, then every test with the race
## detector (what CI runs).
test:
	bash .ci/bigfiles
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 $(PKGS)

## run: the end-to-end example against an embedded pstest server
## (or PUBSUB_EMULATOR_HOST when it is set).
run:
	$(GO) run ./examples/orders

## bench: benchmarks with allocation counts; BENCH=regexp narrows them.
## BENCHCOUNT rounds of one run each, so that the sub-benchmarks compared
## side by side alternate and share the machine's drift. Summarise with
## benchstat (golang.org/x/perf/cmd/benchstat): benchstat -col /sub FILE.
bench:
	for i in $$(seq $(BENCHCOUNT)); do \
		$(GO) test -run='^$$' -bench='$(BENCH)' -benchmem -count=1 -benchtime=$(BENCHTIME) $(PKGS) || exit 1; \
	done

## lint: no tracked file over 1 MiB, go vet plus staticcheck, pinned.
lint:
	bash .ci/bigfiles
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

## fuzz: a short run of each fuzz target of the pure functions.
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzResolve -fuzztime=20s ./ordering
	$(GO) test -run='^$$' -fuzz=FuzzValidate -fuzztime=20s ./ordering
	$(GO) test -run='^$$' -fuzz=FuzzPartition -fuzztime=20s ./ordering
	$(GO) test -run='^$$' -fuzz=FuzzParseStamp -fuzztime=20s ./ordering
	$(GO) test -run='^$$' -fuzz=FuzzTopic -fuzztime=20s ./internal/resource
