/**
 * The output parsers by name (`--tool-call-parser`, `--reasoning-parser`, as vLLM names them), the default tool-call
 * parser read off a chat template, and tool call ids.
 */
import { randomBytes } from 'node:crypto';
import { HermesToolParser } from './hermes.js';
import { JsonCallsParser, LLAMA3_JSON_LAYOUT } from './json-calls.js';
import { ThinkTagParser, type ReasoningParserName, type ReasoningStart } from './reasoning.js';
import type { ReasoningParser, ToolCallIdSource, ToolCallParser } from './types.js';

export {
  REASONING_PARSER_NAMES,
  reasoningStartFor,
  type ReasoningParserName,
  type ReasoningStart,
} from './reasoning.js';
export type { ReasoningParser, ReasoningSplit, ToolCallIdSource, ToolCallParser, ToolParseEvent } from './types.js';

/** The tool-call parsers the gateway offers (vLLM's names). */
export const TOOL_CALL_PARSER_NAMES = ['hermes', 'llama3_json'] as const;
export type ToolCallParserName = (typeof TOOL_CALL_PARSER_NAMES)[number];

/** A fresh parser `name` for one message. */
export function createToolCallParser(name: ToolCallParserName, newId: ToolCallIdSource): ToolCallParser {
  return name === 'hermes' ? new HermesToolParser(newId) : new JsonCallsParser(LLAMA3_JSON_LAYOUT, newId);
}

/** A fresh reasoning parser for one message, starting as `start` decided (`reasoningStartFor`). */
export function createReasoningParser(_name: ReasoningParserName, start: ReasoningStart): ReasoningParser {
  return new ThinkTagParser(start);
}

/**
 * The tool-call parser a chat template asks for, when exactly one family's markers appear in it: `<tool_call>`
 * (Hermes / Qwen) → `hermes`; `<|python_tag|>` (Llama 3.1+) → `llama3_json`. Returns null when none or several
 * match (Mistral's `[TOOL_CALLS]` has no parser here: null too), and `ambiguous` lists what matched.
 */
export function toolCallParserForTemplate(templates: readonly string[]): {
  parser: ToolCallParserName | null;
  matched: string[];
} {
  const text = templates.join('\n');
  const matched: ToolCallParserName[] = [];
  if (text.includes('<tool_call>')) matched.push('hermes');
  if (text.includes('<|python_tag|>')) matched.push('llama3_json');
  return { parser: matched.length === 1 ? matched[0]! : null, matched };
}

const ID_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** A tool call id as OpenAI writes them: `call_` and 24 random letters and digits. */
export function newToolCallId(): string {
  const bytes = randomBytes(24);
  let out = 'call_';
  for (const b of bytes) out += ID_ALPHABET[b % ID_ALPHABET.length];
  return out;
}
