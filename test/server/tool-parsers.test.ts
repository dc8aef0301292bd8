/**
 * The tool-call parsers on tricky text (issue #11 "Done when"): markup split across deltas at every position,
 * several calls in one message, text before/between/after calls, malformed JSON left as content, truncated calls,
 * and the streaming shape (id + name once, then argument fragments). Every case is fed whole, split at every
 * position, and one character at a time; all must give the same message.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { HermesToolParser } from '../../src/server/parsers/hermes.js';
import { JsonCallsParser, JSON_ARRAY_LAYOUT, LLAMA3_JSON_LAYOUT } from '../../src/server/parsers/json-calls.js';
import { NamedCallParser } from '../../src/server/parsers/named-call.js';
import { newToolCallId, toolCallParserForTemplate } from '../../src/server/parsers/index.js';
import type { ToolCallParser, ToolParseEvent } from '../../src/server/parsers/types.js';

interface Message {
  content: string;
  calls: { name: string; arguments: string }[];
}

function assemble(events: readonly ToolParseEvent[]): Message & { ids: string[] } {
  const out: Message & { ids: string[] } = { content: '', calls: [], ids: [] };
  for (const e of events) {
    if (e.kind === 'content') out.content += e.text;
    else if (e.kind === 'call') {
      assert.equal(e.index, out.calls.length, 'calls are announced in index order, each once');
      out.calls.push({ name: e.name, arguments: '' });
      out.ids.push(e.id);
    } else {
      assert.ok(e.index < out.calls.length, 'arguments follow their call');
      out.calls[e.index]!.arguments += e.text;
    }
  }
  return out;
}

function feed(make: () => ToolCallParser, parts: readonly string[]): ToolParseEvent[] {
  const p = make();
  const events: ToolParseEvent[] = [];
  for (const part of parts) events.push(...p.push(part));
  events.push(...p.finish());
  return events;
}

/** Every split of `text`: whole, at each position in two, and char by char (code points). */
function splits(text: string): string[][] {
  const out: string[][] = [[text]];
  for (let i = 1; i < text.length; i++) out.push([text.slice(0, i), text.slice(i)]);
  out.push([...text]);
  return out;
}

let counter = 0;
const ids = () => `call_${++counter}`;

function check(make: () => ToolCallParser, text: string, expected: Message): void {
  for (const parts of splits(text)) {
    const got = assemble(feed(make, parts));
    assert.deepEqual(
      { content: got.content, calls: got.calls },
      expected,
      `split ${JSON.stringify(parts.slice(0, 3))}…`,
    );
  }
}

const hermes = () => new HermesToolParser(ids);
const llama = () => new JsonCallsParser(LLAMA3_JSON_LAYOUT, ids);
const array = () => new JsonCallsParser(JSON_ARRAY_LAYOUT, ids);

describe('hermes', () => {
  test('plain text comes back exactly (no markup)', () => {
    check(hermes, 'Hello there.\n\nA <tag> and a < sign, then <tool and </tool_call> alone.  ', {
      content: 'Hello there.\n\nA <tag> and a < sign, then <tool and </tool_call> alone.  ',
      calls: [],
    });
  });

  test('one call, as Qwen writes it', () => {
    check(hermes, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>', {
      content: '',
      calls: [{ name: 'get_weather', arguments: '{"city": "Paris", "unit": "c"}' }],
    });
  });

  test('text before, between and after several calls; whitespace next to calls dropped', () => {
    const text =
      'Let me check.\n\n<tool_call>\n{"name": "a", "arguments": {"x": [1, {"y": "}"}]}}\n</tool_call>\n' +
      '<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>\nDone, see above.';
    check(hermes, text, {
      content: 'Let me check.Done, see above.',
      calls: [
        { name: 'a', arguments: '{"x": [1, {"y": "}"}]}' },
        { name: 'b', arguments: '{}' },
      ],
    });
  });

  test('strings with escaped quotes, braces and the closing tag text inside arguments', () => {
    check(hermes, '<tool_call>{"name": "say", "arguments": {"text": "he said \\"}\\" {ok}"}}</tool_call>', {
      content: '',
      calls: [{ name: 'say', arguments: '{"text": "he said \\"}\\" {ok}"}' }],
    });
  });

  test('malformed JSON is left as content, markup and all', () => {
    check(hermes, 'Before <tool_call>{name: get_weather}</tool_call> after', {
      content: 'Before <tool_call>{name: get_weather}</tool_call> after',
      calls: [],
    });
    check(hermes, '<tool_call>not json at all</tool_call>', {
      content: '<tool_call>not json at all</tool_call>',
      calls: [],
    });
    check(hermes, '<tool_call>{"arguments": {}}</tool_call>', {
      content: '<tool_call>{"arguments": {}}</tool_call>',
      calls: [],
    });
  });

  test('a malformed call next to a good one: the good one is a call, the bad one content', () => {
    check(hermes, '<tool_call>{"name": "ok", "arguments": {"a": 1}}</tool_call><tool_call>{oops}</tool_call>', {
      content: '<tool_call>{oops}</tool_call>',
      calls: [{ name: 'ok', arguments: '{"a": 1}' }],
    });
  });

  test('text after the JSON object inside the tags: a call drops it, a non-call keeps it as content; every split agrees', () => {
    // The object's own text decides (as for a committed header); nothing the model wrote is lost from a non-call.
    check(hermes, 'A <tool_call>{"name" "f"} oops {"x": 1}</tool_call> B', {
      content: 'A <tool_call>{"name" "f"} oops {"x": 1}</tool_call> B',
      calls: [],
    });
    check(hermes, '<tool_call>{"arguments": {"a": 1}, "name": "f"}}</tool_call>', {
      content: '',
      calls: [{ name: 'f', arguments: '{"a":1}' }],
    });
    check(hermes, '<tool_call>{"name": "f", "arguments": {"a": 1}}}</tool_call>', {
      content: '',
      calls: [{ name: 'f', arguments: '{"a": 1}' }],
    });
  });

  test('another key order is parsed whole at the end', () => {
    check(hermes, '<tool_call>\n{"arguments": {"q": "x"}, "name": "search"}\n</tool_call>', {
      content: '',
      calls: [{ name: 'search', arguments: '{"q":"x"}' }],
    });
  });

  test('no arguments key: {}; a string arguments value stays as written', () => {
    check(hermes, '<tool_call>{"name": "now"}</tool_call>', { content: '', calls: [{ name: 'now', arguments: '{}' }] });
    check(hermes, '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>', {
      content: '',
      calls: [{ name: 'f', arguments: '"{\\"a\\": 1}"' }],
    });
  });

  test('a truncated call (length finish) keeps what was written; a truncated header stays content', () => {
    check(hermes, 'Sure. <tool_call>\n{"name": "f", "arguments": {"city": "Par', {
      content: 'Sure.',
      calls: [{ name: 'f', arguments: '{"city": "Par' }],
    });
    check(hermes, 'Sure. <tool_call>\n{"name": "f', { content: 'Sure. <tool_call>\n{"name": "f', calls: [] });
  });

  test('streaming: the call is announced once with its id, then fragments arrive as the text does', () => {
    const p = hermes();
    const text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
    const perDelta = [...text].map((c) => p.push(c));
    perDelta.push(p.finish());
    const calls = perDelta.flat().filter((e) => e.kind === 'call');
    assert.equal(calls.length, 1);
    const fragments = perDelta.flat().filter((e) => e.kind === 'arguments');
    assert.ok(fragments.length > 5, 'arguments are streamed in many fragments, not at the end');
    const nameAt = perDelta.findIndex((evs) => evs.some((e) => e.kind === 'call'));
    assert.equal(
      text.slice(0, nameAt + 1).endsWith('"arguments":'),
      true,
      'announced as soon as the header is complete',
    );
    assert.ok(!perDelta.flat().some((e) => e.kind === 'content'), 'no markup leaks into content');
  });
});

describe('llama3_json', () => {
  test('one call with parameters, optional python tag', () => {
    const expected = { content: '', calls: [{ name: 'get_weather', arguments: '{"city": "Oslo"}' }] };
    check(llama, '{"name": "get_weather", "parameters": {"city": "Oslo"}}', expected);
    check(llama, '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}', expected);
  });

  test('several calls separated by semicolons', () => {
    check(llama, ' {"name": "a", "parameters": {"n": 1}}; {"name": "b", "arguments": {"s": "x;y"}}', {
      content: '',
      calls: [
        { name: 'a', arguments: '{"n": 1}' },
        { name: 'b', arguments: '{"s": "x;y"}' },
      ],
    });
  });

  test('text that does not start with a call is content, even with JSON later', () => {
    check(llama, 'Here is JSON: {"name": "a", "parameters": {}}', {
      content: 'Here is JSON: {"name": "a", "parameters": {}}',
      calls: [],
    });
  });

  test('a JSON object that is not a call is content; text after calls is content', () => {
    check(llama, '{"answer": 42}', { content: '{"answer": 42}', calls: [] });
    check(llama, '{"name": "a", "parameters": {}} and then words', {
      content: 'and then words',
      calls: [{ name: 'a', arguments: '{}' }],
    });
  });
});

describe('llama3_json: text right after a non-call object', () => {
  test('comes back once, in any split (a delta holding the closing brace and more text)', () => {
    check(llama, '{"answer": 42}. Hope this helps!', { content: '{"answer": 42}. Hope this helps!', calls: [] });
    check(llama, '{"answer": 42}.\n', { content: '{"answer": 42}.\n', calls: [] });
  });
});

describe('forced modes (tool_choice required / named)', () => {
  test('required: the constrained JSON array becomes calls', () => {
    check(array, '[{"name": "a", "parameters": {"x": 1}}, {"name": "b", "parameters": {}}]', {
      content: '',
      calls: [
        { name: 'a', arguments: '{"x": 1}' },
        { name: 'b', arguments: '{}' },
      ],
    });
  });

  test('named: the whole output is the arguments of one call', () => {
    check(() => new NamedCallParser('get_weather', ids), ' {"city": "Rome"}', {
      content: '',
      calls: [{ name: 'get_weather', arguments: '{"city": "Rome"}' }],
    });
    check(() => new NamedCallParser('now', ids), '', { content: '', calls: [{ name: 'now', arguments: '{}' }] });
  });
});

describe('parser registry', () => {
  test('the default parser is read off the chat template when unambiguous', () => {
    assert.deepEqual(toolCallParserForTemplate(['... <tool_call>\n{"name": ...}</tool_call> ...']).parser, 'hermes');
    assert.deepEqual(toolCallParserForTemplate(['{{- "<|python_tag|>" + tool_call.name }}']).parser, 'llama3_json');
    assert.equal(toolCallParserForTemplate(['plain {{ messages }}']).parser, null);
    const both = toolCallParserForTemplate(['<tool_call>', '<|python_tag|>']);
    assert.equal(both.parser, null);
    assert.deepEqual(both.matched, ['hermes', 'llama3_json']);
  });

  test('tool call ids look like OpenAI ones and differ', () => {
    const a = newToolCallId();
    assert.match(a, /^call_[A-Za-z0-9]{24}$/);
    assert.notEqual(a, newToolCallId());
  });
});
