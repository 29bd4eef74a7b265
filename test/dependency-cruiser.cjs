/* global module */
/**
 * The dependency rules of the library, checked by `npm run lint`.
 *
 * Dependencies point inward. The core (the request sequence and its
 * ports: `src/core/`, the public contracts in `src/interfaces/`, the
 * errors in `src/exceptions/`, and the module's own top-level files) knows
 * nothing of the transports (`http/`, `graphql/`, `messages/`, `bullmq/`),
 * the stores, TypeORM or the integrations (`typeorm/`, `cls/`,
 * `telemetry/`, `openapi/`, `testing/`). Only the composition roots (the
 * module, its providers, the dispatching interceptor and the package's
 * entry points) wire them together.
 */
/** The folders of the data libraries' adapters of the PostgreSQL store. */
const ADAPTERS = 'typeorm|prisma|drizzle|kysely|pg';
const OUTER = `^src/(http|graphql|messages|bullmq|stores|${ADAPTERS}|cls|telemetry|openapi|testing)/`;
const COMPOSITION =
  '^src/(index|idempotency[.]module|idempotency[.]providers|idempotency[.]interceptor)[.]ts$|^src/[^/]+/index[.]ts$|^src/stores/[^/]+/index[.]ts$';
const CORE = '^src/(core|interfaces|exceptions)/|^src/[^/]+[.]ts$';

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
      comment: 'A cycle of folders: their layers are not apart.',
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
      from: { path: '^src/(http|graphql|messages|bullmq)/' },
      to: {
        path: '^src/(http|graphql|messages|bullmq)/',
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
        path: '^src/(http|graphql|messages|bullmq|cls|openapi|telemetry)/',
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
