import { HttpStatus } from '@nestjs/common';
import {
  IdempotencyHttpException,
  problemType,
} from './idempotency-http.exception.js';

/**
 * `415 Unsupported Media Type`: the request carries a body that the
 * application did not parse (no body parser for its content type) and whose
 * raw bytes it did not keep, so the module cannot tell it from another
 * request under the same key. Nothing ran and no record was written. The
 * client should send a content type the endpoint parses; the application
 * can accept this one by registering a parser for it (such as
 * `app.useBodyParser('text')` on Express). The problem never quotes the
 * request's `Content-Type`: client input is not reflected in the answer.
 */
export class IdempotencyBodyUnreadableException extends IdempotencyHttpException {
  /**
   * @param contentType the request's `Content-Type`, if any: it only chooses the parser suggested.
   * @param files whether the body's files were read apart from it (by a
   * middleware such as Multer's), where the module cannot read them.
   * @default false
   */
  constructor(
    contentType: string | undefined,
    readonly files = false,
  ) {
    const typed = contentType !== undefined && contentType.trim() !== '';
    const parser = /^\s*text\//i.test(contentType ?? '') ? 'text' : 'raw';
    super({
      type: problemType('unreadable-body'),
      title: 'Request body not readable',
      status: HttpStatus.UNSUPPORTED_MEDIA_TYPE,
      detail: files
        ? 'The files of this request were read apart from its body, so they cannot be told apart from those of another request with the same idempotency key; nothing ran.'
        : `The body of this request (${typed ? 'of a media type that has no parser in the application' : 'without a Content-Type'}) was not parsed by the application, so it cannot be told apart from another request with the same idempotency key; nothing ran. Send the body in a format this endpoint parses, such as application/json, or register a parser for ${typed ? 'its media type' : 'it'} in the application (for example app.useBodyParser('${parser}')).`,
    });
  }
}
