import type { LoggerService, LogLevel } from '@nestjs/common';

/** One line a Nest logger was given. */
export interface LogLine {
  readonly level: LogLevel;
  /** The logger's context (`Idempotency`, `ExceptionsHandler`, ...). */
  readonly context: string | undefined;
  /** The message, or for an error logged as such its `name: message`. */
  readonly message: string;
  /** Whether a stack came with it (an error object, or a stack argument). */
  readonly stack: boolean;
}

/**
 * A Nest `LoggerService` that keeps every line (`app.useLogger(logger)`):
 * what the application prints, as a custom logger of its own would get it.
 */
export class CapturedLogger implements LoggerService {
  readonly lines: LogLine[] = [];

  log(message: unknown, ...params: unknown[]): void {
    this.keep('log', message, params);
  }

  error(message: unknown, ...params: unknown[]): void {
    this.keep('error', message, params);
  }

  warn(message: unknown, ...params: unknown[]): void {
    this.keep('warn', message, params);
  }

  debug(message: unknown, ...params: unknown[]): void {
    this.keep('debug', message, params);
  }

  verbose(message: unknown, ...params: unknown[]): void {
    this.keep('verbose', message, params);
  }

  fatal(message: unknown, ...params: unknown[]): void {
    this.keep('fatal', message, params);
  }

  /** The lines of `context` (the module's: `Idempotency`), as `level message`. */
  of(context: string): string[] {
    return this.lines
      .filter((line) => line.context === context)
      .map((line) => `${line.level} ${line.message}`);
  }

  /** The lines at `level`, whatever their context. */
  at(level: LogLevel): LogLine[] {
    return this.lines.filter((line) => line.level === level);
  }

  /** Forgets the lines kept so far. */
  clear(): void {
    this.lines.length = 0;
  }

  private keep(level: LogLevel, message: unknown, params: unknown[]): void {
    // Nest's Logger passes its context last, and `error()` a stack before
    // it (`undefined` when it has none).
    const context =
      params.length > 0 && typeof params[params.length - 1] === 'string'
        ? (params[params.length - 1] as string)
        : undefined;
    const stack =
      (message instanceof Error && message.stack !== undefined) ||
      (level === 'error' && typeof params[0] === 'string' && params.length > 1);
    this.lines.push({
      level,
      context,
      message:
        message instanceof Error
          ? `${message.name}: ${message.message}`
          : String(message),
      stack,
    });
  }
}
