# nah: the targets a newcomer can guess. CGO_ENABLED=0 always.
export CGO_ENABLED := 0

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
GOFLAGS_BUILD := -trimpath -ldflags "$(LDFLAGS)"

.PHONY: run test build build-all generate lint contract goclient axe tusjs fuzz bench bench-soak bench-media bench-digest bench-compare bench-baseline clean

## run: the server with its embedded defaults (data in ./data, 127.0.0.1:8090)
run:
	go run $(GOFLAGS_BUILD) ./cmd/nah serve

## test: lint, the API contract, axe-core for the console's browser test,
## tus-js-client for the resumable uploads' test, then every test (the full
## suite takes a few minutes on 2 cores)
test: lint contract axe tusjs
	go test -count=1 -timeout 20m ./...

## build: a static, stripped, version-stamped binary for this machine
build:
	go build $(GOFLAGS_BUILD) -o bin/nah ./cmd/nah

## build-all: release binaries for linux amd64 and arm64
build-all:
	GOOS=linux GOARCH=amd64 go build $(GOFLAGS_BUILD) -o bin/nah-linux-amd64 ./cmd/nah
	GOOS=linux GOARCH=arm64 go build $(GOFLAGS_BUILD) -o bin/nah-linux-arm64 ./cmd/nah

## generate: the templ components' Go code (always from the repository root)
generate:
	go tool templ generate

## lint: gofmt, go mod tidy, go vet and staticcheck must be clean
## (staticcheck is a go tool pinned in go.mod: nothing to install)
lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	go mod tidy -diff
	go vet ./...
	go tool staticcheck ./...

## contract: openapi.json as phone developers use it, with the pinned npm tools
## of contract/ (node 20.19+ and npm): Redocly's lint must report no error and
## no warning, and the TypeScript client generated from the document must
## type-check (client.ts uses it). Needs the npm registry for npm ci.
## Then a second generator: the Go client oapi-codegen (a go tool pinned in
## contract/goclient, its own module) makes must equal the committed one, and
## a phone's scenario runs with it against the real server (vet and the
## server module's staticcheck first).
contract:
	cd contract && npm ci --no-audit --no-fund --loglevel=error
	cd contract && node lint.mjs
	cd contract && node_modules/.bin/openapi-typescript ../openapi.json -o generated.ts
	cd contract && node_modules/.bin/tsc --noEmit --strict -p .
	@cd contract/goclient && tmp=$$(mktemp) && \
	go tool oapi-codegen -config oapi-codegen.yaml -o $$tmp ../../openapi.json && \
	if ! cmp -s $$tmp nahclient/client.gen.go; then \
		echo "contract/goclient/nahclient/client.gen.go is stale: run 'make goclient' and commit"; \
		diff -u nahclient/client.gen.go $$tmp | head -40; rm -f $$tmp; exit 1; \
	fi; rm -f $$tmp
	cd contract/goclient && go vet ./... && $$(cd ../.. && go tool -n staticcheck) ./...
	cd contract/goclient && go test -count=1 -timeout 10m ./...

## goclient: regenerate contract/goclient's Go client from openapi.json
goclient:
	cd contract/goclient && go tool oapi-codegen -config oapi-codegen.yaml -o nahclient/client.gen.go ../../openapi.json

## axe: axe-core, pinned in app/testdata/axe, which the console's browser
## test injects into every page (needs npm and the npm registry)
axe:
	cd app/testdata/axe && npm ci --no-audit --no-fund --loglevel=error

## tusjs: tus-js-client, pinned in app/testdata/tus, which the resumable
## uploads' test runs with node against the real server (needs the npm registry)
tusjs:
	cd app/testdata/tus && npm ci --no-audit --no-fund --loglevel=error

## fuzz: a short run of each fuzz target (the seed corpus runs in make test)
fuzz:
	go test -run '^$$' -fuzz FuzzDecodeCursor -fuzztime 30s .
	go test -run '^$$' -fuzz FuzzIDs -fuzztime 30s .

FIXTURE ?= people-1k

## bench: build the release binary and measure it on FIXTURE (people-1k, people-1k-30, people-10k)
bench: build
	go run ./bench run -fixture $(FIXTURE) -bin bin/nah

## bench-soak: SOAK (30m) of steady posts and feeds on FIXTURE with a 5-minute
## retention, the disk sampled every 30 s (issue 37; not part of bench)
SOAK ?= 30m
bench-soak: build
	go run ./bench soak -fixture $(FIXTURE) -bin bin/nah -for $(SOAK) -env NAH_RETENTION=5m

## bench-media: 10 then 50 concurrent 10 MiB uploads and downloads on FIXTURE,
## peak memory of each, and cp's speed on the same disk as the ceiling
bench-media: build
	go run ./bench media -fixture $(FIXTURE) -bin bin/nah

## bench-digest: 5,000 digests due in one minute, all at once and spread over
## 10 s, and the feed's p95 during such a minute (in-process, fake relay)
bench-digest:
	go run ./bench digest

## bench-compare: the newest result as ratios to bench/baseline.json
bench-compare:
	go run ./bench compare

## bench-baseline: make bench/baseline.json from the newest result of each fixture
bench-baseline:
	go run ./bench baseline

clean:
	rm -rf bin contract/node_modules contract/generated.ts app/testdata/axe/node_modules app/testdata/tus/node_modules
