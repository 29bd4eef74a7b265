import type { AdapterFixture } from './adapter-fixture.js';
import { drizzleFixture } from './drizzle.fixture.js';
import { kyselyFixture } from './kysely.fixture.js';
import { pgFixture } from './pg.fixture.js';
import { prismaFixture } from './prisma.fixture.js';
import { typeormFixture } from './typeorm.fixture.js';

/** Every data library the PostgreSQL store has an adapter of. */
export const ADAPTERS: readonly AdapterFixture[] = [
  typeormFixture,
  pgFixture,
  drizzleFixture,
  kyselyFixture,
  prismaFixture,
];
