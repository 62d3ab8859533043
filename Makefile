# keyorder: every target needs only Go; modules come from the Go module proxy.

GO            ?= go
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCH         ?= .
BENCHCOUNT    ?= 6
BENCHTIME     ?= 1s

.PHONY: test run bench lint fuzz

## test: vet, then every test with the race detector (what CI runs).
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

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
		$(GO) test -run='^$$' -bench='$(BENCH)' -benchmem -count=1 -benchtime=$(BENCHTIME) ./... || exit 1; \
	done

## lint: go vet plus staticcheck, pinned.
lint:
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

## fuzz: a short run of each fuzz target of the pure functions.
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzResolve -fuzztime=20s ./ordering
	$(GO) test -run='^$$' -fuzz=FuzzValidate -fuzztime=20s ./ordering
	$(GO) test -run='^$$' -fuzz=FuzzPartition -fuzztime=20s ./ordering
	$(GO) test -run='^$$' -fuzz=FuzzParseStamp -fuzztime=20s ./ordering
	$(GO) test -run='^$$' -fuzz=FuzzTopic -fuzztime=20s ./internal/resource
