# nah: the targets a newcomer can guess. CGO_ENABLED=0 always.
export CGO_ENABLED := 0
# Every go command builds as the release does (-trimpath), so that vet, the
# tests and the release share one build of each package, and a new clone or
# worktree reuses the build cache: without it a package's cache key holds
# its folder (make lint in a fresh clone on a warm cache: 87 s, with it 6 s).
export GOFLAGS += -trimpath

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# The commit's time, not the clock's: the same commit builds the same bytes.
DATE := $(shell git log -1 --format=%cI 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(DATE)
GOFLAGS_BUILD := -trimpath -ldflags "$(LDFLAGS)"

.PHONY: run test build build-all release image generate lint contract goclient axe tusjs mlsjs fuzz bench bench-soak bench-media bench-digest bench-compare bench-baseline clean

## run: the server with its embedded defaults (data in ./data, 127.0.0.1:8090)
run:
	go run $(GOFLAGS_BUILD) ./cmd/nah serve

## test: every check and test, each step printed with its time: lint
## (gofmt, go mod tidy, vet and staticcheck, once), the API contract,
## axe-core for the console's browser test, tus-js-client for the resumable
## uploads' test, ts-mls for the MLS family's test, the release (whose Debian package and image the tests
## install and run), then every test (internal/testrun), ending with a
## summary that names every skipped test and why. go test's own vet is off:
## lint ran the whole of it.
test:
	$(call step,lint)
	$(call step,contract)
	$(call step,axe)
	$(call step,tusjs)
	$(call step,mlsjs)
	$(call step,release)
	go run ./internal/testrun -vet=off -count=1 -timeout 20m ./...

# step runs target $(1) and prints its name and how long it took.
step = @t=$$(date +%s); echo "== make $(1)"; \
	$(MAKE) --no-print-directory $(1) || { echo "== make $(1) failed after $$(($$(date +%s) - t)) s"; exit 1; }; \
	echo "== make $(1): $$(($$(date +%s) - t)) s"

## build: a static, stripped, version-stamped binary for this machine
build:
	go build $(GOFLAGS_BUILD) -o bin/nah ./cmd/nah

## build-all: release binaries for linux amd64 and arm64
build-all:
	GOOS=linux GOARCH=amd64 go build $(GOFLAGS_BUILD) -o bin/nah-linux-amd64 ./cmd/nah
	GOOS=linux GOARCH=arm64 go build $(GOFLAGS_BUILD) -o bin/nah-linux-arm64 ./cmd/nah

## release: archives (binary, LICENSE, INSTALL.txt), Debian packages and
## SBOMs for linux amd64 and arm64, with checksums.txt, in bin/release, by
## goreleaser (packaging/goreleaser.yaml); then the container image (make
## image). A snapshot unless HEAD is tagged; PUBLISH=1 on a tag publishes
## (.ci/release); goreleaser reads the commit only from a clone with a
## remote, which a worktree without one is lent for the run. goreleaser and
## syft are go tools pinned in packaging/tools,
## their own module: they bring about 480 modules, which the server's go.mod
## should not list.
release:
	@set -e; gr=$$(cd packaging/tools && go tool -n goreleaser); \
	syft=$$(cd packaging/tools && go tool -n syft); \
	mode=--snapshot; \
	if git describe --exact-match --tags HEAD >/dev/null 2>&1; then \
		if [ -n "$(PUBLISH)" ]; then mode=; else mode=--skip=publish; fi; \
	fi; \
	if [ -z "$$(git remote)" ]; then \
		export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=remote.origin.url GIT_CONFIG_VALUE_0=https://github.com/nah-app/nah; \
	fi; \
	echo "goreleaser release $$mode"; \
	PATH="$$(dirname $$syft):$$PATH" $$gr release --clean --config packaging/goreleaser.yaml $$mode
	$(MAKE) image

## image: the container image (packaging/Containerfile) for amd64 and arm64
## from bin/release's binaries, with podman: localhost/nah:VERSION-ARCH (a
## tag has no ~), and
## each saved as bin/release/nah_VERSION_image_linux_ARCH.tar (a docker-archive,
## which keeps the health check that an OCI archive drops: podman or docker
## load), its checksum added to checksums.txt
image:
	@command -v podman >/dev/null || { echo "make image needs podman (Debian's podman; .ci/run installs it): no image, so its tests skip"; [ "$$CI" != true ]; exit; }; \
	set -e; v=$$(sed -n 's/.*"version":"\([^"]*\)".*/\1/p' bin/release/metadata.json); \
	tag=$$(echo "$$v" | tr '~+' '--'); \
	rm -rf bin/image && mkdir -p bin/image/empty; \
	for arch in amd64 arm64; do \
		mkdir -p bin/image/$$arch && cp bin/release/nah_linux_$${arch}_*/nah bin/image/$$arch/nah; \
		podman build -q --format docker --platform linux/$$arch --timestamp $$(git log -1 --format=%ct) \
			--build-arg VERSION=$$v --build-arg REVISION=$(COMMIT) --build-arg CREATED=$(DATE) \
			-f packaging/Containerfile -t localhost/nah:$$tag-$$arch . ; \
		rm -f bin/release/nah_$${v}_image_linux_$$arch.tar; \
		podman save -q --format docker-archive -o bin/release/nah_$${v}_image_linux_$$arch.tar localhost/nah:$$tag-$$arch; \
	done; \
	cd bin/release && sed -i '/_image_linux_/d' checksums.txt && sha256sum nah_*_image_linux_*.tar >> checksums.txt

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
contract: contract/node_modules/.package-lock.json
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
	cd contract/goclient && go test -vet=off -count=1 -timeout 10m ./...

## goclient: regenerate contract/goclient's Go client from openapi.json
goclient:
	cd contract/goclient && go tool oapi-codegen -config oapi-codegen.yaml -o nahclient/client.gen.go ../../openapi.json

## axe: axe-core, pinned in app/testdata/axe, which the console's browser
## test injects into every page (needs npm and the npm registry)
axe: app/testdata/axe/node_modules/.package-lock.json

## tusjs: tus-js-client, pinned in app/testdata/tus, which the resumable
## uploads' test runs with node against the real server (needs the npm registry)
tusjs: app/testdata/tus/node_modules/.package-lock.json

# npm ci again only when a package-lock.json changed: npm writes
# node_modules/.package-lock.json at the end of an install.
%/node_modules/.package-lock.json: %/package-lock.json
	cd $* && npm ci --no-audit --no-fund --loglevel=error

## mlsjs: ts-mls, pinned in app/testdata/mls, whose phones the MLS family's
## test (cmd/nah) runs with node against the real server (needs the npm registry)
mlsjs: app/testdata/mls/node_modules/.package-lock.json

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
	rm -rf bin contract/node_modules contract/generated.ts app/testdata/axe/node_modules app/testdata/tus/node_modules app/testdata/mls/node_modules
