/**
 * vLLM-style tolerance of unknown top-level request fields (issue #10 part 5; coordination note H).
 *
 * vLLM's request models (`OpenAIBaseModel` in vLLM's `protocol.py`) allow extra fields and log them, never refusing
 * the request: "The following fields were present in the request but ignored: {...}" (a warning per request in older
 * releases, debug in newer ones). Clients rely on that: the openai SDK, LangChain and the Vercel AI SDK send fields
 * such as `store`, `metadata`, `service_tier`, `prediction` that change nothing for a self-hosted model.
 *
 * Here: a top-level field that the route's body schema does not list is removed from the body before validation
 * (so no later code can act on it) and reported with vLLM's wording — at warn the first time a field name is seen,
 * at debug on every request. Fields the schema lists but the gateway cannot honour keep their 400 (params.ts
 * `rejectUnsupported`). Only routes whose body schema is a closed object (`additionalProperties: false`) are
 * affected, so a new route opts in by declaring its parameters. Field names are client-controlled: the set of names
 * already warned about is capped and every logged name is cut to 100 characters.
 */
import type { FastifyInstance, preValidationHookHandler } from 'fastify';
import { shortName } from './input-limits.js';

/** The wording of vLLM's log line for ignored fields. */
export const IGNORED_FIELDS_MESSAGE = 'The following fields were present in the request but ignored';

/** How many distinct field names are remembered for the once-per-name warning (a memory bound). */
export const MAX_WARNED_FIELD_NAMES = 1024;

interface ClosedObjectSchema {
  additionalProperties: false;
  properties: Record<string, unknown>;
}

function isClosedObjectSchema(schema: unknown): schema is ClosedObjectSchema {
  if (schema === null || typeof schema !== 'object') return false;
  const s = schema as { additionalProperties?: unknown; properties?: unknown };
  return s.additionalProperties === false && s.properties !== null && typeof s.properties === 'object';
}

/**
 * Remove from `body` (in place) every own key not in `known`; returns the removed keys in body order ([] when none).
 */
export function stripUnknownFields(body: Record<string, unknown>, known: ReadonlySet<string>): string[] {
  const removed: string[] = [];
  for (const key of Object.keys(body)) {
    if (known.has(key)) continue;
    removed.push(key);
    delete body[key];
  }
  return removed;
}

/**
 * Which ignored field names have been warned about: `firstSeen(names)` returns the names not seen before (and
 * remembers them) while fewer than `capacity` are remembered; past that it returns [] and `full` turns true.
 */
export class WarnedFieldNames {
  private readonly seen = new Set<string>();
  constructor(private readonly capacity = MAX_WARNED_FIELD_NAMES) {}

  get full(): boolean {
    return this.seen.size >= this.capacity;
  }

  firstSeen(names: readonly string[]): string[] {
    const fresh: string[] = [];
    for (const name of names) {
      if (this.seen.has(name) || this.full) continue;
      this.seen.add(name);
      fresh.push(name);
    }
    return fresh;
  }
}

/**
 * Install the policy on `app` as a `preValidation` hook (after body parsing, before schema validation) of every
 * route registered after this call whose body schema is a closed object: strip the unlisted top-level fields of an
 * object body and log them (see the module comment). Bodies that are not plain objects are left to validation. The
 * hook is the route's own (added through `onRoute`, before any it declares), so a request pays no lookup of its
 * route's schema (fastify's `request.routeOptions` builds a fresh object on every read; issue 9, CPU per request).
 */
export function registerUnknownFieldPolicy(app: FastifyInstance): void {
  const warned = new WarnedFieldNames();
  let warnedFull = false;
  app.addHook('onRoute', (routeOptions) => {
    const schema = routeOptions.schema?.body;
    if (!isClosedObjectSchema(schema)) return;
    const known: ReadonlySet<string> = new Set(Object.keys(schema.properties));
    const route = routeOptions.url;
    const hook: preValidationHookHandler = (request, _reply, done) => {
      const body = request.body;
      if (body === null || typeof body !== 'object' || Array.isArray(body)) {
        done();
        return;
      }
      const removed = stripUnknownFields(body as Record<string, unknown>, known);
      if (removed.length > 0) {
        const names = removed.map(shortName);
        request.log.debug({ route, ignoredFields: names }, `${IGNORED_FIELDS_MESSAGE}: ${names.join(', ')}`);
        const fresh = warned.firstSeen(names);
        if (fresh.length > 0) {
          request.log.warn(
            { route, ignoredFields: fresh },
            `${IGNORED_FIELDS_MESSAGE}: ${fresh.join(', ')} (warned once per field name; later requests log it at debug)`,
          );
        } else if (warned.full && !warnedFull) {
          warnedFull = true;
          request.log.warn(
            { route, limit: MAX_WARNED_FIELD_NAMES },
            `more than ${MAX_WARNED_FIELD_NAMES} distinct ignored field names seen; new ones are logged at debug only`,
          );
        }
      }
      done();
    };
    const own = routeOptions.preValidation;
    routeOptions.preValidation = own === undefined ? [hook] : [hook, ...(Array.isArray(own) ? own : [own])];
  });
}
