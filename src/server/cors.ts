/**
 * CORS with vLLM's flags (`--allowed-origins`, `--allowed-methods`, `--allowed-headers`, `--allow-credentials`,
 * vLLM `cli_args.py`, applied there by Starlette's `CORSMiddleware`; issue #10 part 6), through @fastify/cors.
 *
 * Unlike vLLM, whose defaults allow every origin, CORS is off unless origins are given: no CORS header is sent and
 * a preflight gets 405 like any other unserved method. With origins given, the other lists default to vLLM's `*`:
 * every method, and whatever headers the preflight asks for. `*` among the origins allows any origin; with
 * credentials allowed the request's own origin is echoed instead (browsers refuse `*` with credentials; Starlette
 * does the same). Preflights are answered in an `onRequest` hook that runs before the API-key check, since browsers
 * send them without credentials.
 */
import cors, { type FastifyCorsOptions } from '@fastify/cors';
import type { FastifyInstance } from 'fastify';

/** The CORS policy. `allowedOrigins` empty → CORS off. Absent lists mean vLLM's default `*`. */
export interface CorsOptions {
  allowedOrigins: readonly string[];
  allowedMethods?: readonly string[];
  allowedHeaders?: readonly string[];
  allowCredentials?: boolean;
}

/** What `*` among the methods stands for (Starlette's list for `allow_methods=["*"]`). */
export const ALL_METHODS: readonly string[] = Object.freeze([
  'DELETE',
  'GET',
  'HEAD',
  'OPTIONS',
  'PATCH',
  'POST',
  'PUT',
]);

/** The @fastify/cors options for `opts`, or null when CORS is off. Pure. */
export function corsPluginOptions(opts: CorsOptions): FastifyCorsOptions | null {
  if (opts.allowedOrigins.length === 0) return null;
  const credentials = opts.allowCredentials === true;
  const anyOrigin = opts.allowedOrigins.includes('*');
  const methods =
    opts.allowedMethods === undefined || opts.allowedMethods.includes('*')
      ? [...ALL_METHODS]
      : [...opts.allowedMethods];
  const out: FastifyCorsOptions = {
    // true: echo the request's origin (any allowed); '*': the literal wildcard; a list: exact matches only.
    origin: anyOrigin ? (credentials ? true : '*') : [...opts.allowedOrigins],
    methods,
    credentials,
    hook: 'onRequest',
  };
  // Absent (null in the plugin): the preflight's Access-Control-Request-Headers are echoed, which is what `*` means.
  if (opts.allowedHeaders !== undefined && !opts.allowedHeaders.includes('*'))
    out.allowedHeaders = [...opts.allowedHeaders];
  return out;
}

/** Register @fastify/cors on `app` when `opts` turns CORS on (before the routes and the API-key hook). */
export async function registerCors(app: FastifyInstance, opts: CorsOptions | undefined): Promise<void> {
  const pluginOptions = opts === undefined ? null : corsPluginOptions(opts);
  if (pluginOptions === null) return;
  await app.register(cors, pluginOptions);
}
