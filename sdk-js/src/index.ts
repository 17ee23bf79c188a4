// @lanesmq/lanes — the TypeScript client for Lanes, a partitioned message queue on PostgreSQL.
// This file is the whole public surface; nothing else is importable.
export { Lanes, type LanesOptions } from "./client.js";
export { withDeadline } from "./deadline.js";
export type { RequestOptions } from "./request-options.js";
export { QueueBuilder, DlqBuilder, type SubscriptionMode } from "./queue.js";
export { Consumer, type Handler, type BatchHandler, type HandlerContext, type ErrorHandler, type ConsumeOptions, type StopOptions } from "./consumer.js";
export { TransactionBuilder, TransactionQueue, TransactionKv } from "./transaction.js";
export { Admin, type SeekTarget, type WalkOptions } from "./admin.js";
export { Kv, type KvExpiry } from "./kv.js";
export { Timers, timerOp, type TimerSchedule } from "./timers.js";
export { PushBuffer, type BufferOptions } from "./buffer.js";
export type { Message, PopResult, AckStatus } from "./message.js";
export type { PushItem, PushResult, AckTarget, AckOptions, RenewResult } from "./internal/core.js";
export type { Logger } from "./internal/log.js";
export { decideRetry, parseRetryHint, backoff, kvOpsIdempotent, DEFAULT_RETRY_POLICY, type RetryPolicy, type RetryInput, type RetryDecision, type HeaderSource, type KvOpLike } from "./retry.js";
export { popQuery, autopilotFromEnv, type PopKnobs } from "./pop.js";
export {
  LanesError,
  APIError,
  BadRequestError,
  AuthenticationError,
  PermissionDeniedError,
  NotFoundError,
  ConflictError,
  PayloadTooLargeError,
  RateLimitError,
  InternalServerError,
  NotImplementedByBrokerError,
  APIConnectionError,
  APITimeoutError,
  OutcomeUnknownError,
  UnexpectedAnswerError,
  PushError,
  type ItemError,
  InvalidItemError,
  InvalidValueError,
  InvalidNameError,
  ClientClosedError,
  UnsentError,
  AckError,
  TransactionError,
  EmptyTransactionError,
  ConsumerStoppedError,
  AutoAckDroppedError,
  HandlerError,
} from "./errors.js";
export type * from "./types.js";
export type { components, operations, paths } from "./generated/schema.js";
