/**
 * Input limits of the HTTP API (issue #10 part 3): how deep a JSON body may nest and how many entries the
 * parameters whose cost grows with their size may hold. Every limit answers 400 naming the parameter, never 500.
 *
 * Why a nesting limit at all: `JSON.parse` itself copes with any depth the body limit allows, but everything after it
 * that walks a value recursively does not: `JSON.stringify` (error messages), the chat template's `tojson` (tools,
 * `chat_template_kwargs`) and ajv overflow the stack somewhere between 1 000 and 5 000 levels, which surfaced as
 * HTTP 500 "Maximum call stack size exceeded". Checking the depth once, right after parsing, bounds every later
 * recursion; legitimate bodies (JSON schemas of tools and structured outputs included) nest a few levels deep.
 */
import type { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import { errorCodes, type FastifyBodyParser, type FastifyInstance } from 'fastify';
import { ApiError, badRequest } from './errors.js';

/** Deepest nesting a request body may have: the body object is level 1, each object or array inside adds one. */
export const MAX_JSON_DEPTH = 64;

/**
 * At most this many stop strings of at most `MAX_STOP_CHARS` UTF-16 units each (the holdback check costs up to the
 * square of a stop string's length per streamed token; OpenAI itself takes 4; vLLM has no cap).
 */
export const MAX_STOP_STRINGS = 64;
export const MAX_STOP_CHARS = 256;
/** At most this many `stop_token_ids` (forwarded to the engine, which checks them every step). */
export const MAX_STOP_TOKEN_IDS = 1024;
/** At most this many `logit_bias` entries (forwarded to the engine, applied every step). */
export const MAX_LOGIT_BIAS_ENTRIES = 1024;
/** At most this many `tools` (OpenAI's documented maximum of functions). */
export const MAX_TOOLS = 128;
/** At most this many inputs in one embeddings request (OpenAI's limit); each is its own engine request. */
export const MAX_EMBEDDING_INPUTS = 2048;
/** The largest `dimensions` an embeddings request may ask for (well above any model's; the engine's own bound is lower). */
export const MAX_EMBEDDING_DIMENSIONS = 65_536;
/**
 * At most this many chat `messages` (also `/tokenize` `messages`, Responses `input` items and the history a
 * `previous_response_id` adds; issue 26 part 5). Every message costs this process before anything is tokenized:
 * schema validation, flattening and the worker hand-off ~1.5 µs each on the dev box, and the chat template 5–9 µs each
 * (off the loop from `OFF_LOOP_RENDER_MIN_MESSAGES` on): 240k messages took 2–3 s. 8 Ki keeps the loop's share
 * around 12 ms while leaving room for long agent sessions (a 128k-token context holds ~16 tokens per message then).
 * vLLM has no such cap.
 */
export const MAX_MESSAGES = 8192;

/**
 * A JSON body at least this long (UTF-16 units) is validated and handled in the event-loop turn after the one that
 * parsed it (`installJsonBodyParser`), so the two costs (~15 ms and ~10 ms for 4 MB on the dev box) are two pauses of
 * the other streams instead of one twice as long.
 */
export const OWN_TURN_MIN_BODY_CHARS = 262_144;

/**
 * At most this many JSON objects and arrays in a request body (issue 26 part 5). What a body costs to parse and walk
 * grows with its values, not its bytes: 240k tiny chat messages (6–9 MB, within the body limit) took JSON.parse alone
 * 80–140 ms of the event loop before `MAX_MESSAGES` could refuse them. `readBodyText` counts them as the bytes arrive
 * (~1.7 ns a byte, ≤ 0.3 ms a chunk) and refuses the body with 413 before parsing it. Legitimate bodies hold far
 * fewer: `MAX_MESSAGES` messages of a few parts each, `MAX_TOOLS` tool schemas, a structured-output schema.
 */
export const MAX_JSON_CONTAINERS = 65_536;

/**
 * Counts the objects and arrays (`{` and `[` outside strings) of a JSON text fed in byte chunks, across chunk
 * boundaries (string and escape state carried over). Not a validator: malformed JSON is left to the parser. Pure.
 */
export class JsonContainerCounter {
  /** Objects and arrays opened so far. */
  count = 0;
  private inString = false;
  private escaped = false;

  /** Scan the next `bytes` of the text. */
  feed(bytes: Uint8Array): void {
    let n = this.count;
    let inString = this.inString;
    let escaped = this.escaped;
    for (let i = 0; i < bytes.length; i++) {
      const c = bytes[i]!;
      if (inString) {
        if (escaped) escaped = false;
        else if (c === 0x5c) escaped = true;
        else if (c === 0x22) inString = false;
      } else if (c === 0x22) inString = true;
      else if (c === 0x7b || c === 0x5b) n++;
    }
    this.count = n;
    this.inString = inString;
    this.escaped = escaped;
  }
}

/** A user-supplied name (a field name, a header value) as logs and messages show it: at most 100 characters. */
export function shortName(name: string): string {
  return name.length <= 100 ? name : `${name.slice(0, 100)}… (${Buffer.byteLength(name)} bytes)`;
}

/**
 * The first top-level member of `body` that nests deeper than `maxDepth` levels (the body itself being level 1), as
 * `{param}` (the member's key, or null when `body` is an array or a scalar nested too deep at the top), or null when
 * the whole value is within the limit. Iterative (an explicit stack), so any depth is safe to inspect.
 */
export function findTooDeep(body: unknown, maxDepth: number): { param: string | null } | null {
  if (body === null || typeof body !== 'object') return null;
  const topKeys = Array.isArray(body) ? null : Object.keys(body);
  const roots: Array<[unknown, string | null]> =
    topKeys === null ? [[body, null]] : topKeys.map((k) => [(body as Record<string, unknown>)[k], k]);
  const baseDepth = topKeys === null ? 1 : 2;
  // Two parallel stacks and indexed / for-in loops: no pair or value list per visited container (issue 26 part 5: the
  // walk over a 240k-message body took 55–106 ms with them).
  const values: object[] = [];
  const depths: number[] = [];
  for (const [root, param] of roots) {
    if (root === null || typeof root !== 'object') continue;
    values.push(root);
    depths.push(baseDepth);
    while (values.length > 0) {
      const value = values.pop()!;
      const depth = depths.pop()!;
      if (depth > maxDepth) return { param };
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) {
          const child: unknown = value[i];
          if (child !== null && typeof child === 'object') {
            values.push(child);
            depths.push(depth + 1);
          }
        }
      } else {
        // JSON.parse makes plain objects: their enumerable keys are their own.
        for (const key in value) {
          const child: unknown = (value as Record<string, unknown>)[key];
          if (child !== null && typeof child === 'object') {
            values.push(child);
            depths.push(depth + 1);
          }
        }
      }
    }
  }
  return null;
}

/** The top-level parameters that hold a conversation's messages (chat and `/tokenize` `messages`, Responses `input`). */
const MESSAGE_LISTS = ['messages', 'input'] as const;

/**
 * The top-level message list of `body` (see `MESSAGE_LISTS`) holding more than `MAX_MESSAGES` entries, or null. The
 * route schemas say the same (`maxItems`); this answers before anything walks the list.
 */
export function messageListOverLimit(body: unknown): string | null {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return null;
  for (const name of MESSAGE_LISTS) {
    const list = (body as Record<string, unknown>)[name];
    // A list of numbers is one prompt's token ids (/v1/embeddings `input`), bounded by the context, not a message list.
    if (Array.isArray(list) && list.length > MAX_MESSAGES && typeof list[0] !== 'number') return name;
  }
  return null;
}

/**
 * Read a request body as UTF-8 text, as fastify's own `parseAs: 'string'` reader does (the same errors: 413
 * `FST_ERR_CTP_BODY_TOO_LARGE` for a declared or received size above `limit` bytes, 400
 * `FST_ERR_CTP_INVALID_CONTENT_LENGTH` when the bytes received differ from `Content-Length`, a stream error as a 400),
 * except that a body of several chunks is decoded chunk by chunk as it arrives instead of all at once at its end
 * (issue 26 part 5: decoding a 7 MB body in one piece held the event loop ~20 ms on the dev box, on top of parsing
 * it). A body of one chunk (every small request) is decoded once, with no decoder made for it; a body of several has
 * its objects and arrays counted as they arrive (`JsonContainerCounter`) and is refused with 413 past
 * `maxContainers`, before anything parses it. A body whose client is
 * gone by its end (`gone()`: its connection was closed, not half-closed) is neither decoded nor parsed: a 499 that
 * nobody reads (issue 26 part 5: 200 clients that posted 1 MB and left cost ~10 ms of the loop each otherwise).
 */
export function readBodyText(
  payload: Readable & { receivedEncodedLength?: number },
  contentLengthHeader: string | undefined,
  limit: number,
  gone: () => boolean,
  done: (err: Error | null, text?: string) => void,
  tooLarge: () => Error = () => new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE(),
  maxContainers = MAX_JSON_CONTAINERS,
): void {
  const contentLength = Number(contentLengthHeader);
  if (contentLength > limit) {
    done(tooLarge());
    return;
  }
  let received = 0;
  let first: Buffer | null = null;
  let decoder: StringDecoder | null = null;
  let containers: JsonContainerCounter | null = null;
  // Decoded pieces, joined once at the end: a string grown by `+=` is a rope that JSON.parse must flatten first, which
  // took 26–41 ms for 4 MB on the dev box against 13 ms for a flat string (and ~12 ms for the join).
  let pieces: string[] = [];
  const stop = () => {
    payload.removeListener('data', onData);
    payload.removeListener('end', onEnd);
    payload.removeListener('error', onEnd);
  };
  function onData(chunk: Buffer | string): void {
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    received += bytes.length;
    if (received > limit || (payload.receivedEncodedLength ?? 0) > limit) {
      stop();
      done(tooLarge());
      return;
    }
    if (decoder === null) {
      if (first === null) {
        first = bytes;
        return;
      }
      decoder = new StringDecoder('utf8');
      containers = new JsonContainerCounter();
      containers.feed(first);
      pieces.push(decoder.write(first));
      first = null;
    }
    containers!.feed(bytes);
    if (containers!.count > maxContainers) {
      stop();
      pieces = [];
      done(tooManyContainers(maxContainers));
      return;
    }
    pieces.push(decoder.write(bytes));
  }
  function onEnd(err?: Error & { statusCode?: number }): void {
    stop();
    const failed = bodyEndError(err, contentLength, payload.receivedEncodedLength || received, gone);
    if (failed !== null) {
      done(failed);
      return;
    }
    if (decoder !== null) pieces.push(decoder.end());
    done(null, decoder !== null ? pieces.join('') : first !== null ? first.toString('utf8') : '');
  }
  payload.on('data', onData);
  payload.on('end', onEnd);
  payload.on('error', onEnd);
  payload.resume();
}

/** The 413 of a body with more than `max` JSON objects and arrays. */
function tooManyContainers(max: number): ApiError {
  return new ApiError(413, `the request body holds more than ${max} JSON objects and arrays (the gateway's limit)`, {
    code: 'request_too_large',
  });
}

/**
 * Why a body that ended cannot be used, or null: the stream's error (a status below 400 made 400), a length that is
 * not the `content-length` header's (`received` bytes), or a client gone by its end (499, never read).
 */
function bodyEndError(
  err: (Error & { statusCode?: number }) | undefined,
  contentLength: number,
  received: number,
  gone: () => boolean,
): Error | null {
  if (err !== undefined && err !== null) {
    if (!(typeof err.statusCode === 'number' && err.statusCode >= 400)) err.statusCode = 400;
    return err;
  }
  if (!Number.isNaN(contentLength) && received !== contentLength)
    return new errorCodes.FST_ERR_CTP_INVALID_CONTENT_LENGTH();
  if (gone()) {
    return Object.assign(new Error('the client closed its connection before its request was read'), {
      statusCode: 499,
      code: 'client_closed_request',
    });
  }
  return null;
}

/**
 * A route's own, lower body limit (`routeLimit`): `bytes` and the error a larger body gets (413 naming the limit and
 * the option that sets it).
 */
export interface RouteBodyLimit {
  bytes: number;
  tooLarge: () => Error;
}

/**
 * Replace fastify's `application/json` body parser by the same parser (fastify's default: secure-json-parse, with
 * `__proto__` and `constructor.prototype` keys refused) over a body read by `readBodyText` (at most `bodyLimit`
 * bytes, or what `routeLimit` says for the request's route, e.g. `/tokenize`), followed by the message-list bound (more than `MAX_MESSAGES` `messages` or `input` entries → 400 naming
 * it, as the schemas' `maxItems` would) and the nesting check: a body deeper than `maxDepth` → 400
 * `nesting_too_deep` naming the top-level parameter. Call before the routes are registered.
 */
export function installJsonBodyParser(
  app: FastifyInstance,
  bodyLimit: number,
  maxDepth = MAX_JSON_DEPTH,
  routeLimit: (url: string | undefined) => RouteBodyLimit | null = () => null,
): void {
  // Typed as either body-parser form; it is the callback form (fastify lib/content-type-parser.js, defaultJsonParser
  // (req, body, done)): it returns nothing and reports through `done`, so there is no promise to await.
  const parseJson = app.getDefaultJsonParser('error', 'error') as Exclude<
    FastifyBodyParser<string>,
    (request: never, body: never) => Promise<unknown>
  >;
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', (request, payload, done) => {
    const own = routeLimit(request.routeOptions.url);
    const limit = own === null ? bodyLimit : Math.min(bodyLimit, own.bytes);
    const tooLarge = own !== null && own.bytes < bodyLimit ? own.tooLarge : undefined;
    readBodyText(
      payload,
      request.headers['content-length'],
      limit,
      () => request.raw.socket?.destroyed === true,
      (readErr, body) => {
        if (readErr !== null) {
          done(readErr, undefined);
          return;
        }
        // A large body is parsed in the turn after the one that read (and joined) it, and handled in the one after that
        // (below): each costs ~12–15 ms for 4 MB on the dev box; in one turn they stalled every stream 50–70 ms.
        if (body!.length >= OWN_TURN_MIN_BODY_CHARS) setImmediate(parseBody, body!);
        else parseBody(body!);
      },
      tooLarge,
    );
    const parseBody = (body: string): void => {
      parseJson(request, body, (err, parsed) => {
        if (err) {
          done(err, undefined);
          return;
        }
        // The message list's bound first: O(1), and it spares the walk below a list of a million messages.
        const tooMany = messageListOverLimit(parsed);
        if (tooMany !== null) {
          done(
            badRequest(
              `'${tooMany}' has more than ${MAX_MESSAGES} entries (the gateway's limit)`,
              tooMany,
              'invalid_parameter',
            ),
            undefined,
          );
          return;
        }
        const tooDeep = findTooDeep(parsed, maxDepth);
        if (tooDeep === null) {
          if (body.length >= OWN_TURN_MIN_BODY_CHARS) setImmediate(done, null, parsed);
          else done(null, parsed);
          return;
        }
        const where = tooDeep.param === null ? 'the request body' : `'${shortName(tooDeep.param)}'`;
        const error = badRequest(
          `${where} nests deeper than ${maxDepth} levels of objects and arrays (the gateway's limit)`,
          tooDeep.param === null ? null : shortName(tooDeep.param),
          'nesting_too_deep',
        );
        done(error, undefined);
      });
    };
  });
}
