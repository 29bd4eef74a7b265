import { createHash } from 'node:crypto';
import type { Attempt } from '../core/attempt.js';
import { routeAttributes, spanAttributes } from './telemetry-attributes.js';

function attempt(fields: Partial<Attempt>): Attempt {
  return {
    started: 0,
    scope: 'user-42',
    key: 'order-7',
    method: 'POST',
    path: '/orders/:id',
    fingerprint: 'f',
    ...fields,
  };
}

describe('routeAttributes', () => {
  it('names an HTTP request by its method and route template', () => {
    expect(routeAttributes(attempt({}))).toEqual({
      'http.request.method': 'POST',
      'http.route': '/orders/:id',
    });
  });

  it('names a message or a run by its kind and pattern or name', () => {
    expect(
      routeAttributes(attempt({ method: 'MESSAGE', path: 'order.placed' })),
    ).toEqual({
      'idempotency.operation.type': 'message',
      'idempotency.operation.name': 'order.placed',
    });
    expect(routeAttributes(attempt({ method: 'RUN', path: 'settle' }))).toEqual(
      {
        'idempotency.operation.type': 'run',
        'idempotency.operation.name': 'settle',
      },
    );
  });

  it('never carries the key or the scope', () => {
    const values = Object.values(routeAttributes(attempt({}))).join(' ');
    expect(values).not.toContain('order-7');
    expect(values).not.toContain('user-42');
  });
});

describe('spanAttributes', () => {
  it("carries a hash of the key by default ('hash'), and not the scope", () => {
    expect(spanAttributes(attempt({}), 'hash')).toEqual({
      'http.request.method': 'POST',
      'http.route': '/orders/:id',
      'idempotency.key.hash': createHash('sha256')
        .update('order-7')
        .digest('hex')
        .slice(0, 16),
    });
  });

  it("carries the key and the scope as they are with 'raw'", () => {
    expect(spanAttributes(attempt({}), 'raw')).toEqual({
      'http.request.method': 'POST',
      'http.route': '/orders/:id',
      'idempotency.key': 'order-7',
      'idempotency.scope': 'user-42',
    });
  });

  it("carries neither with 'none', nor for a keyless request", () => {
    const route = {
      'http.request.method': 'POST',
      'http.route': '/orders/:id',
    };
    expect(spanAttributes(attempt({}), 'none')).toEqual(route);
    expect(spanAttributes(attempt({ key: undefined }), 'raw')).toEqual(route);
    expect(spanAttributes(attempt({ key: undefined }), 'hash')).toEqual(route);
  });
});
