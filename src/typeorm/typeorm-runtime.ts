import type { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';

/**
 * @internal What the module takes of TypeORM and its Nest module at run
 * time. They are imported only when the PostgreSQL store is used, so that
 * an application on another store needs neither installed.
 */
export interface TypeormRuntime {
  readonly DataSource: typeof DataSource;
  readonly getDataSourceToken: typeof getDataSourceToken;
}

/** @internal Injection token of the {@link TypeormRuntime}. */
export const TYPEORM_RUNTIME = Symbol('TYPEORM_RUNTIME');

/** @internal Imports TypeORM and `@nestjs/typeorm`. */
export async function loadTypeormRuntime(): Promise<TypeormRuntime> {
  const [typeorm, nestTypeorm] = await Promise.all([
    import('typeorm'),
    import('@nestjs/typeorm'),
  ]);
  return {
    DataSource: typeorm.DataSource,
    getDataSourceToken: nestTypeorm.getDataSourceToken,
  };
}
