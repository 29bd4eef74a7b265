import type { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { absentPeerError, loadOptionalPeer } from '../core/optional-peer.js';

/**
 * @internal What the module takes of TypeORM and its Nest module at run
 * time. They are imported only when the PostgreSQL store is used, so that
 * an application on another store needs neither installed.
 */
export interface TypeormRuntime {
  readonly DataSource: typeof DataSource;
  readonly getDataSourceToken: typeof getDataSourceToken;
}

/**
 * @internal Imports TypeORM and `@nestjs/typeorm`.
 * @throws IdempotencyConfigurationError when either is not installed.
 */
export async function loadTypeormRuntime(): Promise<TypeormRuntime> {
  const [typeorm, nestTypeorm] = await Promise.all([
    loadOptionalPeer('typeorm', () => import('typeorm')),
    loadOptionalPeer('@nestjs/typeorm', () => import('@nestjs/typeorm')),
  ]);
  if (!typeorm || !nestTypeorm) {
    const absent = [
      ...(typeorm ? [] : ['typeorm']),
      ...(nestTypeorm ? [] : ['@nestjs/typeorm']),
    ];
    throw absentPeerError(
      `The PostgreSQL store (the module's store without a \`store\` option) needs ${absent.join(' and ')}, which ${absent.length > 1 ? 'are' : 'is'} not installed.`,
      absent,
      'Give the module another store: `IdempotencyModule.forRoot({ store })`.',
    );
  }
  return {
    DataSource: typeorm.DataSource,
    getDataSourceToken: nestTypeorm.getDataSourceToken,
  };
}
