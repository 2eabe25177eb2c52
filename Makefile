# pgleader — run `make` for this help.

GO        ?= go
STATICCHECK_VERSION := v0.8.2
DURATION  ?= 2m
# otelpgleader and gocronpgleader are modules of their own (see README,
# Modules); test and lint cover them too.
OTEL_DIR  := otelpgleader
GOCRON_DIR := gocronpgleader
GORM_DIR  := examples/gorm
LIBPQ_DIR := examples/libpq
VERSIONS  ?= 13 14 15 16 17 18

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  make %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# internal/cmd/testsum reads the tests' go test -json, prints go test's usual
# output, then the failed and the skipped tests (with t.Skip's reason), and
# exits with the status of its sh -c.
.PHONY: test
test: ## Vet, then run every test of the five modules (root, otelpgleader, gocronpgleader, examples/gorm, examples/libpq) under the race detector, and the one test the race detector skips without it (finds or starts PostgreSQL; see README); ends with the skipped tests and why.
	$(GO) vet ./...
	cd $(OTEL_DIR) && $(GO) vet ./...
	cd $(GOCRON_DIR) && $(GO) vet ./...
	cd $(GORM_DIR) && $(GO) vet ./...
	cd $(LIBPQ_DIR) && $(GO) vet ./...
	$(GO) run ./internal/cmd/testsum -- sh -c '\
	  $(GO) run ./internal/embedpg/withpg -if-needed -- sh -c "$(GO) test -json -race -count=1 -timeout 9m ./... && \
	    cd $(GORM_DIR) && $(GO) test -json -race -count=1 ./... && \
	    cd $(CURDIR)/$(LIBPQ_DIR) && $(GO) test -json -race -count=1 ./... && \
	    cd $(CURDIR)/$(GOCRON_DIR) && $(GO) test -json -race -count=1 ./..." && \
	  cd $(OTEL_DIR) && $(GO) test -json -race -count=1 ./... && \
	  cd $(CURDIR) && $(GO) test -json -count=1 -run "^TestSetBodyStartsOnSmallStack$$" ./pgleader/'

.PHONY: test-versions
test-versions: ## Run the PostgreSQL-facing tests on a throwaway server of each major in VERSIONS (13-18).
	@GO="$(GO)" VERSIONS="$(VERSIONS)" ./scripts/test-versions.sh

.PHONY: schema
schema: ## Regenerate migrations/schema.sql, the catalog the migrations build (after changing a migration).
	$(GO) run ./internal/embedpg/withpg -if-needed -- $(GO) test -count=1 -run '^TestSchemaSnapshot$$' ./migrations -update

.PHONY: compose-test
compose-test: ## Run docker-compose.yml, stop the leading publisher, check the takeover (needs Docker; see README).
	@GO="$(GO)" ./scripts/compose-test.sh

.PHONY: lint
lint: ## gofmt check, go vet and staticcheck, in the five modules.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd $(OTEL_DIR) && $(GO) vet ./...
	cd $(OTEL_DIR) && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd $(GOCRON_DIR) && $(GO) vet ./...
	cd $(GOCRON_DIR) && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd $(GORM_DIR) && $(GO) vet ./...
	cd $(GORM_DIR) && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd $(LIBPQ_DIR) && $(GO) vet ./...
	cd $(LIBPQ_DIR) && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

.PHONY: demo
demo: ## Tell the recipe's story against PostgreSQL (examples/handover; finds a server, see README).
	@GO="$(GO)" ./scripts/demo.sh

.PHONY: bench
bench: ## Measure handover, failover, database load, fenced-write and sets cost, and a gocron job's start delay; prints tables (docs/benchmarks.md).
	$(GO) run ./cmd/pgleader-bench $(BENCHFLAGS)
	cd $(GOCRON_DIR) && $(GO) run ./internal/bench

.PHONY: model
model: ## Check the SPIN model and its mutants (model/, docs/model-checking.md; needs spin, gcc).
	./model/check.sh

.PHONY: chaos
chaos: ## Inject faults for DURATION (default 2m) into replicas on a throwaway cluster; check safety (docs/safety.md). SETKEYS=50: each replica runs a set of 50 keys.
	$(GO) run ./cmd/pgleader-chaos -duration $(DURATION) -own-cluster$(if $(SETKEYS), -set-keys $(SETKEYS))
