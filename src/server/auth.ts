/**
 * API keys as vLLM has them (vLLM `--api-key`, its `AuthenticationMiddleware`; issue #10 part 1; coordination note
 * G): with at least one key configured, every request to a protected path needs `Authorization: Bearer <key>`, and
 * anything else gets 401 with an OpenAI-style body (`code: 'invalid_api_key'`) and `WWW-Authenticate: Bearer`
 * (RFC 6750 section 3).
 *
 * Protected, by path so that routes added later are covered without touching this file: everything under `/v1/`,
 * `/tokenize`, `/detokenize`, `/metrics` with `metricsRequireKey`, and `/health?verbose=1` / `/ready?verbose=1`
 * (their socket paths and pids). Open: `/health`, `/ready`, everything else (an unknown path answers 404 either way), and CORS preflights
 * (`OPTIONS`, which browsers send without credentials). The check uses both the matched route's pattern and the raw
 * path, so a percent-encoded spelling of a protected path that the router decodes to the same route is covered.
 *
 * Mechanics: @fastify/bearer-auth parses the header (scheme case-insensitive, RFC 7235 section 2.1) and raises its
 * 401 errors, which the app's error handler renders; it runs without its own hook (`addHook: false`) inside an
 * `onRequest` hook here, which is what scopes it to the protected paths. Its built-in key comparison returns early
 * on a length mismatch (leaking the key's length), so the keys are compared here instead, by their SHA-256 digests
 * (auth-keys.ts `keyMatcher`).
 */
import bearerAuth from '@fastify/bearer-auth';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from './errors.js';
import type { TenantDirectory } from './tenant.js';

export { keyMatcher } from './auth-keys.js';

/** Options of the API-key check. */
export interface ApiKeyOptions {
  /**
   * The accepted keys (the `--api-key` ones and the keys file's, reloadable; tenant.ts). Without keys configured
   * (`keyed` false) there is no check at all (every path open).
   */
  keys: TenantDirectory;
  /** Also protect `/metrics` (vLLM has no such option; Prometheus scrapers can send a bearer token). */
  metricsRequireKey?: boolean;
}

/** The path of a request URL (no query string). */
function pathOf(url: string): string {
  const q = url.indexOf('?');
  return q === -1 ? url : url.slice(0, q);
}

/** Whether `path` (a route pattern or a raw path) is protected (see the module comment). */
export function isProtectedPath(path: string, metricsRequireKey: boolean): boolean {
  if (path.startsWith('/v1/') || path === '/v1') return true;
  if (path === '/tokenize' || path === '/detokenize') return true;
  return metricsRequireKey && path === '/metrics';
}

/** Whether a query value asks for the verbose `/health` (`verbose=1` or `verbose=true`). */
export function wantsVerbose(query: unknown): boolean {
  const v = (query as { verbose?: unknown } | null | undefined)?.verbose;
  const one = Array.isArray(v) ? v[v.length - 1] : v;
  return one === '1' || one === 'true';
}

/** Whether `request` needs a key under `opts` (keys configured or not). */
export function requestNeedsKey(request: FastifyRequest, metricsRequireKey: boolean): boolean {
  if (request.method === 'OPTIONS') return false;
  const route = request.routeOptions.url;
  const raw = pathOf(request.url);
  if ((route !== undefined && isProtectedPath(route, metricsRequireKey)) || isProtectedPath(raw, metricsRequireKey)) {
    return true;
  }
  const status = (p: string | undefined) => p === '/health' || p === '/ready';
  return (status(route) || status(raw)) && wantsVerbose(request.query);
}

/**
 * The 401 for a missing or wrong key (OpenAI's shape and code; the presented key is never echoed). `missing` picks
 * the message.
 */
export function unauthorizedError(missing: boolean): ApiError {
  const message = missing
    ? 'You did not provide an API key. Send it in an Authorization header using Bearer auth (Authorization: Bearer YOUR_KEY).'
    : 'Incorrect API key provided.';
  return new ApiError(401, message, { type: 'invalid_request_error', code: 'invalid_api_key' });
}

/** The error codes @fastify/bearer-auth raises for a missing header and for a malformed or wrong one. */
const MISSING_HEADER = 'FST_BEARER_AUTH_MISSING_AUTHORIZATION_HEADER';
const INVALID_HEADER = 'FST_BEARER_AUTH_INVALID_AUTHORIZATION_HEADER';

/** The OpenAI-style 401 for one of @fastify/bearer-auth's errors, or null for any other error. */
export function bearerAuthApiError(err: { code?: string }): ApiError | null {
  if (err.code === MISSING_HEADER) return unauthorizedError(true);
  if (err.code === INVALID_HEADER) return unauthorizedError(false);
  return null;
}

/**
 * Register the key check on `app` (a no-op without keys). Must be registered before the routes. 401 answers carry
 * `WWW-Authenticate: Bearer`; their body comes from the app's error handler (`bearerAuthApiError`).
 */
export async function registerApiKeyAuth(app: FastifyInstance, opts: ApiKeyOptions): Promise<void> {
  const directory = opts.keys;
  if (!directory.keyed) return;
  const metricsRequireKey = opts.metricsRequireKey === true;
  await app.register(bearerAuth, {
    keys: [],
    // The directory's current keys: a reload of the keys file applies to the next request.
    auth: (key) => directory.matches(key),
    addHook: false,
    specCompliance: 'rfc6749',
    // The app's error handler logs the 401 once (one line, no stack).
    verifyErrorLogLevel: 'debug',
  });
  const verify = app.verifyBearerAuth;
  if (verify === undefined) throw new Error('@fastify/bearer-auth did not decorate verifyBearerAuth');
  app.addHook('onRequest', (request, reply, done) => {
    if (!requestNeedsKey(request, metricsRequireKey)) {
      done();
      return;
    }
    verify(request, reply, (err) => {
      if (err) reply.header('www-authenticate', 'Bearer');
      done(err);
    });
  });
}
