/**
 * What a simulated rank "says" to one request (issue #11 part 7), decided from what a real rank has too: the prompt
 * token ids (decoded with the rank's tokenizer) and the structured-output constraint of the sampling parameters.
 *
 * - A constraint wins, as a grammar would force it: a JSON schema → a document valid against it; a JSON object →
 *   a small object; a regex → a matching string; a choice → one of the strings (schema-instance.ts). Grammar and
 *   structural-tag constraints are carried on the wire but not interpreted: the sim writes ordinary text for them.
 * - Otherwise, when the prompt declares tools (the Qwen3 / Hermes layout: `<tools>` followed by one JSON tool per line)
 *   and the last user turn is not a tool result (`<tool_response>`), the rank calls tools in its tool-call format
 *   (`hermes`: `<tool_call>` JSON blocks; `llama3_json`: `{"name", "parameters"}` objects joined by `; `): the tools
 *   the last user turn names, in the order named, else the first tool; arguments generated from each tool's
 *   parameters schema.
 * - After a tool result the rank answers in text that starts by quoting the result ("According to the tool, …"), so
 *   a client's tool round trip is visible in the answer; then the usual corpus text.
 * - With `reasoning` on, the answer is preceded by a `<think>` block, unless the prompt already closed one (Qwen3's
 *   `enable_thinking: false`); when the prompt opened `<think>` itself, the rank continues inside it and closes it.
 *   A constrained answer has no reasoning (the grammar applies from the first token).
 */
import type { StructuredConstraint } from '../protocols/types.js';
import { instanceOf, stringForRegex } from './schema-instance.js';
import type { Prng } from './prng.js';

/** The tool-call formats a simulated rank can write (`--tool-call-format`); `none` never calls tools. */
export const SIM_TOOL_CALL_FORMATS = ['hermes', 'llama3_json', 'none'] as const;
export type SimToolCallFormat = (typeof SIM_TOOL_CALL_FORMATS)[number];

/** How a simulated rank behaves as a model. */
export interface SimModelBehaviour {
  toolCallFormat: SimToolCallFormat;
  /** Write `<think>` blocks before answers (`--reasoning`). */
  reasoning: boolean;
}

/** The default behaviour: Hermes tool calls (the bundled Qwen3's format), no reasoning. */
export const DEFAULT_SIM_BEHAVIOUR: Readonly<SimModelBehaviour> = Object.freeze({
  toolCallFormat: 'hermes',
  reasoning: false,
});

/**
 * The plan of one response: `fixed` text followed by EOS, or `corpus` sentences preceded by `prefix` (a reasoning
 * block and/or a quoted tool result; may be '').
 */
export type ResponsePlan = { kind: 'fixed'; text: string } | { kind: 'corpus'; prefix: string };

interface DeclaredTool {
  name: string;
  parameters: unknown;
}

/**
 * The tools declared in a Qwen3/Hermes-layout prompt: every `<tools>` … `</tools>` block (the instructions mention
 * an empty pair first), one JSON tool per line.
 */
export function declaredTools(prompt: string): DeclaredTool[] {
  const out: DeclaredTool[] = [];
  const lines = [...prompt.matchAll(/<tools>([\s\S]*?)<\/tools>/g)].flatMap((m) => m[1]!.split('\n'));
  for (const line of lines) {
    if (line.trim() === '') continue;
    try {
      const t = JSON.parse(line) as {
        function?: { name?: unknown; parameters?: unknown };
        name?: unknown;
        parameters?: unknown;
      };
      const fn = t.function ?? t;
      if (typeof fn.name === 'string')
        out.push({ name: fn.name, parameters: fn.parameters ?? { type: 'object', properties: {} } });
    } catch {
      // Not a JSON line: not a tool.
    }
  }
  return out;
}

/** The text of the last user turn (ChatML `<|im_start|>user`), or '' when none. */
function lastUserTurn(prompt: string): string {
  const at = prompt.lastIndexOf('<|im_start|>user');
  if (at < 0) return '';
  const end = prompt.indexOf('<|im_end|>', at);
  return prompt.slice(at + '<|im_start|>user'.length, end < 0 ? undefined : end);
}

/** The content of the last `<tool_response>` in `turn`, trimmed, or null. */
function lastToolResponse(turn: string): string | null {
  const at = turn.lastIndexOf('<tool_response>');
  if (at < 0) return null;
  const end = turn.indexOf('</tool_response>', at);
  return turn.slice(at + '<tool_response>'.length, end < 0 ? undefined : end).trim();
}

const THOUGHTS = [
  'The user wants an answer; I will keep it short and clear.',
  'Let me think about what is being asked before answering.',
  'I should check the request once more and then reply.',
];

/** The reasoning block to write before an answer (see the module comment), or ''. */
function reasoningPrefix(prompt: string, behaviour: SimModelBehaviour, prng: Prng): string {
  if (!behaviour.reasoning) return '';
  const tail = prompt.trimEnd();
  if (tail.endsWith('</think>')) return '';
  const thought = THOUGHTS[prng.int(0, THOUGHTS.length - 1)]!;
  return tail.endsWith('<think>') ? `${thought}\n</think>\n\n` : `<think>\n${thought}\n</think>\n\n`;
}

/**
 * The text of a constrained answer; null for plain text (a grammar or structural tag, or a constraint the sim
 * cannot follow, such as an invalid regex: a rank never drops a request over its own generator).
 */
function constrainedText(c: StructuredConstraint, prng: Prng): string | null {
  try {
    return constrainedTextOrThrow(c, prng);
  } catch {
    return null;
  }
}

function constrainedTextOrThrow(c: StructuredConstraint, prng: Prng): string | null {
  switch (c.kind) {
    case 'json': {
      let schema = c.schema;
      if (typeof schema === 'string') {
        try {
          schema = JSON.parse(schema) as unknown;
        } catch {
          schema = {};
        }
      }
      return JSON.stringify(instanceOf(schema, prng));
    }
    case 'json_object':
      return JSON.stringify({ answer: 'ok', value: prng.int(1, 99) });
    case 'regex':
      return stringForRegex(c.pattern, prng);
    case 'choice':
      return c.choices[prng.int(0, c.choices.length - 1)] ?? '';
    case 'grammar':
    case 'structural_tag':
      return null;
  }
}

/** The calls to make for `turn`: the declared tools it names, in the order named, else the first tool. */
function toolsToCall(tools: readonly DeclaredTool[], turn: string): DeclaredTool[] {
  const named = tools
    .map((t) => ({ t, at: turn.indexOf(t.name) }))
    .filter((x) => x.at >= 0)
    .sort((a, b) => a.at - b.at)
    .map((x) => x.t);
  return named.length > 0 ? named : tools.slice(0, 1);
}

/** Tool calls written in `format`. */
function callText(calls: readonly DeclaredTool[], format: Exclude<SimToolCallFormat, 'none'>, prng: Prng): string {
  const args = calls.map((t) => JSON.stringify(instanceOf(t.parameters, prng)));
  if (format === 'hermes') {
    return calls
      .map((t, i) => `<tool_call>\n{"name": ${JSON.stringify(t.name)}, "arguments": ${args[i]}}\n</tool_call>`)
      .join('\n');
  }
  return calls.map((t, i) => `{"name": ${JSON.stringify(t.name)}, "parameters": ${args[i]}}`).join('; ');
}

/** Decide the response to `prompt` (decoded text) under `constraint` (null: free text). */
export function planResponse(
  prompt: string,
  constraint: StructuredConstraint | null,
  behaviour: SimModelBehaviour,
  prng: Prng,
): ResponsePlan {
  if (constraint !== null) {
    const text = constrainedText(constraint, prng);
    if (text !== null) return { kind: 'fixed', text };
  }
  const prefix = reasoningPrefix(prompt, behaviour, prng);
  const turn = lastUserTurn(prompt);
  const result = lastToolResponse(turn);
  if (result !== null) return { kind: 'corpus', prefix: `${prefix}According to the tool, ${result.slice(0, 120)}.` };
  const tools = behaviour.toolCallFormat === 'none' ? [] : declaredTools(prompt);
  if (tools.length > 0 && behaviour.toolCallFormat !== 'none') {
    return { kind: 'fixed', text: prefix + callText(toolsToCall(tools, turn), behaviour.toolCallFormat, prng) };
  }
  return { kind: 'corpus', prefix };
}
