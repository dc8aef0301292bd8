/**
 * What the simulated ranks write under a structured-output constraint (issue #11 part 7): a document valid against a
 * JSON schema, a string matching a regular expression (randexp), one of a choice's strings. Deterministic for a seed
 * (the caller's `Prng`), so a repeated request gets the same document.
 *
 * The JSON-schema generator covers what clients send (OpenAI strict schemas, zod / pydantic output): `type` (one or
 * a list), `enum`, `const`, `properties` / `required` (every required property; optional ones half the time),
 * `items` / `prefixItems` with `minItems` / `maxItems`, `anyOf` / `oneOf` (one branch), `allOf` (merged), local
 * `$ref`s (`#/$defs/…`, `#/definitions/…`), string `pattern` / `format` / length bounds, numeric bounds. A schema it
 * cannot satisfy yields its best effort (the sim is a stand-in for an engine's grammar, not a validator). Whatever a
 * client sends, the work is bounded: a recursive `$ref` ends as null past `MAX_NESTING` levels, counts and lengths are
 * capped, and a regex with a huge explicit repetition is refused (callers fall back to plain text), so a hostile
 * constraint can neither throw a rank's ADD away nor block its event loop.
 */
import RandExpModule from 'randexp';
import type { Prng } from './prng.js';

// randexp is CommonJS (`module.exports = RandExp`) typed as an ES default export: the default import is the class.
const RandExp = RandExpModule as unknown as typeof RandExpModule.default;

type Schema = Record<string, unknown>;

const WORDS = ['alpha', 'river', 'cedar', 'lumen', 'harbor', 'quartz', 'meadow', 'falcon', 'ember', 'tidal'];
const MAX_DEPTH = 8;
/** Past this many nested schemas (recursive `$ref`s) the value is null. */
const MAX_NESTING = 32;
/** Caps on `minItems` and `minLength` honoured (characters, items). */
const MAX_ITEMS = 256;
const MAX_LENGTH = 4096;
/** A regex with an explicit repetition count above this is refused (randexp would build the whole string). */
const MAX_REGEX_REPEAT = 1000;

const isObject = (v: unknown): v is Schema => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * A string matching `pattern` (JavaScript syntax), with open repetitions capped at 6. Throws `SyntaxError` for a
 * pattern JavaScript cannot read, `RangeError` for one with an explicit repetition count above 1000.
 */
export function stringForRegex(pattern: string, prng: Prng): string {
  for (const m of pattern.matchAll(/\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}/g)) {
    if (Number(m[1]) > MAX_REGEX_REPEAT || Number(m[2] ?? 0) > MAX_REGEX_REPEAT)
      throw new RangeError(`regex repetition ${m[0]} above ${MAX_REGEX_REPEAT}`);
  }
  const r = new RandExp(pattern);
  r.max = 6;
  r.randInt = (a: number, b: number) => prng.int(a, b);
  return r.gen();
}

/** Resolve a local `$ref` against `root`; unknown references give an empty (any) schema. */
function resolveRef(ref: string, root: Schema): Schema {
  if (!ref.startsWith('#')) return {};
  let node: unknown = root;
  for (const raw of ref
    .slice(1)
    .split('/')
    .filter((p) => p !== '')) {
    const key = raw.replaceAll('~1', '/').replaceAll('~0', '~');
    node = isObject(node) ? node[key] : undefined;
  }
  return isObject(node) ? node : {};
}

function stringFor(s: Schema, prng: Prng): string {
  if (typeof s.pattern === 'string') {
    try {
      return stringForRegex(s.pattern, prng);
    } catch {
      // A pattern randexp cannot read: fall through to a plain word.
    }
  }
  switch (s.format) {
    case 'date-time':
      return '2024-05-17T09:30:00Z';
    case 'date':
      return '2024-05-17';
    case 'time':
      return '09:30:00';
    case 'email':
      return `${WORDS[prng.int(0, WORDS.length - 1)]}@example.com`;
    case 'uri':
    case 'url':
      return `https://example.com/${WORDS[prng.int(0, WORDS.length - 1)]}`;
    case 'uuid':
      return '123e4567-e89b-42d3-a456-426614174000';
  }
  const min = typeof s.minLength === 'number' ? Math.min(s.minLength, MAX_LENGTH) : 0;
  const max = typeof s.maxLength === 'number' ? s.maxLength : Infinity;
  let out = WORDS[prng.int(0, WORDS.length - 1)]!;
  while (out.length < min) out += ` ${WORDS[prng.int(0, WORDS.length - 1)]!}`;
  return out.slice(0, Math.max(min, Math.min(max, out.length)));
}

function numberFor(s: Schema, integer: boolean, prng: Prng): number {
  const num = (k: string) => (typeof s[k] === 'number' ? (s[k] as number) : undefined);
  let lo =
    num('minimum') ??
    (num('exclusiveMinimum') !== undefined ? num('exclusiveMinimum')! + (integer ? 1 : 0.01) : undefined);
  let hi =
    num('maximum') ??
    (num('exclusiveMaximum') !== undefined ? num('exclusiveMaximum')! - (integer ? 1 : 0.01) : undefined);
  lo ??= hi !== undefined ? hi - 100 : 0;
  hi ??= lo + 100;
  if (integer) {
    const a = Math.ceil(lo);
    const b = Math.floor(hi);
    return b < a ? a : prng.int(a, b);
  }
  return Math.round((lo + prng.next() * (hi - lo)) * 100) / 100;
}

/**
 * A value valid against `schema` (a JSON schema object or boolean), chosen with `prng`. `root` resolves `$ref`s
 * (defaults to `schema`). Never throws for a schema object; unknown keywords are ignored.
 */
export function instanceOf(
  schema: unknown,
  prng: Prng,
  root: Schema = isObject(schema) ? schema : {},
  depth = 0,
): unknown {
  if (schema === true || schema === undefined) return WORDS[prng.int(0, WORDS.length - 1)];
  if (!isObject(schema) || depth > MAX_NESTING) return null;
  const s = schema;
  if (typeof s.$ref === 'string')
    return instanceOf({ ...resolveRef(s.$ref, root), ...omit(s, '$ref') }, prng, root, depth + 1);
  if ('const' in s) return s.const;
  if (Array.isArray(s.enum) && s.enum.length > 0) return s.enum[prng.int(0, s.enum.length - 1)];
  for (const key of ['anyOf', 'oneOf'] as const) {
    const branches = s[key];
    if (Array.isArray(branches) && branches.length > 0) {
      const branch = branches[prng.int(0, branches.length - 1)];
      return instanceOf({ ...omit(s, key), ...(isObject(branch) ? branch : {}) }, prng, root, depth + 1);
    }
  }
  if (Array.isArray(s.allOf)) {
    const merged: Schema = omit(s, 'allOf');
    for (const part of s.allOf) {
      if (!isObject(part)) continue;
      Object.assign(merged, part, {
        properties: { ...(merged.properties as Schema | undefined), ...(part.properties as Schema | undefined) },
        required: [
          ...((merged.required as string[] | undefined) ?? []),
          ...((part.required as string[] | undefined) ?? []),
        ],
      });
    }
    return instanceOf(merged, prng, root, depth + 1);
  }
  let type = s.type;
  if (Array.isArray(type)) type = type.find((t) => t !== 'null') ?? 'null';
  if (type === undefined) type = isObject(s.properties) ? 'object' : s.items !== undefined ? 'array' : 'string';
  switch (type) {
    case 'object': {
      const out: Record<string, unknown> = {};
      const props = isObject(s.properties) ? s.properties : {};
      const required = new Set(Array.isArray(s.required) ? (s.required as string[]) : []);
      for (const [name, sub] of Object.entries(props)) {
        if (required.has(name) || (depth < MAX_DEPTH && prng.next() < 0.5))
          out[name] = instanceOf(sub, prng, root, depth + 1);
      }
      return out;
    }
    case 'array': {
      const prefix = Array.isArray(s.prefixItems) ? s.prefixItems : [];
      const min = Math.min(Math.max(typeof s.minItems === 'number' ? s.minItems : 0, prefix.length), MAX_ITEMS);
      const max = typeof s.maxItems === 'number' ? s.maxItems : Math.max(min, 3);
      const count =
        depth >= MAX_DEPTH ? min : prng.int(Math.min(Math.max(min, 1), max), Math.max(min, Math.min(max, 3)));
      return Array.from({ length: count }, (_, i) =>
        instanceOf(i < prefix.length ? prefix[i] : s.items, prng, root, depth + 1),
      );
    }
    case 'string':
      return stringFor(s, prng);
    case 'integer':
      return numberFor(s, true, prng);
    case 'number':
      return numberFor(s, false, prng);
    case 'boolean':
      return prng.next() < 0.5;
    case 'null':
      return null;
    default:
      return null;
  }
}

function omit(s: Schema, key: string): Schema {
  const { [key]: _dropped, ...rest } = s;
  return rest;
}
