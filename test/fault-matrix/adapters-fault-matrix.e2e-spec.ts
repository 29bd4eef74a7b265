import { ADAPTERS } from '../adapters/adapters.js';
import { adapterMatrixSubject } from './adapter-matrix.js';
import { describePostgresMatrix } from './postgres-matrix.js';

/**
 * Issue 40: the fault matrix of the PostgreSQL store (postgres-matrix.ts)
 * on every data library's adapter, its handler writing through the
 * library's own handle of the handler's transaction. TypeORM's handler
 * through repositories: fault-matrix.e2e-spec.ts.
 */
describe.each(ADAPTERS.filter((fixture) => fixture.name !== 'typeorm'))(
  'on $name',
  (fixture) => {
    describePostgresMatrix(adapterMatrixSubject(fixture));
  },
);
