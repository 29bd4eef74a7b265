import type { Logger } from 'typeorm';

/** A TypeORM logger that records every statement the DataSource sends. */
export class QueryCounter implements Logger {
  statements: string[] = [];

  logQuery(query: string): void {
    this.statements.push(query.replace(/\s+/g, ' ').trim());
  }
  logQueryError(): void {}
  logQuerySlow(): void {}
  logSchemaBuild(): void {}
  logMigration(): void {}
  log(): void {}
}
