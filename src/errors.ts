// The three kinds of failure (refusal, transient, config), each with a stable snake_case code.

export type ErrorDetails = Readonly<Record<string, unknown>>;

/** The rules say no: the caller caused it, a retry with the same input fails the same way. */
export class RefusalError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly details: ErrorDetails = {},
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = 'RefusalError';
  }
}

/** A refusal because the thing named does not exist (for this caller). */
export class NotFoundError extends RefusalError {
  constructor(code: string, message: string, details: ErrorDetails = {}) {
    super(code, message, details);
    this.name = 'NotFoundError';
  }
}

/** A request whose input does not hold (its message names the field): it changed nothing. */
export class InvalidRequestError extends RefusalError {
  constructor(message: string) {
    super('invalid_request', message);
    this.name = 'InvalidRequestError';
  }
}

/** Try later: Redis or a remote service is unreachable, a lock is held, a request timed out. */
export class TransientError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly details: ErrorDetails = {},
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = 'TransientError';
  }
}

/** The process cannot run as configured: fail at start with a message naming the setting. */
export class ConfigError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly details: ErrorDetails = {},
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = 'ConfigError';
  }
}

/**
 * A provider answered 200 with what is not an answer of the interface (not JSON, another shape,
 * another object's): nothing is recorded from it. Neither a refusal nor an outage: the job
 * retries it as an unexpected failure (a few times, then fails for a person to see).
 */
export class MalformedAnswerError extends Error {
  readonly code = 'provisioning_malformed_answer';
  constructor(
    message: string,
    readonly details: ErrorDetails = {},
  ) {
    super(message);
    this.name = 'MalformedAnswerError';
  }
}
