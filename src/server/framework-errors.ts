/**
 * OpenAI-style answers for the errors fastify and Node's HTTP parser raise before any route runs (gateway.md 11.3:
 * every error body is `{error: {message, type, param, code}}`):
 * - fastify errors reaching the error handler (body parsing, size limit, media type, validation) and its
 *   `frameworkErrors` (a URL that does not decode, an over-long parameter): `frameworkApiError`;
 * - connection-level parse errors that Node reports as `clientError` (header section over the 16 KiB limit, request
 *   timeout, malformed request line): `clientErrorHandler`, which answers on the raw socket because no request
 *   object exists yet.
 */
import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError } from 'fastify';
import type { Logger } from 'pino';
import { bearerAuthApiError } from './auth.js';
import { ApiError, toApiError } from './errors.js';

/**
 * Map a fastify/framework error to an `ApiError`:
 * @fastify/bearer-auth's missing/invalid header → 401 `invalid_api_key` (auth.ts);
 * `FST_ERR_CTP_BODY_TOO_LARGE` → 413 `request_too_large` naming `bodyLimitBytes`; invalid or empty JSON → 400
 * `invalid_json`; `FST_ERR_CTP_INVALID_MEDIA_TYPE` → 415 `unsupported_media_type`; `FST_ERR_BAD_URL` → 400
 * `invalid_url`; `FST_ERR_MAX_PARAM_LENGTH` → 414 `uri_too_long` (over HTTP only a URL past Node's header limit, refused
 * with 431 before routing, could exceed app.ts `MAX_PATH_PARAM_LENGTH`); any other 4xx keeps its status and message
 * (`code` = fastify's code); everything else goes through `toApiError` (500). An `ApiError` passes through.
 */
export function frameworkApiError(err: FastifyError, bodyLimitBytes: number): ApiError {
  if (err instanceof ApiError) return err;
  const unauthorized = bearerAuthApiError(err);
  if (unauthorized !== null) return unauthorized;
  switch (err.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new ApiError(413, `request body is larger than the gateway's limit of ${bodyLimitBytes} bytes`, {
        code: 'request_too_large',
      });
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new ApiError(400, `request body is not valid JSON: ${err.message}`, { code: 'invalid_json' });
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new ApiError(415, `unsupported content type: send 'application/json' (${err.message})`, {
        code: 'unsupported_media_type',
      });
    case 'FST_ERR_BAD_URL':
      return new ApiError(400, `the request URL is not valid: ${err.message}`, { code: 'invalid_url' });
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return new ApiError(414, `the request URL is too long: ${err.message}`, { code: 'uri_too_long' });
    default:
      break;
  }
  if (err instanceof SyntaxError || (err.statusCode === 400 && /JSON/i.test(err.message))) {
    return new ApiError(400, `request body is not valid JSON: ${err.message}`, { code: 'invalid_json' });
  }
  if (typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500) {
    return new ApiError(err.statusCode, err.message, { code: err.code ?? null });
  }
  return toApiError(err);
}

/**
 * The `ApiError` for a Node `clientError` (an error raised while parsing a connection's request, before fastify
 * sees it), or null when nothing should be written (`ECONNRESET`: the peer is gone).
 * `HPE_HEADER_OVERFLOW` → 431 `request_header_fields_too_large` (Node's limit is 16 KiB of headers);
 * `ERR_HTTP_REQUEST_TIMEOUT` → 408 `request_timeout`; anything else (malformed request line, bad chunking,
 * invalid header characters) → 400 `bad_request` naming Node's parser code.
 */
export function clientApiError(err: Error & { code?: string }): ApiError | null {
  switch (err.code) {
    case 'ECONNRESET':
      return null;
    case 'HPE_HEADER_OVERFLOW':
      return new ApiError(431, "request header fields too large: the headers exceed the HTTP server's limit (16 KiB)", {
        code: 'request_header_fields_too_large',
      });
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new ApiError(408, 'request timeout: the request was not received in time', { code: 'request_timeout' });
    default:
      return new ApiError(400, `malformed HTTP request (${err.code ?? 'parse error'}): ${err.message}`, {
        code: 'bad_request',
      });
  }
}

/**
 * A fastify `clientErrorHandler` (Node's `clientError` event): writes a complete HTTP/1.1 response with the
 * OpenAI-style body of `clientApiError(err)` and `Connection: close`, then destroys the socket once the response
 * is flushed. Writes nothing to a destroyed or unwritable socket (it is destroyed). Never throws.
 */
export function makeClientErrorHandler(
  logger: Pick<Logger, 'debug'>,
): (err: Error & { code?: string }, socket: Socket) => void {
  return (err, socket) => {
    const apiErr = clientApiError(err);
    if (apiErr === null || socket.destroyed || !socket.writable) {
      socket.destroy();
      return;
    }
    logger.debug({ code: err.code, status: apiErr.statusCode }, 'client error');
    const body = JSON.stringify(apiErr.toBody());
    const head =
      `HTTP/1.1 ${apiErr.statusCode} ${STATUS_CODES[apiErr.statusCode] ?? 'Error'}\r\n` +
      `Content-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
      `Connection: close\r\n\r\n`;
    socket.once('finish', () => socket.destroy());
    socket.end(head + body);
  };
}
