/**
 * Structured outputs from a request (gateway.md 8 "response_format / structured output"): OpenAI's `response_format`
 * (`text`, `json_object`, `json_schema`; vLLM adds `structural_tag`), vLLM's `structured_outputs` object and its
 * older `guided_json` / `guided_regex` / `guided_choice` / `guided_grammar` parameters (vLLM `protocol.py`), into one
 * engine-neutral `StructuredOutput` that each engine protocol maps onto its wire fields (vLLM `structured_outputs`,
 * engine-wire.md 5.3; TokenSpeed `json_schema` / `regex` / `ebnf` / `structural_tag`, 4.4).
 *
 * At most one source may set a constraint, and `structured_outputs` exactly one constraint key (vLLM refuses more);
 * every malformed value is a 400 naming its parameter.
 */
import type { StructuredConstraint, StructuredOutput } from '../protocols/types.js';
import { badRequest, quoteValue } from './errors.js';

const isNull = (v: unknown): v is null | undefined => v === null || v === undefined;
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The request fields this module reads (all loosely typed in the schemas; validated here). */
export interface StructuredOutputFields {
  response_format?: unknown;
  structured_outputs?: unknown;
  guided_json?: unknown;
  guided_regex?: unknown;
  guided_choice?: unknown;
  guided_grammar?: unknown;
  guided_whitespace_pattern?: unknown;
  guided_decoding_backend?: unknown;
}

/** A constraint found in the request and the parameter it came from. */
export interface RequestedStructuredOutput {
  output: StructuredOutput;
  param: string;
}

function withOptions(constraint: StructuredConstraint, opts: Partial<StructuredOutput> = {}): StructuredOutput {
  return {
    constraint,
    disableAnyWhitespace: opts.disableAnyWhitespace ?? false,
    disableAdditionalProperties: opts.disableAdditionalProperties ?? false,
    whitespacePattern: opts.whitespacePattern ?? null,
  };
}

/** A lone surrogate: valid in JSON text (`"\udc00"`) but not encodable as UTF-8 (wire/writer.ts refuses it). */
const LONE_SURROGATE = /\p{Cs}/u;

/**
 * `value`, a string sent to the engine as it is (a regex, grammar, choice, raw schema or tag). Throws `ApiError` 400
 * naming `param` when it holds a lone surrogate (the wire encoder would refuse it: a 500 otherwise).
 */
function wireString(value: string, param: string): string {
  if (LONE_SURROGATE.test(value))
    throw badRequest(`'${param}' must be valid Unicode text (it holds a lone surrogate)`, param);
  return value;
}

/** A JSON schema given as an object, or as a string: parsed when it parses, else kept raw (engine-wire.md 5.3). */
function jsonSchema(value: unknown, param: string): StructuredConstraint {
  if (typeof value === 'string') {
    try {
      return { kind: 'json', schema: JSON.parse(value) as unknown };
    } catch {
      return { kind: 'json', schema: wireString(value, param) };
    }
  }
  if (isObject(value) || typeof value === 'boolean') return { kind: 'json', schema: value };
  throw badRequest(`'${param}' must be a JSON schema (an object or a JSON string)`, param);
}

function stringParam(value: unknown, param: string): string {
  if (typeof value !== 'string' || value === '') throw badRequest(`'${param}' must be a non-empty string`, param);
  return wireString(value, param);
}

function choiceParam(value: unknown, param: string): StructuredConstraint {
  if (!Array.isArray(value) || value.length === 0 || !value.every((c) => typeof c === 'string')) {
    throw badRequest(`'${param}' must be a non-empty list of strings`, param);
  }
  for (const c of value as string[]) wireString(c, param);
  return { kind: 'choice', choices: value as string[] };
}

/** `response_format` (OpenAI; vLLM `structural_tag`). `text` means no constraint. */
function fromResponseFormat(rf: unknown): StructuredOutput | null {
  if (!isObject(rf) || typeof rf.type !== 'string')
    throw badRequest(`'response_format' must be an object with a 'type'`, 'response_format');
  switch (rf.type) {
    case 'text':
      return null;
    case 'json_object':
      return withOptions({ kind: 'json_object' });
    case 'json_schema': {
      const js = rf.json_schema;
      if (!isObject(js))
        throw badRequest(
          `'response_format.json_schema' must be an object with a 'schema'`,
          'response_format.json_schema',
        );
      // OpenAI requires a schema; without one vLLM constrains to any JSON object.
      if (isNull(js.schema)) return withOptions({ kind: 'json_object' });
      return withOptions(jsonSchema(js.schema, 'response_format.json_schema.schema'));
    }
    case 'structural_tag': {
      const { type: _type, ...rest } = rf;
      return withOptions({ kind: 'structural_tag', tag: JSON.stringify({ type: 'structural_tag', ...rest }) });
    }
    default:
      throw badRequest(
        `'response_format.type' must be one of text, json_object, json_schema, structural_tag; got ${quoteValue(rf.type)}`,
        'response_format.type',
      );
  }
}

/** vLLM `structured_outputs`: exactly one of json, regex, choice, grammar, json_object, structural_tag; options. */
function fromStructuredOutputs(so: unknown): StructuredOutput {
  const param = 'structured_outputs';
  if (!isObject(so)) throw badRequest(`'${param}' must be an object`, param);
  const keys = ['json', 'regex', 'choice', 'grammar', 'json_object', 'structural_tag'].filter(
    (k) => !isNull(so[k]) && so[k] !== false,
  );
  if (keys.length !== 1) {
    throw badRequest(
      `'${param}' must set exactly one of json, regex, choice, grammar, json_object, structural_tag; got ${keys.length === 0 ? 'none' : keys.join(', ')}`,
      param,
    );
  }
  const key = keys[0]!;
  const value = so[key];
  let constraint: StructuredConstraint;
  if (key === 'json') constraint = jsonSchema(value, `${param}.json`);
  else if (key === 'regex') constraint = { kind: 'regex', pattern: stringParam(value, `${param}.regex`) };
  else if (key === 'choice') constraint = choiceParam(value, `${param}.choice`);
  else if (key === 'grammar') constraint = { kind: 'grammar', grammar: stringParam(value, `${param}.grammar`) };
  else if (key === 'json_object') {
    if (value !== true) throw badRequest(`'${param}.json_object' must be true`, `${param}.json_object`);
    constraint = { kind: 'json_object' };
  } else
    constraint = {
      kind: 'structural_tag',
      tag: typeof value === 'string' ? wireString(value, `${param}.structural_tag`) : JSON.stringify(value),
    };
  const bool = (k: string): boolean => {
    if (isNull(so[k])) return false;
    if (typeof so[k] !== 'boolean') throw badRequest(`'${param}.${k}' must be a boolean`, `${param}.${k}`);
    return so[k] as boolean;
  };
  const ws = so.whitespace_pattern;
  return withOptions(constraint, {
    disableAnyWhitespace: bool('disable_any_whitespace'),
    disableAdditionalProperties: bool('disable_additional_properties'),
    whitespacePattern: isNull(ws) ? null : stringParam(ws, `${param}.whitespace_pattern`),
  });
}

/**
 * The structured-output constraint of a request, or null for free text. `guided_whitespace_pattern` applies to a
 * `guided_*` constraint; `guided_decoding_backend` is accepted and ignored (the engine picks its backend).
 * Throws `ApiError` 400 naming the parameter for a malformed value or for constraints from two sources.
 */
export function parseStructuredOutput(body: StructuredOutputFields): RequestedStructuredOutput | null {
  const found: RequestedStructuredOutput[] = [];
  if (!isNull(body.response_format)) {
    const rf = fromResponseFormat(body.response_format);
    if (rf !== null) found.push({ output: rf, param: 'response_format' });
  }
  if (!isNull(body.structured_outputs))
    found.push({ output: fromStructuredOutputs(body.structured_outputs), param: 'structured_outputs' });
  const ws = isNull(body.guided_whitespace_pattern)
    ? null
    : stringParam(body.guided_whitespace_pattern, 'guided_whitespace_pattern');
  const guided: Array<[string, (v: unknown) => StructuredConstraint]> = [
    ['guided_json', (v) => jsonSchema(v, 'guided_json')],
    ['guided_regex', (v) => ({ kind: 'regex', pattern: stringParam(v, 'guided_regex') })],
    ['guided_choice', (v) => choiceParam(v, 'guided_choice')],
    ['guided_grammar', (v) => ({ kind: 'grammar', grammar: stringParam(v, 'guided_grammar') })],
  ];
  for (const [name, make] of guided) {
    const v = (body as Record<string, unknown>)[name];
    if (!isNull(v)) found.push({ output: withOptions(make(v), { whitespacePattern: ws }), param: name });
  }
  if (found.length > 1) {
    throw badRequest(
      `only one structured-output constraint may be given; got ${found.map((f) => f.param).join(' and ')}`,
      found[1]!.param,
    );
  }
  return found[0] ?? null;
}
