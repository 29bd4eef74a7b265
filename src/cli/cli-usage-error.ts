/**
 * @internal A mistake in the command line itself (exit code 2): the help
 * follows the message.
 */
export class CliUsageError extends Error {}
