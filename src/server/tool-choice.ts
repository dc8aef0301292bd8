/**
 * `tools` / `tool_choice` / `parallel_tool_calls` → how a chat (or Responses) request's output is parsed and
 * constrained (vLLM `serving_chat.py`, `protocol.py`; OpenAI's tool_choice):
 *
 * | tool_choice | needs | engine constraint | output |
 * |---|---|---|---|
 * | absent | — | none | `auto` when tools are given and a tool-call parser is active, else `none` |
 * | `none` | — | none | plain content (tools are still rendered into the prompt, as vLLM) |
 * | `auto` | a parser | none | the parser finds calls in the content; finish `tool_calls` when it did |
 * | `required` | tools | JSON array of `{name, parameters}` (vLLM's schema) | calls; finish `tool_calls` |
 * | named function | that tool | the function's parameters schema | one call; finish `stop` (as vLLM/OpenAI) |
 *
 * Both engine families carry JSON-schema constraints (vLLM `structured_outputs.json`, TokenSpeed `json_schema`), so
 * `required` and named choices are constrained on every group; a `response_format` or `structured_outputs` as well
 * is a 400 (the engines take one constraint).
 */
import type { StructuredOutput } from '../protocols/types.js';
import { badRequest, quoteValue } from './errors.js';
import { JSON_ARRAY_LAYOUT, JsonCallsParser } from './parsers/json-calls.js';
import { NamedCallParser } from './parsers/named-call.js';
import {
  createToolCallParser,
  type ToolCallIdSource,
  type ToolCallParser,
  type ToolCallParserName,
} from './parsers/index.js';

/** A function tool, whatever the API's spelling (chat nests it under `function`; Responses is flat). */
export interface FunctionTool {
  name: string;
  description?: string | null;
  parameters?: Record<string, unknown> | null;
}

/** How the output of one request is treated for tool calls. */
export type ToolMode =
  | { kind: 'none' }
  | { kind: 'auto'; parser: ToolCallParserName }
  | { kind: 'required' }
  | { kind: 'named'; name: string };

/** The decided tool mode, its engine constraint (null for none/auto) and `parallel_tool_calls`. */
export interface ToolPlan {
  mode: ToolMode;
  constraint: StructuredOutput | null;
  parallelToolCalls: boolean;
}

/** vLLM's refusal of `auto` without a parser (kept word for word). */
export const AUTO_NEEDS_PARSER =
  `"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set ` +
  `(this gateway found no tool-call parser for the model's chat template; start it with --tool-call-parser NAME)`;

const isNull = (v: unknown): v is null | undefined => v === null || v === undefined;

function jsonConstraint(schema: unknown): StructuredOutput {
  return {
    constraint: { kind: 'json', schema },
    disableAnyWhitespace: false,
    disableAdditionalProperties: false,
    whitespacePattern: null,
  };
}

/** A tool's parameters schema, or an empty object schema when it declares none. */
function parametersOf(tool: FunctionTool): Record<string, unknown> {
  return tool.parameters ?? { type: 'object', properties: {} };
}

/**
 * The JSON schema `tool_choice: "required"` constrains the output to (vLLM `_get_json_schema_from_tool`): an array
 * of at least one `{name, parameters}` object, `name` one of the tools', `parameters` that tool's schema; at most
 * one item when `parallel` is false. `$defs` of the tools' schemas are lifted to the top (references stay valid).
 * Throws `ApiError` 400 (`param: 'tools'`) when two tools define the same `$defs` name differently.
 */
export function requiredToolsSchema(tools: readonly FunctionTool[], parallel: boolean): Record<string, unknown> {
  const defs: Record<string, unknown> = {};
  const variants = tools.map((t) => {
    const { $defs, ...params } = parametersOf(t) as { $defs?: Record<string, unknown> };
    for (const [name, def] of Object.entries($defs ?? {})) {
      if (name in defs && JSON.stringify(defs[name]) !== JSON.stringify(def)) {
        throw badRequest(`tool definition '${name}' ($defs) has two different schemas`, 'tools');
      }
      defs[name] = def;
    }
    return {
      properties: { name: { type: 'string', enum: [t.name] }, parameters: params },
      required: ['name', 'parameters'],
    };
  });
  const schema: Record<string, unknown> = {
    type: 'array',
    minItems: 1,
    ...(parallel ? {} : { maxItems: 1 }),
    items: { type: 'object', anyOf: variants },
  };
  if (Object.keys(defs).length > 0) schema.$defs = defs;
  return schema;
}

/**
 * Decide the tool mode of a request from `tools` (already normalized), `tool_choice` (`none` | `auto` | `required` |
 * `{type: "function", function: {name}}`, or Responses' `{type: "function", name}`) and `parallel_tool_calls`
 * (default true), with `parser` the gateway's active tool-call parser (null: none). Throws `ApiError` 400 naming
 * `tool_choice` for: an unknown value; `auto` without a parser (vLLM's message); `required` or a named function
 * without tools; a named function that is not among the tools.
 */
export function planTools(
  tools: readonly FunctionTool[],
  toolChoice: unknown,
  parallelToolCalls: unknown,
  parser: ToolCallParserName | null,
): ToolPlan {
  if (!isNull(parallelToolCalls) && typeof parallelToolCalls !== 'boolean') {
    throw badRequest(`'parallel_tool_calls' must be a boolean`, 'parallel_tool_calls');
  }
  const parallel = parallelToolCalls !== false;
  const none: ToolPlan = { mode: { kind: 'none' }, constraint: null, parallelToolCalls: parallel };
  if (isNull(toolChoice)) {
    return tools.length > 0 && parser !== null ? { ...none, mode: { kind: 'auto', parser } } : none;
  }
  if (toolChoice === 'none') return none;
  if (toolChoice === 'auto') {
    if (tools.length === 0) return none;
    if (parser === null)
      throw badRequest(
        `'tool_choice' "auto" is not supported: ${AUTO_NEEDS_PARSER}`,
        'tool_choice',
        'unsupported_parameter',
      );
    return { ...none, mode: { kind: 'auto', parser } };
  }
  if (toolChoice === 'required') {
    if (tools.length === 0) throw badRequest(`'tool_choice' "required" needs 'tools'`, 'tool_choice');
    return {
      mode: { kind: 'required' },
      constraint: jsonConstraint(requiredToolsSchema(tools, parallel)),
      parallelToolCalls: parallel,
    };
  }
  const named = namedChoice(toolChoice);
  if (named === null) {
    throw badRequest(
      `'tool_choice' must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}; got ${quoteValue(toolChoice)}`,
      'tool_choice',
    );
  }
  const tool = tools.find((t) => t.name === named);
  if (tool === undefined) {
    throw badRequest(
      `'tool_choice' names function '${named}', which is not among the tools (${tools.map((t) => t.name).join(', ') || 'none given'})`,
      'tool_choice',
    );
  }
  return {
    mode: { kind: 'named', name: named },
    constraint: jsonConstraint(parametersOf(tool)),
    parallelToolCalls: parallel,
  };
}

/** The function name of a named tool choice (chat's nested or Responses' flat form), or null. */
function namedChoice(v: unknown): string | null {
  if (typeof v !== 'object' || v === null) return null;
  const o = v as { type?: unknown; function?: { name?: unknown }; name?: unknown };
  if (o.type !== 'function') return null;
  const name = typeof o.function === 'object' && o.function !== null ? o.function.name : o.name;
  return typeof name === 'string' && name !== '' ? name : null;
}

/** A fresh tool-call parser for one choice in `mode`, or null for `none`. */
export function toolParserFor(mode: ToolMode, newId: ToolCallIdSource): ToolCallParser | null {
  switch (mode.kind) {
    case 'none':
      return null;
    case 'auto':
      return createToolCallParser(mode.parser, newId);
    case 'required':
      return new JsonCallsParser(JSON_ARRAY_LAYOUT, newId);
    case 'named':
      return new NamedCallParser(mode.name, newId);
  }
}
