// errors.ts — EmbshardError, the one error type every layer raises (native code constructs it too,
// the better-sqlite3 way), and the list of stable codes.

export const ErrorCodes = [
  'INVALID_ARGUMENT', // a value of the wrong type or shape passed to an API
  'INVALID_CONFIG', // a collection / table / optimizer config that cannot be built
  'INVALID_SIZE', // zero or absurd rows / dim / batch size
  'UNSUPPORTED_DTYPE', // a dtype other than fp32 | fp16 | bf16, or an id array of another type
  'UNSUPPORTED_OPTIMIZER', // an optimizer other than sgd | adagrad | rowwise_adagrad | adam
  'DUPLICATE_FEATURE', // a feature mapped to two tables, or listed twice in a batch
  'UNKNOWN_FEATURE', // a batch feature the collection does not have
  'MISSING_FEATURE', // a collection feature the batch does not have
  'UNKNOWN_TABLE', // a table name the collection does not have
  'ID_OUT_OF_RANGE', // an id < 0 or >= rows under idPolicy 'error'
  'NEGATIVE_LENGTH', // a negative bag length
  'LENGTH_MISMATCH', // lengths / ids / weights / values whose sizes disagree
  'GRAD_SIZE_MISMATCH', // a gradient of the wrong size, or missing
  'DIM_MISMATCH', // values whose width is not the table's dim
  'NON_FINITE_GRADIENT', // NaN or Inf in a gradient under nonFinite 'error'
  'ALLOC_FAILED', // memory for a table could not be allocated
  'BACKEND_UNAVAILABLE', // the requested device cannot be used here
  'BINARY_NOT_FOUND', // no native binary could be loaded
  'DISPOSED', // use of a disposed object
  'CHECKPOINT_MISSING', // a checkpoint directory or file that does not exist
  'CHECKPOINT_CORRUPT', // a checkpoint that is truncated, altered or inconsistent
  'IO_ERROR', // an operating-system I/O failure
  'PLAN_INFEASIBLE', // a model that cannot be placed within the memory limits
  'INVALID_PLAN', // a plan file / object that fails validation
  'COMM_TIMEOUT', // a collective that did not complete in time
  'COMM_FAILED', // a collective that failed (peer died, mismatched call)
  'CUDA_ERROR', // a CUDA runtime / driver error
  'INTERNAL', // a bug: please report it
  'OVERLOADED', // a server that holds as many requests as it takes (maxInFlight): retry later
] as const;

export type ErrorCode = (typeof ErrorCodes)[number];

export class EmbshardError extends Error {
  readonly code: ErrorCode;
  readonly details?: Record<string, unknown>;
  constructor(code: ErrorCode, message: string, details?: Record<string, unknown>) {
    super(message);
    this.name = 'EmbshardError';
    this.code = code;
    if (details !== undefined) this.details = details;
  }
}

/** True when `e` is an EmbshardError, optionally with the given code. */
export function isEmbshardError(e: unknown, code?: ErrorCode): e is EmbshardError {
  return e instanceof EmbshardError && (code === undefined || e.code === code);
}
