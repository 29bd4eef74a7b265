import { Module } from '@nestjs/common';
import { Database, startDatabase } from './database.js';

@Module({
  providers: [{ provide: Database, useFactory: startDatabase }],
  exports: [Database],
})
export class DatabaseModule {}
