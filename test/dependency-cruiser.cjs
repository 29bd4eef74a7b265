/* global module */
/**
 * The dependency rules of the library, checked by `npm run lint`.
 *
 * Dependencies point inward. At the centre, the core (the request sequence
 * and its ports in `src/core/`, the public contracts in `src/interfaces/`,
 * the errors in `src/exceptions/`) imports nothing else of the library but
 * the caller client's retry rules (`client/`, which imports nothing): it
 * owns the ports (options, events, telemetry, transactions) that the rest
 * implements. Around it, `outgoing/` (a handler's outgoing calls) imports
 * the core only. The module's own top-level files (its public API, the
 * options' resolution) import the core and `outgoing/`, and know nothing
 * of the transports (`http/`, `graphql/`, `messages/`, `bullmq/`,
 * `webhooks/`), the
 * stores, TypeORM or the integrations (`typeorm/`, `cls/`, `telemetry/`,
 * `openapi/`, `testing/`). Only the composition roots (the module, its
 * providers, the dispatching interceptor and the package's entry points)
 * wire them together.
 */
/** The folders of the data libraries' adapters of the PostgreSQL store. */
const ADAPTERS = 'typeorm|prisma|drizzle|kysely|pg';
const OUTER = `^src/(http|graphql|messages|bullmq|webhooks|stores|${ADAPTERS}|cls|telemetry|openapi|testing)/`;
const COMPOSITION =
  '^src/(index|idempotency[.]module|idempotency[.]providers|idempotency[.]interceptor)[.]ts$|^src/[^/]+/index[.]ts$|^src/stores/[^/]+/index[.]ts$';
const INNER = '^src/(core|interfaces|exceptions)/';
const CORE = `${INNER}|^src/[^/]+[.]ts$`;

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'A cycle of files: one of them belongs elsewhere.',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    {
      name: 'no-circular-folders',
      comment:
        'A cycle of folders: their layers are not apart. (A folder and the folders within it are one to this rule: core-is-innermost keeps src/core/ apart from the files above it.)',
      severity: 'error',
      scope: 'folder',
      from: {},
      to: { circular: true },
    },
    {
      name: 'core-is-inward',
      comment:
        'The core imports no transport, store, TypeORM or integration folder: it owns the interfaces they implement.',
      severity: 'error',
      from: { path: CORE, pathNot: COMPOSITION },
      to: { path: OUTER },
    },
    {
      name: 'core-is-innermost',
      comment:
        "The request sequence, the contracts and the errors import neither the module's top-level files nor outgoing/: the core owns the ports of its options and events, which the top level provides.",
      severity: 'error',
      from: { path: INNER },
      to: { path: ['^src/[^/]+[.]ts$', '^src/outgoing/'] },
    },
    {
      name: 'outgoing-knows-only-the-core',
      comment:
        "A handler's outgoing calls import the core (and the caller client's retry rules) only: neither the top-level files that use them nor a transport, store or integration.",
      severity: 'error',
      from: { path: '^src/outgoing/' },
      to: {
        path: '^src/',
        pathNot: '^src/(outgoing|core|interfaces|exceptions|client)/',
      },
    },
    {
      name: 'core-knows-no-driver',
      comment:
        'The request sequence knows nothing of TypeORM, the PostgreSQL driver or Node.js HTTP.',
      severity: 'error',
      from: { path: '^src/core/' },
      to: {
        path: '(^|/)node_modules/(typeorm|pg|@nestjs/typeorm|@nestjs/platform-[^/]+|express|fastify)/|^(node:)?https?$',
      },
    },
    {
      name: 'public-api-types-only-from-typeorm',
      comment:
        'The public API files name TypeORM types (EntityManager) but never load TypeORM: an application on another store needs none.',
      severity: 'error',
      from: { path: CORE, pathNot: COMPOSITION },
      to: {
        path: '(^|/)node_modules/(typeorm|@nestjs/typeorm)/',
        dependencyTypesNot: ['type-only'],
      },
    },
    {
      name: 'transports-are-apart',
      comment:
        'A transport adapter never imports another one (GraphQL, served over HTTP, reads the key header as HTTP does).',
      severity: 'error',
      from: { path: '^src/(http|graphql|messages|bullmq|webhooks)/' },
      to: {
        path: '^src/(http|graphql|messages|bullmq|webhooks)/',
        pathNot: ['^src/$1/', '^src/http/idempotency-key[.]ts$'],
      },
    },
    {
      name: 'client-stands-alone',
      comment:
        'The caller client (the ./client entry) runs in browsers too: it imports nothing of the rest of the library.',
      severity: 'error',
      from: { path: '^src/client/' },
      to: { path: '^src/', pathNot: '^src/client/' },
    },
    {
      name: 'postgres-store-knows-no-data-library',
      comment:
        'The PostgreSQL store reaches the database through its connection port (interfaces/postgres-adapter.interface.ts) only: it imports no adapter of a data library, and no data library or driver, not even their types.',
      severity: 'error',
      from: { path: '^src/stores/postgres/' },
      to: {
        path: [
          `^src/(${ADAPTERS})/`,
          '(^|/)node_modules/(typeorm|@nestjs/typeorm|pg|pg-pool|@prisma/[^/]+|prisma|drizzle-orm|kysely)/',
        ],
      },
    },
    {
      name: 'stores-know-no-transport',
      comment: 'A store implements the store contract, whatever the transport.',
      severity: 'error',
      from: { path: '^src/stores/' },
      to: {
        path: '^src/(http|graphql|messages|bullmq|cls|openapi|telemetry|outgoing|client)/',
      },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '[.]spec[.]ts$' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
    },
  },
};
