/**
 * The client's `X-Request-Id` (gateway.md 13): echoed on every answer as the exact bytes the client sent, never used
 * as an engine request id.
 *
 * Node keeps a header value as one char per byte received (latin1) and writes a header block out the same way, so an
 * id echoed as it came leaves as the client's bytes, UTF-8 or not. Except in one case: a header block that has not
 * left yet goes out with the response's first body write, and when that write is a string (the usual `end(json)`, an
 * SSE record, or `flushHeaders()`'s empty one) without chunked framing ahead of it, Node prepends the block to the
 * string and encodes both as UTF-8 (node:_http_outgoing `_send`), so every byte ≥ 0x80 of the id left encoded a
 * second time (`ü`, c3 bc, as c3 83 c2 bc). Handed bytes instead, Node writes the header block apart, in latin1:
 * `headerSafeBody`, which copies a body only for an id with such a byte.
 */
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { randomHexId } from './random-id.js';

/** The header carrying the client's id. */
export const REQUEST_ID_HEADER = 'x-request-id';

// Any char above 0x7f (a string's chars are UTF-16 code units, at most 0xffff).
const HIGH_BYTE = /[\x80-\uffff]/;

/** Characters of a client's id kept in log lines (the echo keeps it whole): a header may be kilobytes long. */
export const LOGGED_REQUEST_ID_CHARS = 256;

/**
 * The id every log line about a request carries (`requestId`; fastify's `genReqId`): the client's `X-Request-Id`
 * (cut to `LOGGED_REQUEST_ID_CHARS`), else a fresh 32-hex-digit id, which a generation request also takes as its
 * response and engine request id after the route's prefix (serve-generation.ts), so one id names it everywhere.
 */
export function logRequestId(raw: IncomingMessage): string {
  const header = clientRequestId(raw.headers);
  if (header === null) return randomHexId();
  // Node holds the header one char per byte: the bytes read as UTF-8 (what a client sends) for the log.
  const id = hasHighBytes(header) ? Buffer.from(header, 'latin1').toString('utf8') : header;
  if (id.length <= LOGGED_REQUEST_ID_CHARS) return id;
  // Not between the two halves of a surrogate pair: a lone one is valid JSON text that strict parsers refuse.
  const high = id.charCodeAt(LOGGED_REQUEST_ID_CHARS - 1);
  const cut = high >= 0xd800 && high <= 0xdbff ? LOGGED_REQUEST_ID_CHARS - 1 : LOGGED_REQUEST_ID_CHARS;
  return `${id.slice(0, cut)}…`;
}

/** The client's id as Node parsed it (one char per byte), or null when absent or empty. */
export function clientRequestId(headers: IncomingHttpHeaders): string | null {
  const id = headers[REQUEST_ID_HEADER];
  return typeof id === 'string' && id !== '' ? id : null;
}

/**
 * Echo the client's id on `reply` unless the reply already carries an id (the generation routes set theirs). For
 * every answer, including the ones fastify makes before routing (`frameworkErrors`), where no route hook runs.
 */
export function echoRequestId(request: FastifyRequest, reply: FastifyReply): void {
  if (reply.hasHeader(REQUEST_ID_HEADER)) return;
  const id = clientRequestId(request.headers);
  if (id !== null) reply.header(REQUEST_ID_HEADER, id);
}

/** Whether a header value as Node holds it (one char per byte) has a byte ≥ 0x80 (see `headerSafeBody`). */
export function hasHighBytes(value: unknown): boolean {
  return typeof value === 'string' && HIGH_BYTE.test(value);
}

/**
 * `body` as a response's first write must be handed to Node: its UTF-8 bytes when the header block holds a byte
 * ≥ 0x80 (`highBytes`, from `hasHighBytes`), so the block leaves as the bytes it holds; else the string unchanged.
 */
export function headerSafeBody(body: string, highBytes: boolean): string | Buffer {
  return highBytes ? Buffer.from(body, 'utf8') : body;
}

/** A fastify reply's serialized `body` as Node must be handed it for the reply's id (`headerSafeBody`). */
export function replyBody(reply: FastifyReply, body: string): string | Buffer {
  return headerSafeBody(body, hasHighBytes(reply.getHeader(REQUEST_ID_HEADER)));
}
