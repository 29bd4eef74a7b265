import { Injectable, type NestMiddleware } from '@nestjs/common';
import type { IncomingMessage, ServerResponse } from 'node:http';

/** Deepest nesting of arrays and objects a request body may have. */
export const MAX_BODY_DEPTH = 32;

/** The 400 problem a body nested too deep gets. */
const TOO_DEEP = JSON.stringify({
  type: 'about:blank',
  title: 'Bad Request',
  status: 400,
  detail: `The request body nests arrays or objects more than ${MAX_BODY_DEPTH} levels deep. Send a flat JSON object, such as {"amount":1250,"currency":"EUR","merchantId":"m_42"}.`,
});

/**
 * Refuses with `400` a parsed body nested deeper than {@link MAX_BODY_DEPTH}
 * before anything else reads it. The `ValidationPipe` (class-transformer,
 * then class-validator) walks a body recursively: a body of a few thousand
 * nested arrays would exhaust the stack there, after a long walk, and be
 * answered `500`. As a middleware it runs before the interceptors: such a
 * request claims no idempotency key and writes nothing. (On Express, where
 * the body is parsed before middleware runs.)
 */
@Injectable()
export class BodyDepthMiddleware implements NestMiddleware {
  use(
    request: IncomingMessage & { body?: unknown },
    response: ServerResponse,
    next: () => void,
  ): void {
    if (!nestedDeeperThan(request.body, MAX_BODY_DEPTH)) {
      next();
      return;
    }
    response.writeHead(400, {
      'content-type': 'application/problem+json',
      'content-length': Buffer.byteLength(TOO_DEEP),
    });
    response.end(TOO_DEEP);
  }
}

/**
 * Whether `value` nests arrays or objects more than `limit` levels deep,
 * walked with a stack of its own (so that no depth exhausts the call stack).
 */
export function nestedDeeperThan(value: unknown, limit: number): boolean {
  const pending: Array<readonly [object, number]> = [];
  if (value !== null && typeof value === 'object') {
    pending.push([value, 1]);
  }
  for (let next = pending.pop(); next; next = pending.pop()) {
    const [node, depth] = next;
    if (depth > limit) {
      return true;
    }
    for (const child of Object.values(node)) {
      if (child !== null && typeof child === 'object') {
        pending.push([child as object, depth + 1]);
      }
    }
  }
  return false;
}
