export {
  IdempotencyTransactionalAdapter,
  type IdempotencyTransactionalAdapterOptions,
} from './idempotency-transactional.adapter.js';
