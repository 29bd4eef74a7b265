import { TransactionSlotTimeoutError } from '../core/transaction.errors.js';
import { Logger } from '@nestjs/common';
import { poolTransactionGate, TransactionGate } from './transaction-gate.js';

describe('TransactionGate', () => {
  it('lets capacity transactions in at once', async () => {
    const gate = new TransactionGate(2);
    await gate.acquire(0);
    await gate.acquire(0);
    expect(gate.size).toBe(2);
  });

  it('takes a free place without waiting, and none when all are taken', () => {
    const gate = new TransactionGate(1);
    expect(gate.tryAcquire()).toBe(true);
    expect(gate.tryAcquire()).toBe(false);
    expect(gate.size).toBe(1);
    gate.release();
    expect(gate.tryAcquire()).toBe(true);
  });

  it('hands a place that comes free to the first waiter, in order', async () => {
    const gate = new TransactionGate(1);
    await gate.acquire(0);
    const order: string[] = [];
    const first = gate.acquire(10_000).then(() => order.push('first'));
    const second = gate.acquire(10_000).then(() => order.push('second'));
    gate.release();
    await first;
    expect(order).toEqual(['first']);
    expect(gate.size).toBe(1);
    gate.release();
    await second;
    expect(order).toEqual(['first', 'second']);
    gate.release();
    expect(gate.size).toBe(0);
  });

  it('gives up after the wait it was given, and leaves the queue', async () => {
    const gate = new TransactionGate(1);
    await gate.acquire(0);
    await expect(gate.acquire(1)).rejects.toThrow(TransactionSlotTimeoutError);
    await expect(gate.acquire(1)).rejects.toThrow(
      'No transaction of the module ended within 1 ms (1 open)',
    );
    // The timed-out waiters got nothing: the place goes back to the gate.
    gate.release();
    expect(gate.size).toBe(0);
    await gate.acquire(0);
    expect(gate.size).toBe(1);
  });
});

describe('poolTransactionGate', () => {
  /** A logger that keeps its warnings. */
  const logger = () => {
    const warnings: string[] = [];
    const kept = new Logger('test');
    kept.warn = (message: unknown) => {
      warnings.push(String(message));
    };
    return { kept, warnings };
  };

  it.each([
    [10, 9],
    [2, 1],
    [undefined, Infinity],
  ])(
    'gives a pool of %s connections a gate of %s transactions, silently',
    (size, capacity) => {
      const { kept, warnings } = logger();
      expect(poolTransactionGate(size, kept).capacity).toBe(capacity);
      expect(warnings).toEqual([]);
    },
  );

  it('warns of a pool of one connection, which no lease renewal can use while a handler holds it', () => {
    const { kept, warnings } = logger();
    expect(poolTransactionGate(1, kept).capacity).toBe(Infinity);
    expect(warnings).toEqual([
      expect.stringContaining(
        "has 1 connection: while a handler's transaction holds it, the module cannot renew the request's lease",
      ),
    ]);
  });
});
