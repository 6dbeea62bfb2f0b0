#!/usr/bin/env bash
# The package as users install it: packs libs/job-queue (its prepack builds it), installs the
# tarball and its peers from the npm registry (the versions the repository pins) into two
# throwaway apps, and compiles and runs them against the PostgreSQL at DATABASE_URL:
#  - an ESM app as `nest new` makes one for Nest 12 (type module, nodenext, isolatedModules,
#    emitDecoratorMetadata, Vitest): tsc (strict), then the app itself (a job added and run by
#    its worker, its row read back as completed), then its Vitest test, which is the example of
#    the guide docs/guides/testing-your-app.md (nestjs-job-queue/testing: findJobs, drain,
#    runTask); and a
#    check that the installed package's source maps name files it ships;
#  - a CommonJS app: tsc (strict), then the app;
#  - the installed bin (npx nestjs-job-queue): validate exits 1 on the empty database and 0
#    once the apps migrated it, and status --json parses.
# Any failure exits non-zero. Each run uses a database of its own on that server, dropped at
# the end. Run from anywhere: DATABASE_URL=postgres://… test/package/consumer-check.sh
# (KEEP_CONSUMER_APPS=1 keeps the apps' folder for a look).
set -euo pipefail

: "${DATABASE_URL:?set DATABASE_URL to a PostgreSQL server where this user may create a database}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# What `nest new` (Nest 12) asks for: typescript ^6.0.2, vitest ^4.1.2; pinned here, as the
# peers are pinned to the repository's own versions below.
TYPESCRIPT=6.0.3
VITEST=4.1.12
NPM_FLAGS=(--no-audit --no-fund --prefer-offline --loglevel=error)

admin_url="$DATABASE_URL"
work="$(mktemp -d "${TMPDIR:-/tmp}/jq-consumer-XXXXXX")"
database="jq_consumer_$$"
cleanup() {
  DATABASE_URL="$admin_url" node "$here/database.cjs" drop "$database" || echo "could not drop database $database" >&2
  if [ "${KEEP_CONSUMER_APPS:-}" = 1 ]; then echo "apps kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
step() { echo "--- [${SECONDS}s] $*"; }

step "pack libs/job-queue"
pack_json="$(cd "$repo/libs/job-queue" && npm pack --json --pack-destination "$work" "${NPM_FLAGS[@]}")"
tarball="$work/$(node -e '
  const [p] = JSON.parse(process.argv[1]);
  const files = p.files.map((f) => f.path);
  const required = ["package.json", "README.md", "LICENSE", "dist/index.js", "dist/index.d.ts", "dist/migrations/index.js", "dist/cli/main.js", "src/index.ts", "docs/guides/testing-your-app.md"];
  const missing = required.filter((f) => !files.includes(f));
  const strays = files.filter((f) => !/^(package\.json|README\.md|LICENSE|(dist|src|docs)\/.+)$/.test(f));
  if (missing.length || strays.length) { console.error(`tarball: missing ${missing.join(", ") || "nothing"}; unexpected ${strays.join(", ") || "nothing"}`); process.exit(1); }
  console.error(`${p.filename}: ${p.entryCount} files, ${Math.round(p.size / 1024)} kB packed, ${Math.round(p.unpackedSize / 1024)} kB unpacked`);
  console.log(p.filename);
' "$pack_json")"

version() { node -p "const p = require('$repo/package.json'); p.dependencies['$1'] ?? p.devDependencies['$1']"; }
peers=()
for name in @nestjs/common @nestjs/core @nestjs/typeorm typeorm pg reflect-metadata rxjs; do
  peers+=("$name@$(version "$name")")
done

step "database $database"
DATABASE_URL="$(node "$here/database.cjs" create "$database")"
export DATABASE_URL

step "ESM app: install"
cp -r "$here/esm-app" "$work/esm-app"
node "$here/readme-files.mjs" "$repo/docs/guides/testing-your-app.md" "$work/esm-app"
cd "$work/esm-app"
npm install "${NPM_FLAGS[@]}" --save-exact "$tarball" "${peers[@]}" "@nestjs/testing@$(version @nestjs/testing)" \
  "typescript@$TYPESCRIPT" "@types/node@$(version @types/node)" "vitest@$VITEST"
step "bin: validate on the empty database exits 1"
code=0; npx --no-install nestjs-job-queue validate > /dev/null || code=$?
[ "$code" = 1 ] || { echo "nestjs-job-queue validate: expected exit 1 before any migration, got $code" >&2; exit 1; }
step "source maps of the installed package"
node "$here/source-maps.mjs" node_modules/nestjs-job-queue
step "ESM app: tsc (strict; src and test), build"
npx --no-install tsc -p tsconfig.json --noEmit
npm run --silent build
step "ESM app: run"
npm run --silent start:prod
step "ESM app: vitest (the guide's test: docs/guides/testing-your-app.md)"
npm test --silent

step "CJS app: install"
cp -r "$here/cjs-app" "$work/cjs-app"
cd "$work/cjs-app"
npm install "${NPM_FLAGS[@]}" --save-exact "$tarball" "${peers[@]}" "typescript@$TYPESCRIPT" "@types/node@$(version @types/node)"
step "CJS app: tsc (strict)"
npm run --silent build
step "CJS app: run"
npm run --silent start:prod
step "bin: validate after the apps migrated, status --json"
npx --no-install nestjs-job-queue validate
npx --no-install nestjs-job-queue status --json | node -e 'const s = JSON.parse(require("fs").readFileSync(0, "utf8")); console.log(`status: ${Object.values(s.jobs.byState).reduce((a, b) => a + b)} jobs`)'

step "consumer check passed"
