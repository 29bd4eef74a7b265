export { IdempotencyTestingModule } from './idempotency-testing.module.js';
