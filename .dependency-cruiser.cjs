/**
 * The library's layering, checked by dependency-cruiser (`npm run lint:layers`, part of
 * `npm test`). Layers point down: a folder of libs/job-queue/src imports only the folders
 * listed for it (all of them lower), never the composition root (index.ts, the module), and
 * nothing outside the package but packages and its own migrations. docs/maintainers.md
 * explains the order. A violation fails with the rule's name and the import that broke it.
 */
const SRC = '^libs/job-queue/src/';

/** Each folder, lowest first, with the folders it may import besides itself. */
const LAYERS = {
  core: [],
  sql: ['core'],
  entities: ['core'],
  db: ['core', 'sql', 'entities'],
  peers: ['core', 'db'],
  telemetry: ['core', 'db', 'peers'],
  events: ['core', 'sql', 'db', 'telemetry'],
  decorators: ['core'],
  discovery: ['core', 'decorators', 'events'],
  // pause and limits: their rules, checks and what a worker keeps of them
  control: ['core', 'sql', 'db', 'discovery'],
  service: ['core', 'sql', 'db', 'peers', 'telemetry', 'events', 'discovery', 'control'],
  worker: ['core', 'sql', 'db', 'peers', 'telemetry', 'events', 'discovery', 'service', 'control'],
  maintenance: ['core', 'sql', 'db', 'events'],
  cron: ['core', 'sql', 'db', 'events', 'discovery'],
  dashboard: ['core', 'sql', 'db', 'discovery', 'control', 'service', 'worker'],
  terminus: ['core', 'sql', 'db', 'worker', 'control'],
  testing: ['core', 'sql', 'db', 'peers', 'discovery', 'service', 'worker', 'control'],
  // the bin: the package's SQL and migrations runner on a DataSource of its own, no Nest app
  cli: ['core', 'sql', 'db'],
};

const layerRules = Object.entries(LAYERS).map(([folder, below]) => ({
  name: `layer-${folder}`,
  comment: `${folder}/ may import only ${below.length ? below.map((f) => `${f}/`).join(', ') : 'itself'} (layers point down: see docs/maintainers.md)`,
  severity: 'error',
  from: { path: `${SRC}${folder}/` },
  to: { path: SRC, pathNot: [`${SRC}(${[folder, ...below].join('|')})/`] },
}));

module.exports = {
  forbidden: [
    ...layerRules,
    {
      name: 'no-unknown-folder',
      comment: 'every folder of the library has a layer in .dependency-cruiser.cjs (LAYERS): give a new one its place',
      severity: 'error',
      from: { path: SRC, pathNot: [`${SRC}[^/]+$`, `${SRC}(${Object.keys(LAYERS).join('|')})/`, `${SRC}migrations/`] },
      to: {},
    },
    {
      name: 'no-import-of-root',
      comment: 'the composition root (index.ts, job-queue.module*.ts) is imported by nothing inside the library',
      severity: 'error',
      from: { path: `${SRC}.+/` },
      to: { path: `${SRC}[^/]+$`, pathNot: [`${SRC}job-queue\\.module-definition\\.ts$`] },
    },
    {
      name: 'no-circular',
      comment: 'no import circles: split the shared part into a file both import',
      severity: 'error',
      from: { path: '^(libs|migrations)/' },
      to: { circular: true },
    },
    {
      name: 'no-outside-package',
      comment: 'the package imports nothing outside its folder but packages and its migrations (#migrations)',
      severity: 'error',
      from: { path: SRC },
      to: { pathNot: [SRC, '^migrations/', 'node_modules'], dependencyTypesNot: ['core'] },
    },
    {
      name: 'migrations-self-contained',
      comment: 'a migration imports only other files of migrations/ and packages: never the library, so that it never changes once applied',
      severity: 'error',
      from: { path: '^migrations/' },
      to: { pathNot: ['^migrations/', 'node_modules'], dependencyTypesNot: ['core'] },
    },
    {
      name: 'no-unresolvable',
      comment: 'every import resolves',
      severity: 'error',
      from: { path: '^(libs|migrations)/' },
      to: { couldNotResolve: true },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: ['^libs/job-queue/src/migrations/', '^libs/job-queue/dist/'] },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    parser: 'swc',
    enhancedResolveOptions: { exportsFields: ['exports'], conditionNames: ['import', 'require', 'node', 'default', 'types'] },
  },
};
