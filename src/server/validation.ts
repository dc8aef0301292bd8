/**
 * Turns ajv schema-validation errors into one OpenAI-style 400 naming the offending parameter (used as fastify's
 * `schemaErrorFormatter`). Parameter paths are rendered like `messages[0].content`.
 */
import type { FastifySchemaValidationError } from 'fastify';
import { ApiError, badRequest } from './errors.js';

/** Friendly descriptions of the union-typed parameters. */
const UNION_SHAPES: Record<string, string> = {
  prompt: 'a string, an array of one string, an array of token ids, or an array of one token-id array',
  content: 'a string, an array of content parts ({"type": "text", "text": ...}), or null',
  role: "one of 'system', 'developer', 'user', 'assistant', 'tool'",
};

/** How a size-limit keyword reads in a message, given its limit. */
const SIZE_LIMITS: Record<string, (limit: string) => string> = {
  maxItems: (n) => `has more than ${n} entries`,
  maxLength: (n) => `is longer than ${n} characters`,
  maxProperties: (n) => `has more than ${n} entries`,
};

/** `/messages/0/content` → `messages[0].content`. */
export function pathToParam(instancePath: string): string {
  let out = '';
  for (const seg of instancePath.split('/').slice(1)) {
    const s = seg.replaceAll('~1', '/').replaceAll('~0', '~');
    out += /^\d+$/.test(s) ? `[${s}]` : out === '' ? s : `.${s}`;
  }
  return out;
}

function join(parent: string, child: string): string {
  return parent === '' ? child : `${parent}.${child}`;
}

/**
 * One `ApiError` (400, `invalid_request_error`) for a failed validation:
 * - an unknown top-level key → "Unrecognized request argument supplied: X" (OpenAI's wording), `param` = X;
 * - a missing required key → "'X' is a required property";
 * - a size limit (`maxItems`, `maxLength`, `maxProperties`; input-limits.ts) anywhere in a union → that limit, `param`
 *   = the union's parameter;
 * - a union mismatch → the union's allowed shapes; a type mismatch → the expected JSON type(s);
 * - anything else → ajv's message prefixed with the parameter.
 */
export function formatValidationErrors(errors: FastifySchemaValidationError[], dataVar: string): ApiError {
  const first = errors[0];
  if (first === undefined) return badRequest(`invalid request ${dataVar}`, null, 'invalid_parameter');
  if (first.instancePath === '' && first.keyword === 'type') {
    return badRequest(
      `the request ${dataVar} must be a JSON object (send it with content-type: application/json)`,
      null,
      'invalid_body',
    );
  }
  const params = (first.params ?? {}) as Record<string, unknown>;
  const at = pathToParam(first.instancePath);
  if (first.keyword === 'additionalProperties') {
    const name = join(at, String(params.additionalProperty));
    const msg = at === '' ? `Unrecognized request argument supplied: ${name}` : `unknown field '${name}'`;
    return badRequest(msg, name, 'unrecognized_parameter');
  }
  if (first.keyword === 'required') {
    const name = join(at, String(params.missingProperty));
    return badRequest(`'${name}' is a required property`, name, 'missing_required_parameter');
  }
  // For a union the outermost `anyOf` error (ajv reports it after its branches) names the parameter.
  const union = errors.find((e) => e.keyword === 'anyOf');
  const target = union ?? first;
  const param = pathToParam(target.instancePath);
  // A size limit (input-limits.ts) in any branch is the real reason: every optional parameter is a union with null.
  const size = errors.find((e) => SIZE_LIMITS[e.keyword] !== undefined);
  if (size !== undefined) {
    const limit = String((size.params as { limit?: unknown }).limit);
    const what = SIZE_LIMITS[size.keyword]!(limit);
    return badRequest(
      `'${pathToParam(size.instancePath)}' ${what} (the gateway's limit)`,
      param || null,
      'invalid_parameter',
    );
  }
  const leaf = param.replace(/.*[.\]]/, '').replace(/\[\d+\]$/, '');
  if (union !== undefined) {
    const consts = errors
      .filter((e) => e.keyword === 'const' && e.instancePath === target.instancePath)
      .map((e) => JSON.stringify((e.params as { allowedValue?: unknown }).allowedValue));
    const types = errors
      .filter((e) => e.keyword === 'type' && e.instancePath === target.instancePath)
      .map((e) => String((e.params as { type?: unknown }).type));
    const shape =
      UNION_SHAPES[leaf] ??
      (consts.length > 0 ? `one of ${consts.join(', ')}` : types.length > 0 ? types.join(' or ') : 'a valid value');
    const deeper = errors.find((e) => e.instancePath.length > target.instancePath.length && e.keyword !== 'anyOf');
    const hint =
      deeper && UNION_SHAPES[leaf] === undefined ? ` ('${pathToParam(deeper.instancePath)}' ${deeper.message})` : '';
    return badRequest(`'${param}' must be ${shape}${hint}`, param, 'invalid_parameter');
  }
  if (first.keyword === 'type') {
    return badRequest(`'${param}' must be ${String(params.type)}`, param, 'invalid_parameter');
  }
  return badRequest(`'${param || dataVar}' ${first.message ?? 'is invalid'}`, param || null, 'invalid_parameter');
}
