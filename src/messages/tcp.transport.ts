import { plainTransport, type MessageTransport } from './message-transport.js';

/**
 * @internal TCP (`TcpContext`): the pattern, as its client wrote it (an
 * object's fields in the client's order); no headers, so the key is in
 * the data (or the `key` option's).
 */
export function tcpTransport(context: unknown): MessageTransport | undefined {
  const tcp = context as { getSocketRef?: unknown; getPattern?: unknown };
  return typeof tcp.getSocketRef === 'function' &&
    typeof tcp.getPattern === 'function'
    ? {
        ...plainTransport((tcp as { getPattern(): unknown }).getPattern()),
        asWritten: true,
      }
    : undefined;
}
